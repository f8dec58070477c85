"""The idle marks the dumps teach (probes/sampling/idle_marks.py): a window's count at a position is split by the
share of dumps that saw the thread idle there, through the sampler's own results (SamplerResults: dumps in,
windows in, collect)."""

from __future__ import annotations

from support.job_frames import DDP_WAIT, FORWARD

from probes.frame import StackCount, StackFrame, ThreadStack
from probes.sampling.idle_marks import IdleMarks
from probes.sampling.sampler_results import SamplerResults, Window

RANK0, RANK1 = 4101, 4102
NATIVE = StackFrame("futex_wait", "libc.so.6", 0, native=True)
CONDITION_WAIT = (StackFrame("wait", "/usr/lib/python3.10/threading.py", 320),
                  StackFrame("worker", "/srv/job/train.py", 12))


def dump(pid: int, frames, idle: bool, tid: int | None = None) -> list[ThreadStack]:
    return [ThreadStack(pid=pid, tid=tid or pid, name="MainThread", idle=idle, frames=tuple(frames))]


def window_count(pid: int, frames, n: int, tid: int | None = None) -> StackCount:
    """A record window's count: raw output has no idle flag, so it comes in busy."""
    return StackCount(pid=pid, tid=tid or pid, thread_name="MainThread", idle=False, frames=tuple(frames), count=n)


def collected(results: SamplerResults, *counts: StackCount) -> dict[tuple[int, bool], int]:
    """Deliver one window per count and collect: samples by (pid, idle)."""
    for c in counts:
        results.add_window(results.states[c.pid], Window(pid=c.pid, counts=[c], samples=c.count, wall_seconds=1.0),
                           worker=False)
    out: dict[tuple[int, bool], int] = {}
    for c in results.collect().counts:
        out[c.pid, c.idle] = out.get((c.pid, c.idle), 0) + c.count
    return out


def sampler_results(*pids: int) -> SamplerResults:
    results = SamplerResults()
    for pid in pids:
        results.add_process(pid)
    return results


def test_a_line_where_a_rank_both_computes_and_waits_splits_its_samples_by_the_dumps_idle_share():
    """Issue 31: rank 0 computes its backward and sleeps while DDP's reducer waits, at one line. One dump that
    caught it computing must not turn every wait there into compute: 7 of 10 dumps idle, 7 of 10 samples idle."""
    results = sampler_results(RANK0)
    for idle in (False, True, True, True, False, True, True, True, False, True):
        results.add_dump(results.states[RANK0], dump(RANK0, DDP_WAIT, idle), worker=False)
    samples = collected(results, window_count(RANK0, DDP_WAIT, 100))
    assert 60 < samples.get((RANK0, True), 0) < 80, samples  # the recent dumps weigh more: not exactly 70
    share = results.idle.idle_share(RANK0, RANK0, DDP_WAIT[0])
    assert samples == {(RANK0, True): round(100 * share), (RANK0, False): 100 - round(100 * share)}


def test_small_counts_come_to_the_idle_share_over_many_windows():
    """A window's few samples at a line are split in whole samples; the rounding carries over to the next window,
    so one-sample windows at a line idle 3 of 4 dumps come to 3 idle samples in 4, not all idle or none."""
    marks = IdleMarks()
    for idle in (True, False, True, True):
        marks.remember(dump(RANK0, DDP_WAIT, idle))
    share = marks.idle_share(RANK0, RANK0, DDP_WAIT[0])
    parts = [p for _ in range(40) for p in marks.split(window_count(RANK0, DDP_WAIT, 1))]
    assert all(p.count == 1 for p in parts) and len(parts) == 40
    assert abs(sum(p.idle for p in parts) - 40 * share) <= 0.5, (sum(p.idle for p in parts), share)
    split = marks.split(window_count(RANK0, DDP_WAIT, 9))
    assert [p.idle for p in split] == [True, False] and sum(p.count for p in split) == 9


def test_a_position_all_dumps_saw_idle_or_busy_stays_one_count():
    marks = IdleMarks()
    marks.remember(dump(RANK0, DDP_WAIT, idle=True))
    marks.remember(dump(RANK1, FORWARD, idle=False))
    asleep = window_count(RANK0, DDP_WAIT, 5)
    (idle,) = marks.split(asleep)
    assert idle.idle and idle.count == 5 and idle.frames == asleep.frames
    busy = window_count(RANK1, FORWARD, 5)
    assert marks.split(busy) == (busy,)  # the same object: nothing to change


def test_a_known_blocking_call_is_idle_even_where_a_dump_caught_it_running():
    marks = IdleMarks()
    marks.remember(dump(RANK0, CONDITION_WAIT, idle=False))
    (part,) = marks.split(window_count(RANK0, CONDITION_WAIT, 3))
    assert part.idle and part.count == 3


def test_a_position_no_dump_saw_and_a_stack_without_python_frames_are_busy():
    marks = IdleMarks()
    marks.remember(dump(RANK0, DDP_WAIT, idle=True))
    for frames in (FORWARD, (NATIVE,)):
        (part,) = marks.split(window_count(RANK0, frames, 4))
        assert not part.idle and part.count == 4


def test_a_threads_own_dumps_decide_before_any_other_threads():
    """Rank 0 waits at backward's entry, rank 1 (the straggler) only computes there: each its own share. A thread
    no dump caught at a line takes what the dumps saw of any thread there."""
    marks = IdleMarks()
    for _ in range(3):
        marks.remember(dump(RANK0, DDP_WAIT, idle=True))
    marks.remember(dump(RANK1, DDP_WAIT, idle=False))
    assert marks.idle_share(RANK0, RANK0, DDP_WAIT[0]) == 1.0
    assert marks.idle_share(RANK1, RANK1, DDP_WAIT[0]) == 0.0
    assert 0.7 < marks.idle_share(RANK1, RANK1 + 7, DDP_WAIT[0]) < 0.75  # another thread: any thread's, 3 of 4 idle


def test_recent_dumps_weigh_more_and_the_memory_is_bounded():
    marks = IdleMarks(memory=2)
    for _ in range(20):
        marks.remember(dump(RANK0, DDP_WAIT, idle=True))
    for _ in range(8):  # a half-life of dumps later, the old ones count half
        marks.remember(dump(RANK0, DDP_WAIT, idle=False))
    assert 0.2 < marks.idle_share(RANK0, RANK0, DDP_WAIT[0]) < 0.5
    marks.remember(dump(RANK1, FORWARD, idle=True))
    marks.remember(dump(RANK1, CONDITION_WAIT[1:], idle=True))
    assert len(marks.by_thread) == 2 and len(marks.anywhere) == 2
    assert marks.idle_share(RANK0, RANK0, DDP_WAIT[0]) == 0.0  # forgotten: busy, as a line never seen
