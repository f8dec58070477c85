"""End to end (issue 31): the verdict's words on real targets watched by the real command, claiming only what was
measured and no sooner than the evidence allows. Each test waits for a state of the recording (never a guessed
time) and replays its frames through the Monitor to read the verdict as it stood at each tick.

- a loop calling the same half-second matmul again and again is said as what the samples saw, never "one call";
- a job importing its modules for seconds is "starting", with no verdict, until its own code runs;
- a job whose log has been still for longer than the hang threshold, and whose CPU does not move, is hung from the
  first frames that can show it (the CPU counter needs two readings);
- a job that sleeps most of each step by design, beside two busy processes, is told what they cost it as measured
  (its main thread's wait for a CPU), never that it "gets 0.2 of its CPUs: other processes use the rest" (issue 38);
- a job tokenizing on its main thread beside two busy processes is not told to move the work to DataLoader workers,
  which would need the CPUs the others take (issue 38);
- a CPU training loop at torch's default threads beside a busy process is not told to set the threads it has
  (issue 38).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.cli import ready
from support.paths import REPO
from support.processes import busy_neighbours, start_logged, wait_for
from support.recorded import frames_so_far

from probes.diagnosis.verdict import THIN_SAMPLES
from probes.diagnosis.verdict_lines import kind_of
from probes.frame import Frame, Verdict
from probes.monitoring.monitor import Monitor

pytestmark = pytest.mark.slow

HANG_AFTER_S = 3.0


def _start_gputop(pid: int, folder: Path, *extra: str) -> tuple[subprocess.Popen, Path]:
    recording = folder / "frames.jsonl"
    command = subprocess.Popen(
        [sys.executable, "-m", "tui", "--pid", str(pid), "--snapshot", str(folder / "snapshot.json"), "--duration",
         "240", "--record", str(recording), "--no-gpu", *extra],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    return command, recording


def _stop(command: subprocess.Popen) -> None:
    command.terminate()
    _, stderr = command.communicate(timeout=60)
    assert command.returncode == 0, stderr


def _verdicts(frames: list[Frame], hang_after_s: float = 5.0) -> list[Verdict]:
    """The verdict shown after each frame, as the TUI would have shown it live."""
    monitor = Monitor(hang_after_s=hang_after_s)
    shown = []
    for frame in frames:
        monitor.ingest(frame)
        shown.append(monitor.view.verdict)
    return shown


def _watch_until(pid: int, folder: Path, reached, timeout: float = 240.0):
    """Run the gputop command on `pid` until `reached(verdicts)` (the verdicts shown so far, replayed from its
    recording as it grows) returns something; stop it; return (that, every verdict shown)."""
    command, recording = _start_gputop(pid, folder)
    try:
        found = wait_for(lambda: reached(_verdicts(frames_so_far(recording))), timeout=timeout, interval=1.0)
    finally:
        _stop(command)
    return found, _verdicts(frames_so_far(recording))


def _settled(bottleneck: str):
    """reached() for _watch_until: the latest verdict naming `bottleneck` on THIN_SAMPLES samples or more."""
    return lambda verdicts: next((v for v in reversed(verdicts)
                                  if v.bottleneck == bottleneck and (v.samples or 0) >= THIN_SAMPLES), None)


@pytest.mark.timeout(300)
def test_a_loop_calling_the_same_matmul_is_not_called_one_call(spawn_target, tmp_path):
    """repeated_call.py: work() is one half-second matmul, called again and again from the same line."""
    target = start_logged(spawn_target, tmp_path, "repeated_call.py", "--seconds", "0.5")
    command, recording = _start_gputop(target.pid, tmp_path)
    try:
        def said() -> Verdict | None:  # the still-stack line, in whatever words
            verdict = (_verdicts(frames_so_far(recording)) or [Verdict()])[-1]
            return verdict if verdict.evidence and "work (repeated_call.py:" in verdict.evidence[0] and \
                verdict.evidence[0].startswith(("every sample for ", "one call has run")) else None

        verdict = wait_for(said, timeout=180, interval=1.0)
    finally:
        _stop(command)
    print(f"\n{verdict.evidence[0]}")
    assert verdict.bottleneck == "cpu_bound" and verdict.liveness == "progressing"
    assert verdict.evidence[0].startswith("every sample for ")
    assert "one call" not in verdict.evidence[0] and "without returning" not in verdict.evidence[0]


@pytest.mark.timeout(300)
def test_a_job_importing_for_seconds_is_starting_with_no_verdict(spawn_target, tmp_path):
    target = spawn_target("slow_start.py", "--import-seconds", "8", stdout=subprocess.PIPE, text=True,
                          ready=lambda proc: proc.stdout.readline().strip() == "started", timeout=60)
    command, recording = _start_gputop(target.pid, tmp_path)
    try:
        line = target.stdout.readline().split()
        assert line[:1] == ["imported"], line
        imported_at = float(line[1])
        # its own code has run long enough for a verdict on it
        wait_for(lambda: any(v.bottleneck == "cpu_bound" for v in _verdicts(frames_so_far(recording))),
                 timeout=120, interval=1.0)
    finally:
        _stop(command)
    frames = frames_so_far(recording)
    shown = list(zip(frames, _verdicts(frames), strict=True))
    while_importing = [v for f, v in shown if f.time <= imported_at]
    for frame, verdict in shown:
        print(f"  {frame.time - imported_at:+.1f} s: {verdict.bottleneck} {verdict.confidence:.2f} "
              f"{verdict.evidence[:1]} gain {verdict.max_speedup}")
    assert any(v.evidence and v.evidence[0].startswith("starting: the main thread was importing modules in ")
               and "(from <module> (slow_start.py:" in v.evidence[0] for v in while_importing), while_importing
    assert all(v.bottleneck == "unknown" and v.max_speedup is None for v in while_importing)


@pytest.mark.timeout(300)
def test_a_log_still_for_longer_than_the_hang_threshold_is_hung_from_the_second_frame(spawn_target, tmp_path):
    log = tmp_path / "train.log"
    target = start_logged(spawn_target, tmp_path, "still_log.py", str(log))
    # The state the case needs: the log has been still for longer than the hang threshold.
    wait_for(lambda: time.time() - log.stat().st_mtime > HANG_AFTER_S + 1.0, timeout=60, interval=0.2)
    command, recording = _start_gputop(target.pid, tmp_path, "--log", str(log), "--hang-after", str(HANG_AFTER_S))
    try:
        wait_for(lambda: len(frames_so_far(recording)) >= 3, timeout=60, interval=0.2)
    finally:
        _stop(command)
    frames = frames_so_far(recording)
    verdicts = _verdicts(frames, hang_after_s=HANG_AFTER_S)
    for frame, verdict in zip(frames, verdicts, strict=True):
        print(f"  frame {frame.seq}: {verdict.liveness} {verdict.confidence:.2f} {verdict.evidence[:1]}")
    # The first frame with two readings of the CPU counter behind it shows the hang.
    measured = next(i for i, f in enumerate(frames) if (p := f.process(target.pid)) is not None and
                    p.cpu_pct is not None)
    hung = verdicts[measured]
    assert hung.liveness == "hung", [v.liveness for v in verdicts]
    assert hung.evidence[0].startswith("no log line for ") and " (the log's last write), no CPU used in the " \
        in hung.evidence[0], hung.evidence[0]


@pytest.mark.timeout(300)
def test_a_rate_limited_job_beside_busy_processes_is_told_what_they_cost_it(spawn_target, tmp_path):
    """Issue 38, item 8: rate_limited.py computes 20 ms of each 0.1 s step and sleeps the rest by design; two `yes`
    processes keep the two CPUs busy. The CPUs shared with other work are said with what was measured of their cost,
    the main thread's wait for a CPU (schedstat), and its advice never says the job lacks the CPUs it leaves free."""
    # The state: a verdict that says what the others cost, as advice with the wait or as "not short".
    def cost_said(verdicts):
        return any(kind_of(line) == "contention" and ("not short" in line or "waited" in line)
                   for v in verdicts for line in (*v.evidence, *v.advice))

    with busy_neighbours(2):
        target = spawn_target("rate_limited.py", stdout=subprocess.PIPE, ready=ready)
        _, verdicts = _watch_until(target.pid, tmp_path, cost_said)
    said = [line for v in verdicts for line in (*v.evidence, *v.advice) if kind_of(line) == "contention"]
    assert not any("use the rest" in line for line in said), said
    tips = {line for v in verdicts for line in v.advice if kind_of(line) == "contention"}
    for tip in tips:
        assert re.search(r"main thread waited for a CPU \d+% of the time: find them", tip), tip
    print(f"said of the CPUs shared: {sorted(set(said))}")


