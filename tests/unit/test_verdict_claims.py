"""The verdict's words claim only what was measured, and come no sooner than the evidence (issue 31), on constructed
frames: the same stack for seconds is not one call; a job importing its modules is starting, not host-CPU-bound; no
gain is promised from a handful of samples; and a log still for longer than the hang threshold, with a CPU counter
that does not move, is a hang from the second frame."""

from __future__ import annotations

import dataclasses

from support.frames import (
    DATALOADER_WAIT,
    FORWARD,
    PID,
    ROOT,
    STDLIB,
    T0,
    TRAIN,
    fr,
    main_count,
    make_frame,
    proc,
    run,
    text,
)

from probes.diagnosis.shares import SPEEDUP_MIN_SAMPLES
from probes.frame import CpuReading, GilSamples, ProgressReading, StackCount
from probes.monitoring.monitor import fold

WORK = (fr("work", TRAIN, 56), fr("main", TRAIN, 70)) + ROOT[1:]  # called again and again from main's loop
IMPORTING_TORCH = (
    fr("<module>", "/opt/venv/lib/python3.11/site-packages/torch/_dynamo/__init__.py", 13),
    fr("_call_with_frames_removed", "<frozen importlib._bootstrap>", 241),
    fr("exec_module", "<frozen importlib._bootstrap_external>", 940),
    fr("_load_unlocked", "<frozen importlib._bootstrap>", 690),
    fr("_find_and_load", "<frozen importlib._bootstrap>", 1176),
    fr("<module>", TRAIN, 3),
)
BUILDING = (fr("Linear.reset_parameters", STDLIB + "torch/nn/modules/linear.py", 117),) + ROOT  # not an import


def test_the_same_stack_for_seconds_is_said_as_what_was_seen_not_as_one_call():
    """A loop that calls work() (0.5 s of matmuls) again and again, sampled at the settled 1 Hz: every sample in
    work (…:56). Before, the evidence said "one call has run for 14 s without returning"."""
    frames = [make_frame(i, counts=[main_count(WORK, n=1)], cpu=99.0) for i in range(14)]
    last = run(frames)[-1]
    assert last.bottleneck == "cpu_bound" and last.liveness == "progressing"
    assert last.evidence[0] == ("every sample for 14 s was in work (train.py:56) (14 samples), at 99% CPU: busy in "
                                "one place — slow, not hung (one long call or the same call again and again: stack "
                                "samples cannot tell which)")
    assert "one call has run" not in text(last) and "without returning" not in text(last)
    assert "One native call" not in text(last)


def test_a_job_importing_its_modules_is_starting_not_host_cpu_bound():
    """Before, "host-CPU-bound · 40%" while the job imported torch."""
    importing = [make_frame(i, counts=[main_count(IMPORTING_TORCH, n=4), main_count(BUILDING, n=1)], cpu=100.0)
                 for i in range(6)]
    verdicts = run(importing)
    assert all(v.bottleneck == "unknown" and v.confidence == 0.0 for v in verdicts)
    assert verdicts[-1].evidence[0] == ("starting: the main thread was importing modules in 24 of 30 samples (from "
                                        "<module> (train.py:3)): no verdict until it runs its own code")
    training = importing + [make_frame(6 + i, counts=[main_count(FORWARD, n=5)], cpu=100.0) for i in range(4)]
    assert run(training)[-1].bottleneck == "cpu_bound"  # its own code: a verdict
    # a lazy import once a verdict stands is part of the run, not a start
    later = training + [make_frame(10 + i, counts=[main_count(IMPORTING_TORCH, n=5)], cpu=100.0) for i in range(2)]
    assert run(later)[-1].bottleneck == "cpu_bound"


