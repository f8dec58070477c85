"""End to end (issue 8): the verdict follows a change of phase, even once sampling has settled, because a
change in the cheap per-tick signals wakes the sampler. How soon (the goal: within 5 s) is a figure for
docs/benchmarks.md, printed here and appended to $GPUTOP_PHASE_LATENCY_LOG when set, not an assertion: on a crowded
machine it depends on how fast py-spy and the target run.

A real target prepares data on its main thread (a tokenize-like Python loop) until the test sends it SIGUSR1,
then trains an MLP on the CPU. The real command watches it, headless and recording. The test waits for states,
not for guessed times: the verdict is data_bound and py-spy runs at the settled rate in a window that has
been going for a while (the case where, before the wake, the new phase waited for the window to end). Then it
switches the target and measures, on the recording's frames folded by probes.monitoring.monitor.fold, the time from the
switch (the target prints it) to the verdict turning cpu_bound.

The second test (issue 19) is the switch that only the stacks show: with ``--torch-threads 1`` the main thread
computes at 100% CPU in both phases, so no CPU, I/O or wake-up signal moves, and the settled dumps' stack check
must wake the sampler. Its latency goes to $GPUTOP_STACK_PHASE_LATENCY_LOG.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.processes import wait_for
from support.recorded import frames_so_far
from support.settled_window import settled_window

from probes.monitoring.monitor import fold
from probes.sampling.sampling_policy import DETECTOR_MIN_HISTORY

REPO = Path(__file__).resolve().parents[2]
SETTLED_WINDOW_RUNNING_S = 2.0  # how long the settled window has run when the test switches the target
TICK_S = 1.0  # the command's default tick: the detector sees one reading of the cheap signals a tick


def _ready(proc) -> bool:
    return proc.stdout.readline().strip() == "ready"


def _verdict(path: Path) -> str | None:
    frames = frames_so_far(path)
    return fold(frames).view.verdict.bottleneck if frames else None


def _settled_window_age(monitor_pid: int, target_pid: int) -> float | None:
    """How long the monitor's py-spy record window on the target has run, if it runs at the settled rate."""
    window = settled_window(monitor_pid, target_pid)
    return window[1] if window is not None else None


def _switch_and_measure(spawn_target, tmp_path, *target_args: str, log_variable: str):
    """Watch phase_switch.py until settled and data_bound, switch it, wait for cpu_bound; print what the frames
    around the switch show and the latency (appended to $log_variable). (frames, switch time, target PID)."""
    target = spawn_target("phase_switch.py", "--seconds", "280", *target_args, stdout=subprocess.PIPE, text=True,
                          ready=_ready, timeout=60)
    record, snapshot = tmp_path / "run.jsonl", tmp_path / "snap.json"
    monitor = subprocess.Popen(
        [sys.executable, "-m", "tui", "--pid", str(target.pid), "--snapshot", str(snapshot), "--duration", "240",
         "--record", str(record), "--no-gpu"],
        env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        assert wait_for(lambda: _verdict(record) == "data_bound", timeout=120, interval=0.5), _verdict(record)

        def settled_for_a_while() -> bool:
            age = _settled_window_age(monitor.pid, target.pid)
            return age is not None and age >= SETTLED_WINDOW_RUNNING_S

        assert wait_for(settled_for_a_while, timeout=120, interval=0.2), "py-spy never settled to the slow rate"
        assert _verdict(record) == "data_bound"
        os.kill(target.pid, signal.SIGUSR1)
        line = target.stdout.readline().strip()
        assert line.startswith("switched "), line
        switched_at = float(line.split()[1])
        print(f"\ntarget switched from data preparation to compute at {switched_at:.3f}")

        def cpu_bound_since_switch() -> bool:
            view = fold(frames_so_far(record)).view
            return view is not None and any(c.bottleneck == "cpu_bound" and c.time >= switched_at
                                            for c in view.timeline)

        wait_for(cpu_bound_since_switch, timeout=30, interval=0.5)
    finally:
        monitor.send_signal(signal.SIGTERM)  # headless: stop now and write the snapshot
        _, stderr = monitor.communicate(timeout=60)
    assert monitor.returncode == 0, stderr

    frames = frames_so_far(record)
    view = fold(frames).view
    for frame in frames:
        if frame.time >= switched_at - 3 and (frame.stacks.phase_change or frame.time <= switched_at + 8):
            mark = f"  phase change: {frame.stacks.phase_change}" if frame.stacks.phase_change else ""
            main = frame.process(target.pid)
            cpu = (main.cpu_pct, main.main_thread_cpu_pct, main.main_thread_runqueue_pct) if main else (None,) * 3
            print(f"  frame {frame.seq} at switch{frame.time - switched_at:+.2f} s: {frame.stacks.samples} samples, "
                  "CPU %s%%, main thread %s%% on a CPU, %s%% queued" % tuple(f"{v:.0f}" if v is not None else "?"
                                                                             for v in cpu) + mark)
    change = next((c for c in view.timeline if c.bottleneck == "cpu_bound" and c.time >= switched_at), None)
    assert change is not None, [(c.time - switched_at, c.bottleneck) for c in view.timeline]
    latency = change.time - switched_at
    print(f"verdict data_bound -> cpu_bound {latency:.2f} s after the switch")
    log = os.environ.get(log_variable)
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"{latency:.2f}\n")
    return frames, switched_at, target.pid


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_verdict_follows_a_switch_from_data_preparation_to_compute_within_5_s(spawn_target, tmp_path):
    frames, switched_at, _ = _switch_and_measure(spawn_target, tmp_path, log_variable="GPUTOP_PHASE_LATENCY_LOG")
    # The mechanism, not the clock: the sampler was woken by the switch (a reading after it is marked), or was awake at
    # it: a move of the machine's load marked a reading just before (a loaded CI run: 0.41 s before the switch, after
    # the test had seen the settled window), after which the detector compares only the ticks since, so it cannot see
    # a switch within its first DETECTOR_MIN_HISTORY ticks, and py-spy looks closely already.
    awake_since = switched_at - DETECTOR_MIN_HISTORY * TICK_S
    marks = [(f.time - switched_at, f.stacks.phase_change) for f in frames if f.stacks.phase_change]
    assert any(moment >= awake_since - switched_at for moment, _ in marks), ("the switch never woke the sampler", marks)


