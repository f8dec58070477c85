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

from probes.frame import Verdict
from tui.cli import run
from tui.panes.text import gain_words, liveness_words, verdict_name


def said_verdict(snapshot: dict) -> tuple[str, str, str | None]:
    """What the verdict line of the snapshot's verdict starts with, its confidence's words, and its gain's."""
    verdict = snapshot["verdict"]
    start = f"gputop: verdict: {verdict_name(verdict['bottleneck'], verdict['liveness'])}"
    if verdict["bottleneck"] != "unknown" or verdict["liveness"] not in ("hung", "exited"):
        start += f" · {liveness_words(verdict['liveness'])}"
    gain = gain_words(Verdict(bottleneck=verdict["bottleneck"], max_speedup=verdict["max_speedup"]))
    return start, f"{verdict['confidence']:.0%} sure", gain


def check_ends_with_the_verdict(stderr: str, snapshot: dict) -> None:
    lines = stderr.splitlines()
    start, sure, gain = said_verdict(snapshot)
    assert lines and lines[-1].startswith(start) and sure in lines[-1], (stderr, snapshot["verdict"])
    assert lines[-1].endswith(gain) if gain is not None else "×" not in lines[-1], lines[-1]
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
