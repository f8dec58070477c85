"""gputop compare end to end: two real CPU training runs of a small GPT configured as nanoGPT is (the same tokens
per iteration, one three times as wide, split into micro-batches differently: the seed case of issue 18 scaled
down), each recorded by the real command (`python -m tui --pid P --snapshot OUT --record REC`) until its
recording holds enough frames with the job's pace (never a fixed wait), then compared by the real
`gputop compare`: the recordings, and the training logs themselves."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, stop_process_tree, wait_for

from probes.models.gpt2 import FAMILY, GptShape
from probes.recording import load_recording

TIMEOUT_S = 120.0
PACED_FRAMES = 3  # frames that carry the job's pace: the recording's pace is the job's, not a first guess
SHARED = ("--block_size=32", "--n_layer=2", "--vocab_size=256")
NARROW = ("--batch_size=8", "--gradient_accumulation_steps=2", "--n_embd=32", "--n_head=2", *SHARED)
WIDE = ("--batch_size=4", "--gradient_accumulation_steps=4", "--n_embd=96", "--n_head=4", *SHARED)

# Two runs, each started, recorded until paced, and stopped, each wait bounded by TIMEOUT_S.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(4 * TIMEOUT_S + 60)]


def paced_and_sampled(recording: Path) -> bool:
    """The recording holds PACED_FRAMES frames with the job's pace, and stack samples (py-spy starts after the
    first ticks): what compare needs for the pace and the time shares."""
    frames = load_recording(recording).frames if recording.exists() else ()
    paced = sum(1 for frame in frames if frame.progress is not None and frame.progress.seconds_per_iter)
    return paced >= PACED_FRAMES and any(frame.stacks.counts for frame in frames)


def record_run(spawn_target, tmp_path: Path, name: str, settings: tuple[str, ...]) -> tuple[Path, Path]:
    """Train with `settings`, record it with gputop until it holds the pace and stacks; (recording, log)."""
    log, recording, snapshot = (tmp_path / f"{name}{suffix}" for suffix in (".log", ".jsonl", ".json"))
    with log.open("w") as handle:
        target = spawn_target("nanogpt_config_train.py", *settings, stdout=handle, stderr=subprocess.STDOUT,
                              timeout=TIMEOUT_S, ready=lambda proc: "iter 5:" in log.read_text())
    command = subprocess.Popen(
        [sys.executable, "-m", "tui", "--pid", str(target.pid), "--snapshot", str(snapshot), "--record",
         str(recording), "--duration", str(TIMEOUT_S + 30), "--no-gpu"],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    try:
        def recorded_enough() -> bool:
            if command.poll() is not None:
                pytest.fail(f"gputop exited with {command.returncode}: {command.stderr.read()}")
            return paced_and_sampled(recording)

        wait_for(recorded_enough, timeout=TIMEOUT_S, interval=0.5)
    finally:
        command.send_signal(signal.SIGTERM)
        _, stderr = command.communicate(timeout=60)
        stop_process_tree(target)
    assert command.returncode == 0, stderr
    return recording, log


def compare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tui", "compare", *args], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), check=False)


def test_two_real_runs_compared_say_the_wider_one_costs_more_per_token(spawn_target, tmp_path):
    narrow_recording, narrow_log = record_run(spawn_target, tmp_path, "narrow", NARROW)
    wide_recording, wide_log = record_run(spawn_target, tmp_path, "wide", WIDE)
    flop_ratio = (FAMILY.flops_per_token(GptShape(2, 4, 96, 32, 256))
                  / FAMILY.flops_per_token(GptShape(2, 2, 32, 32, 256)))

    done = compare(str(narrow_recording), str(wide_recording), "--label", "narrow,wide", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    narrow, wide = document["a"], document["b"]
    for run in (narrow, wide):
        assert run["kind"] == "recording"
        assert run["seconds_per_iter"] > 0 and run["liveness"] == "progressing"
        # the shape and the split come from the job's own command line (configurator.py's --key=value)
        assert run["tokens_per_iter"] == 512
        assert run["time_shares"], "the recording's main-thread stacks give its time shares"
    assert wide["flops_per_token"] / narrow["flops_per_token"] == pytest.approx(flop_ratio)
    assert wide["tokens_per_s"] < narrow["tokens_per_s"]  # 3.6× the FLOPs per token on the same CPU
    assert document["verdict"][0].startswith("wide is ")
    assert f"each of its tokens costs {flop_ratio:.1f}× the FLOPs (n_embd 32 → 96)" in document["verdict"][0]
    assert ("both train 512 tokens per iteration, split differently: batch_size 8 → 4, "
            "gradient_accumulation_steps 2 → 4") in document["verdict"]

    # the training logs alone say the same: their echoed overrides and tokens per iteration line
    from_logs = compare(str(narrow_log), str(wide_log), "--label", "narrow,wide")
    assert from_logs.returncode == 0, from_logs.stderr
    assert "wide is " in from_logs.stdout and f"costs {flop_ratio:.1f}× the FLOPs" in from_logs.stdout
    assert "512 (the log's tokens per iteration)" in from_logs.stdout
