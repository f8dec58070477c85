"""`gputop replay REC --snapshot OUT` ends as a headless live run does: its last line on stderr is the verdict in the
TUI's words (tui/commands/shared.py tell_verdict), the same verdict as the snapshot's, once; with `--snapshot -` the
JSON alone goes to stdout. Run through the command line's own entry point (tui/cli.py run) on recordings kept in
tests/fixtures: a hung demo target and a real GPT-2 XL run on an H200.
"""

from __future__ import annotations

import json

import pytest
from support.h200 import recording
from support.pilot import RECORDINGS
from support.verdict_line import check_verdict_line

from tui.cli import run


def check_ends_with_the_verdict(stderr: str, snapshot: dict) -> None:
    lines = stderr.splitlines()
    assert lines, stderr
    check_verdict_line(lines[-1], snapshot)
    assert sum(1 for line in lines if line.startswith("gputop: verdict: ")) == 1, stderr


@pytest.mark.parametrize("name", ["hung", "gpt2xl_s2"])
def test_replay_to_a_snapshot_ends_with_the_verdict_on_stderr(name, tmp_path, capsys):
    path = RECORDINGS / f"{name}.jsonl" if name == "hung" else recording(name, tmp_path)
    out = tmp_path / "out.json"
    assert run(["replay", str(path), "--snapshot", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    check_ends_with_the_verdict(captured.err, json.loads(out.read_text()))

    assert run(["replay", str(path), "--snapshot", "-"]) == 0  # the JSON to stdout, the verdict still on stderr
    captured = capsys.readouterr()
    check_ends_with_the_verdict(captured.err, json.loads(captured.out))
