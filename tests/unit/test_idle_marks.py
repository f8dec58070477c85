"""The idle marks the dumps teach (probes/sampling/idle_marks.py): a window's count at a position is split by the
share of dumps that saw the thread idle there, through the sampler's own results (SamplerResults: dumps in,
windows in, collect)."""

from __future__ import annotations

from support.job_frames import DDP_WAIT, FORWARD

from probes.frame import StackCount, StackFrame, ThreadStack
from probes.sampling.idle_marks import IdleMarks
from probes.sampling.sampler_results import SamplerResults, Window

RANK0, RANK1 = 4101, 4102
WORKER1, WORKER2, WORKER3 = 4201, 4202, 4203
SLOW_AUGMENT = (StackFrame("slow_augment", "/srv/job/train.py", 40), StackFrame("<module>", "/srv/job/train.py", 90))
WORKER_FETCH = (StackFrame("fetch", "/srv/job/dataset.py", 25), StackFrame("_worker_loop", "/srv/job/worker.py", 8))
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


def test_a_line_that_only_sleeps_is_idle_even_where_a_dump_caught_it_woken(tmp_path):
    """time.sleep is C code, no Python frame: a loop that sleeps 0.5 s, woken and queued for a core or the GIL on a
    busy machine when the one dump came, counted its whole window busy (tests/e2e/test_pyspy_e2e.py's sleepers beside
    a spinning main thread, once in a CI run). The line's own text says it only sleeps."""
    source = tmp_path / "loop.py"
    source.write_text("import time\n\n\ndef sleep_loop(stop):\n    while not stop.is_set():\n        time.sleep(0.5)\n"
                      "        tick = 1\n")
    sleeping = (StackFrame("sleep_loop", str(source), 6),)
    working = (StackFrame("sleep_loop", str(source), 7),)
    marks = IdleMarks()
    marks.remember(dump(RANK0, sleeping, idle=False) + dump(RANK0, working, idle=False, tid=RANK0 + 1))
    (part,) = marks.split(window_count(RANK0, sleeping, 5))
    assert part.idle and part.count == 5
    (part,) = marks.split(window_count(RANK0, working, 5, tid=RANK0 + 1))  # the line after it does work
    assert not part.idle
    gone = (StackFrame("sleep_loop", str(tmp_path / "elsewhere.py"), 6),)  # a file not on this disk: the dumps decide
    marks.remember(dump(RANK1, gone, idle=False))
    (part,) = marks.split(window_count(RANK1, gone, 5))
    assert not part.idle


def test_a_position_no_dump_saw_and_a_stack_without_python_frames_are_busy():
    marks = IdleMarks()
    marks.remember(dump(RANK0, DDP_WAIT, idle=True))
    for frames in (FORWARD, (NATIVE,)):
        (part,) = marks.split(window_count(RANK0, frames, 4))
        assert not part.idle and part.count == 4


def test_a_threads_own_dumps_decide_before_any_other_threads():
    """Rank 0 waits at backward's entry, rank 1 (the straggler) only computes there: each its own share, one dump of
    its own against three of another rank's."""
    marks = IdleMarks()
    for _ in range(3):
        marks.remember(dump(RANK0, DDP_WAIT, idle=True))
    marks.remember(dump(RANK1, DDP_WAIT, idle=False))
    assert marks.idle_share(RANK0, RANK0, DDP_WAIT[0]) == 1.0
    assert marks.idle_share(RANK1, RANK1, DDP_WAIT[0]) == 0.0


def test_a_rank_no_dump_caught_at_a_line_is_not_made_idle_by_another_ranks_one_or_two_dumps():
    """The straggler (rank 1) was never dumped at backward's entry; rank 0 was, idle, once or twice. Rank 1's
    samples there stay busy: a share from one or two dumps of another process is 0 or 1, not a share (rank 1 of an
    accelerate run looked 67% waiting from it)."""
    for rank0_dumps in (1, 2):
        results = sampler_results(RANK0, RANK1)
        for _ in range(rank0_dumps):
            results.add_dump(results.states[RANK0], dump(RANK0, DDP_WAIT, idle=True), worker=False)
        results.add_dump(results.states[RANK1], dump(RANK1, SLOW_AUGMENT, idle=False), worker=False)
        samples = collected(results, window_count(RANK1, DDP_WAIT, 30), window_count(RANK0, DDP_WAIT, 30))
        assert samples == {(RANK1, False): 30, (RANK0, True): 30}, (rank0_dumps, samples)


def test_a_thread_no_dump_caught_at_a_line_borrows_its_own_processs_threads_share_before_other_processes():
    """A second thread of rank 1 at a line where rank 1's main thread was seen busy five times and rank 0 idle ten
    times: the same process's threads decide, not the peer rank waiting there."""
    marks = IdleMarks()
    for _ in range(10):
        marks.remember(dump(RANK0, DDP_WAIT, idle=True))
    for _ in range(5):
        marks.remember(dump(RANK1, DDP_WAIT, idle=False))
    assert marks.idle_share(RANK1, RANK1 + 7, DDP_WAIT[0]) == 0.0
    (part,) = marks.split(window_count(RANK1, DDP_WAIT, 6, tid=RANK1 + 7))
    assert not part.idle and part.count == 6


def test_a_borrowed_share_counts_only_with_enough_dumps_behind_it():
    """One idle dump of a sibling thread is not enough to borrow from, nor four dumps in all; seven of DataLoader
    workers at a line are: a worker started anew (no dump of its own yet) takes its siblings' share there."""
    marks = IdleMarks()
    marks.remember(dump(RANK0, WORKER_FETCH, idle=True, tid=RANK0 + 1))
    assert marks.idle_share(RANK0, RANK0 + 2, WORKER_FETCH[0]) == 0.0  # one dump: unseen, busy
    marks.remember(dump(RANK0, WORKER_FETCH, idle=True, tid=RANK0 + 1))
    for pid in (WORKER1, WORKER2):
        marks.remember(dump(pid, WORKER_FETCH, idle=True))
    assert marks.idle_share(RANK0, RANK0 + 2, WORKER_FETCH[0]) == 0.0  # two of its process's, four in all
    assert marks.idle_share(WORKER3, WORKER3, WORKER_FETCH[0]) == 0.0
    for _ in range(3):
        marks.remember(dump(WORKER1, WORKER_FETCH, idle=True))
    assert marks.idle_share(WORKER3, WORKER3, WORKER_FETCH[0]) == 1.0  # seven dumps of three processes
    assert marks.idle_share(RANK0, RANK0 + 2, WORKER_FETCH[0]) == 1.0  # its process's two fall back to them


def test_recent_dumps_weigh_more_and_the_memory_is_bounded():
    marks = IdleMarks(memory=2)
    for _ in range(20):
        marks.remember(dump(RANK0, DDP_WAIT, idle=True))
    for _ in range(8):  # a half-life of dumps later, the old ones count half
        marks.remember(dump(RANK0, DDP_WAIT, idle=False))
    assert 0.2 < marks.idle_share(RANK0, RANK0, DDP_WAIT[0]) < 0.5
    marks.remember(dump(RANK1, FORWARD, idle=True))
    marks.remember(dump(RANK1, CONDITION_WAIT[1:], idle=True))
    assert len(marks.by_thread) == 2 and len(marks.by_process) == 2 and len(marks.anywhere) == 2
    assert marks.idle_share(RANK0, RANK0, DDP_WAIT[0]) == 0.0  # forgotten: busy, as a line never seen
