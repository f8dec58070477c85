"""Waiting on the GPU is not idle (issue 29, item 4), on the real H200 runs of tests/fixtures/h200/: in a GPU-bound
nanoGPT step the main thread spends much of its time blocked in a CUDA synchronisation (backward's tail,
`loss.item()`) with the GIL released, which py-spy reports as idle. The time shares, the TUI's shares line and
`gputop compare` must call that time waiting for the GPU, and never list it as an idle share that changed."""

from __future__ import annotations

import json
from pathlib import Path

from support.h200 import fixture, recording

from probes.compare import compare_runs, load_run, render_text
from probes.diagnosis.shares import shares_summary
from probes.monitoring.monitor import fold
from probes.outputs.recording import read_recording

REPO = Path(__file__).resolve().parents[2]


def test_the_tui_shares_line_of_a_gpu_bound_run_says_gpu_wait(tmp_path):
    monitor = fold(read_recording(recording("gpt2xl_s2", tmp_path)), replay=True)
    line = shares_summary(monitor.view.shares)
    assert "GPU wait" in line and "idle" not in line, line


def test_compare_of_two_gpu_bound_snapshots_lists_no_idle_or_gpu_wait_difference(tmp_path):
    # Both seed-004 runs are gpu_bound at 100% GPU util; B's main thread waits on the GPU 49% of its samples.
    # Those snapshots were written before waiting for the GPU was a phase of its own: they say "idle".
    a = load_run(str(fixture("seed004_s_a.json")), "A")
    b = load_run(str(fixture("seed004_s_b.json")), "B")
    assert "idle" not in b.time_shares and b.time_shares["gpu_wait"] > 0.4, b.time_shares
    comparison = compare_runs(a, b)
    said = render_text(comparison)
    assert "idle" not in said, said
    # Computing and waiting for a saturated GPU are both the GPU's time: their split is no cause to list.
    assert not [line for line in comparison.verdict if "share" in line], comparison.verdict
    assert "main thread: GPU wait" in said
    # The same snapshot with its GPU quiet: the waiting is not on the GPU, and stays idle.
    document = json.loads(fixture("seed004_s_b.json").read_text())
    for device in document["gpus"]["devices"]:
        device["util_gpu_pct"] = 3.0
    document["verdict"]["bottleneck"] = "idle"
    quiet = tmp_path / "quiet.json"
    quiet.write_text(json.dumps(document))
    b = load_run(str(quiet), "B")
    assert b.time_shares.get("idle", 0.0) > 0.4
    assert any("idle share" in line for line in compare_runs(a, b).verdict)