@pytest.mark.timeout(300)
def test_main_thread_data_work_beside_busy_processes_is_not_sent_to_workers_with_no_cpu(spawn_target, tmp_path):
    """Issue 38, item 10: diag_tokenize.py tokenizes on its main thread; two `yes` processes take the CPUs a worker
    would run on."""
    with busy_neighbours(2):
        target = start_logged(spawn_target, tmp_path, "diag_tokenize.py")
        settled, _ = _watch_until(target.pid, tmp_path, _settled("data_bound"))
    said = "\n".join(settled.evidence)
    assert "no CPU is left for DataLoader workers beside the step" in said, said
    assert not any("runs it in parallel" in line for line in settled.advice), settled.advice
    assert settled.advice[0].startswith("Do it once, offline: pre-tokenize"), settled.advice


@pytest.mark.timeout(300)
def test_cpu_training_at_torchs_default_threads_is_not_told_to_set_them(spawn_target, tmp_path):
    """Issue 38, item 7: diag_cpu_train.py at torch's default threads (the 2 CPUs it may use), a `yes` process on
    one of them: the job gets about 1 of its 2 CPUs, and set_num_threads(2) is what it already runs with."""
    with busy_neighbours(1):
        target = start_logged(spawn_target, tmp_path, "diag_cpu_train.py")
        settled, _ = _watch_until(target.pid, tmp_path, _settled("cpu_bound"))
    if "OMP_NUM_THREADS" not in os.environ and "MKL_NUM_THREADS" not in os.environ:  # nothing holds torch's pool
        assert not any("set_num_threads" in line for line in settled.advice), settled.advice