STACK_ONLY_ATTEMPTS = 3  # switches (back and forth) until one is not first seen by a cheap signal
VERDICT_OF_PHASE = {"data": "data_bound", "compute": "cpu_bound"}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_verdict_follows_a_switch_only_the_main_threads_stack_shows(spawn_target, tmp_path):
    """The main thread computes at 100% CPU in both phases, so the stack check must wake the sampler. On a
    machine whose load changes, a neighbour's load lifting at the switch can move the cheap signals first
    (seen twice in fifteen runs: the target's CPU going from 51% to 86% of a core); then the test waits for the
    verdict, lets sampling settle again and switches back, up to STACK_ONLY_ATTEMPTS times, and asserts that a
    switch was followed through a stack-check mark."""
    target = spawn_target("phase_switch.py", "--seconds", "560", "--torch-threads", "1", stdout=subprocess.PIPE,
                          text=True, ready=_ready, timeout=60)
    record, snapshot = tmp_path / "run.jsonl", tmp_path / "snap.json"
    monitor = subprocess.Popen(
        [sys.executable, "-m", "tui", "--pid", str(target.pid), "--snapshot", str(snapshot), "--duration", "540",
         "--record", str(record), "--no-gpu"],
        env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    followed: list[tuple[float, str]] = []  # (latency, the first mark after the switch)
    phase = "data"
    try:
        for _ in range(STACK_ONLY_ATTEMPTS):
            before, after = VERDICT_OF_PHASE[phase], VERDICT_OF_PHASE["compute" if phase == "data" else "data"]
            assert wait_for(lambda expected=before: _verdict(record) == expected, timeout=120, interval=0.5)

            def settled_for_a_while() -> bool:
                age = _settled_window_age(monitor.pid, target.pid)
                return age is not None and age >= SETTLED_WINDOW_RUNNING_S

            assert wait_for(settled_for_a_while, timeout=120, interval=0.2), "py-spy never settled to the slow rate"
            os.kill(target.pid, signal.SIGUSR1)
            line = target.stdout.readline().strip()
            assert line.startswith("switched "), line
            switched_at, phase = float(line.split()[1]), line.split()[2]

            def turned(expected: str = after, since: float = switched_at) -> float | None:
                view = fold(frames_so_far(record)).view
                return next((c.time for c in (view.timeline if view else ()) if c.bottleneck == expected
                             and c.time >= since), None)

            turned_at = wait_for(turned, timeout=60, interval=0.5)
            assert turned_at is not None, f"the verdict never turned {after} after the switch to {phase}"
            marks = [f.stacks.phase_change for f in frames_so_far(record) if f.time >= switched_at
                     and f.time <= turned_at and f.stacks.phase_change]
            print(f"\nswitch to {phase}: verdict {before} -> {after} {turned_at - switched_at:.2f} s after it; "
                  f"marks: {marks}")
            for frame in frames_so_far(record):
                if switched_at - 2 <= frame.time <= turned_at:
                    main = frame.process(target.pid)
                    print(f"  frame {frame.seq} at switch{frame.time - switched_at:+.2f} s: {frame.stacks.samples} "
                          f"samples, CPU {main.cpu_pct if main else None}" +
                          (f"  phase change: {frame.stacks.phase_change}" if frame.stacks.phase_change else ""))
            if marks and ": main thread's stack moved (" in marks[0]:
                followed.append((turned_at - switched_at, marks[0]))
                break
    finally:
        monitor.send_signal(signal.SIGTERM)  # headless: stop now and write the snapshot
        _, stderr = monitor.communicate(timeout=60)
    assert monitor.returncode == 0, stderr
    # The mechanism, not the clock: a settled window was ended early because dumps caught the main thread in
    # functions its recent windows never saw (the cheap signals had nothing to say).
    assert followed, f"no switch of {STACK_ONLY_ATTEMPTS} was followed through a stack check"
    latency, mark = followed[0]
    assert mark.startswith(f"PID {target.pid}: main thread's stack moved ("), mark
    print(f"followed through the stack check {latency:.2f} s after the switch")
    log = os.environ.get("GPUTOP_STACK_PHASE_LATENCY_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"{latency:.2f}\n")