def test_no_gain_is_promised_from_fewer_samples_than_can_bound_it():
    """Before, "up to 100× faster" from 4 samples, all waiting for data (the truth was 7.7×)."""
    first = [make_frame(0, counts=[main_count(DATALOADER_WAIT, n=4, idle=True)], cpu=40.0)]
    verdict = fold(first, replay=False).view.verdict
    assert verdict.max_speedup is None and not any("faster" in line for line in verdict.evidence)
    frames = [make_frame(i, counts=[main_count(DATALOADER_WAIT, n=7, idle=True), main_count(FORWARD, n=1)],
                         cpu=40.0) for i in range(SPEEDUP_MIN_SAMPLES // 8 + 1)]
    verdict = fold(frames, replay=False).view.verdict
    assert verdict.bottleneck == "data_bound"
    assert verdict.max_speedup == 8.0
    assert "up to 8.0× faster if the input pipeline kept up (it holds the step 88% of the time)" in verdict.evidence


def still_log(i: int, written_s_before: float = 123.0) -> ProgressReading:
    """The log's last step line, written `written_s_before` the first frame (its backlog: the file's last write)."""
    return ProgressReading(source="/home/alice/train.log", format="generic", iteration=4200,
                           last_line="step 4200 | loss 2.31", last_update=T0 - written_s_before)


def test_a_log_still_past_the_hang_threshold_and_no_cpu_is_hung_from_the_second_frame():
    """Before, a job whose log had not moved for two minutes took 8 s of watching to be called hung."""
    frames = [make_frame(i, counts=[main_count(DATALOADER_WAIT, n=5, idle=True)], progress=still_log(i),
                         processes=[proc(cpu=None if i == 0 else 0.0, main_thread_cpu_pct=None if i == 0 else 0.0,
                                         main_thread_wakeups_per_s=None if i == 0 else 0.0)])
              for i in range(4)]
    verdicts = run(frames)
    assert verdicts[0].liveness == "unknown"  # one reading of the CPU counter says nothing of it moving
    hung = verdicts[1]
    assert hung.liveness == "hung" and hung.bottleneck == "data_bound"
    assert hung.evidence[0] == ("no log line for 2 min 5 s (the log's last write), no CPU used in the 2 s watched "
                                "(hang threshold 5 s): main thread 0.00% CPU, 0 wake-ups/s, no reads or writes")
    assert hung.stalled_s == 125.0
    # watched for 2 s, not 2 min: the confidence grows with what gputop saw itself
    assert 0.6 <= hung.confidence < verdicts[3].confidence < 1.0
    # a log still for less than the threshold: hung only once the watching itself reaches it, as before
    recent = [make_frame(i, counts=[main_count(DATALOADER_WAIT, n=5, idle=True)], progress=still_log(i, 2.0),
                         processes=[proc(cpu=None if i == 0 else 0.0)]) for i in range(8)]
    liveness = [v.liveness for v in run(recent)]
    assert liveness[1] != "hung" and liveness[-1] == "hung"
    # the CPU moved: the log's age alone is no hang (a long step between two log lines)
    busy = [make_frame(i, counts=[main_count(FORWARD, n=5)], progress=still_log(i), cpu=None if i == 0 else 100.0)
            for i in range(4)]
    assert all(v.liveness != "hung" for v in run(busy))
    assert PID == frames[-1].target.pid


def _importing_frame(i: int, **kw):
    return make_frame(i, counts=[main_count(IMPORTING_TORCH, n=9), main_count(BUILDING, n=1)], **kw)


def test_a_throttling_quota_is_said_while_the_job_is_still_importing():
    """Issue 39: a job in a 0.2-CPU cgroup, slow inside its imports *because* of the quota, was said "starting: …
    importing modules in 32 of 32 samples", its measured throttling (100% of periods) left out. A measured limit is
    news in any phase."""
    quota = CpuReading(cgroup_version="v2", quota_cpus=0.2, quota_source="/gputop-test", effective_cpus=0.2,
                       affinity_cpus=8, usage_cpus=0.2, throttled_fraction=1.0, runnable_threads=1)
    verdicts = run([_importing_frame(i, cpu_reading=quota, processes=[proc(cpu=20.0)]) for i in range(6)])
    last = verdicts[-1]
    assert last.bottleneck == "cpu_throttled", last.evidence
    assert last.evidence[0].startswith("throttled in 100% of CPU periods: cgroup quota 0.2 CPUs")
    assert ("starting: the main thread was importing modules in 54 of 60 samples (from <module> (train.py:3)), "
            "CPU quota-throttled as it imports") in last.evidence
    # the same imports with no quota are still only starting
    free = run([_importing_frame(i, cpu=100.0) for i in range(6)])[-1]
    assert free.bottleneck == "unknown" and free.evidence[0].startswith("starting:")


HELPER = (fr("aggregate_metrics", "/home/alice/telemetry.py", 41), fr("run", STDLIB + "threading.py", 1010))


def test_a_thread_holding_the_gil_while_the_job_imports_is_named():
    """Issue 39: a thread that held the GIL starved the main thread inside the lazy imports of its first optimizer
    step, and the verdict said "starting: the main thread was importing modules in 13 of 13 samples" where the GIL
    holder used to be named."""
    def contended(i: int):
        frame = _importing_frame(i, cpu=40.0, main_thread_cpu_pct=10.0, main_thread_runqueue_pct=2.0)
        holders = (StackCount(pid=PID, tid=PID + 7, thread_name="metrics_aggregator", idle=False, frames=HELPER,
                              count=40),
                   StackCount(pid=PID, tid=PID, thread_name="MainThread", idle=False, frames=IMPORTING_TORCH,
                              count=4))
        return dataclasses.replace(frame, stacks=dataclasses.replace(
            frame.stacks, gil=(GilSamples(pid=PID, samples=49, holders=holders),)))
    last = run([contended(i) for i in range(6)])[-1]
    assert last.bottleneck == "gil_contention", last.evidence
    assert last.evidence[0].startswith("thread metrics_aggregator, in aggregate_metrics (telemetry.py:41), holds "
                                       "the GIL 82% of the time")
    assert any(line.startswith("starting: the main thread was importing modules") for line in last.evidence)