@pytest.mark.timeout(300)
def test_a_job_throttled_by_its_quota_while_it_imports_is_named_throttled(spawn_target, tmp_path, tiny_cpu_quota):
    """Issue 39: a job in a 0.2-CPU cgroup, slow inside its imports because of the quota, was said "starting: …
    importing modules in 32 of 32 samples", its measured throttling (100% of periods) left out. slow_start.py's import
    runs Python for ten minutes of wall time: it is importing for the whole test."""
    target = spawn_target("slow_start.py", "--import-seconds", "600", stdout=subprocess.PIPE, text=True,
                          ready=lambda proc: proc.stdout.readline().strip() == "started", timeout=60)
    tiny_cpu_quota(target.pid)
    named, verdicts = _watch_until(target.pid, tmp_path, lambda verdicts: next(
        (v for v in reversed(verdicts) if v.bottleneck == "cpu_throttled"
         and any(line.endswith("CPU quota-throttled as it imports") for line in v.evidence)), None))
    assert named.evidence[0].startswith("throttled in "), named.evidence
    assert any(line.startswith("starting: the main thread was importing modules in ")
               and "(from <module> (slow_start.py:" in line for line in named.evidence), named.evidence
    # never "starting" once the throttling was measured: a measured limit is news in any phase
    first = next(i for i, v in enumerate(verdicts) if v.bottleneck == "cpu_throttled")
    assert all(v.bottleneck == "cpu_throttled" for v in verdicts[first:]), [v.bottleneck for v in verdicts]
