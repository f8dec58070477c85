"""Memory as a risk in the verdict (probes/diagnosis/memory_risk.py, shown by probes/diagnosis/shown.py), on
constructed frames: who grows, how fast, when the limit is reached, and where the line goes."""

from __future__ import annotations

import dataclasses

from support.frames import FORWARD, PID, main_count, make_frame, proc

from probes.diagnosis.memory_risk import memory_risk
from probes.machine_records import MemoryReading
from probes.monitoring.monitor import fold

MB = 1_000_000
GROUP = "/sys/fs/cgroup/memory/train"


def frames(worker_rate: float, limit: int | None, seconds: int = 60, main_rate: float = 0.0):
    """A main process and two DataLoader workers whose resident bytes grow at the rates given (bytes/s, together for
    the workers), in a cgroup with `limit` whose usage is what they hold plus 50 MB of page cache."""
    made = []
    for i in range(seconds):
        worker = 500 * MB + int(worker_rate * i / 2)
        main = 2000 * MB + int(main_rate * i)
        processes = [proc(cpu=100.0, rss_bytes=main),
                     proc(PID + 1, "dataloader_worker", 30.0, rss_bytes=worker),
                     proc(PID + 2, "dataloader_worker", 30.0, rss_bytes=worker)]
        held = main + 2 * worker
        memory = MemoryReading(cgroup_version="v1", cgroup_path="/train", usage_bytes=held + 50 * MB,
                               file_bytes=50 * MB, limit_bytes=limit, limit_source=GROUP if limit else None,
                               limit_usage_bytes=held + 50 * MB if limit else None)
        frame = make_frame(i, counts=[main_count(FORWARD, n=10)], processes=processes)
        made.append(dataclasses.replace(frame, memory=memory))
    return made


def test_workers_growing_toward_the_limit_are_named_with_the_time_left():
    risk = memory_risk(frames(worker_rate=2 * MB, limit=4000 * MB))
    assert risk is not None and risk.who == "its 2 DataLoader workers together"
    # 4000 MB less the 3000 + 2 x 59 MB the processes hold at the end, at 2 MB/s: ~441 s
    assert risk.words() == ("memory: its 2 DataLoader workers together grow 2.0 MB/s (over the last 59 s); its "
                            "memory cgroup's 4.0 GB limit (set on /sys/fs/cgroup/memory/train) is reached in ~7 min "
                            "at that rate")
    assert risk.imminent
    verdict = fold(frames(worker_rate=2 * MB, limit=4000 * MB)).view.verdict
    assert verdict.evidence[0] == risk.words()  # near: the headline
    assert verdict.advice[0].startswith("Memory will run out")


def test_a_far_limit_is_said_after_the_headline_and_no_growth_says_nothing():
    far = fold(frames(worker_rate=0.2 * MB, limit=400_000 * MB)).view.verdict
    assert not far.evidence[0].startswith("memory:")
    assert far.evidence[1].startswith("memory: its 2 DataLoader workers together grow 200.0 kB/s") and \
        far.evidence[1].endswith("is reached in ~551.4 h at that rate")
    assert memory_risk(frames(worker_rate=0.0, limit=4000 * MB)) is None
    # the main process alone, no limit read
    main = memory_risk(frames(worker_rate=0.0, limit=None, main_rate=5 * MB))
    assert main is not None and main.words() == ("memory: the main process grows 5.0 MB/s (over the last 59 s); no "
                                                 "memory limit read for it")


def copy_on_read_frames(private_rate: float, shared_rate: float, seconds: int = 90, workers: int = 4,
                        limit: int | None = 8000 * MB):
    """A main process and `workers` DataLoader workers whose resident bytes hold still (a copied page stays
    resident), each worker's smaps_rollup read every 5 s as the tree walk reads it: its private bytes growing and its
    shared ones changing at the rates given (bytes/s, each)."""
    made = []
    for i in range(seconds):
        read = i % 5 == 0
        processes = [proc(cpu=100.0, rss_bytes=2000 * MB)]
        for w in range(workers):
            processes.append(proc(PID + 1 + w, "dataloader_worker", 30.0, rss_bytes=1800 * MB,
                                  private_bytes=100 * MB + int(private_rate * i) if read else None,
                                  shared_bytes=1700 * MB + int(shared_rate * i) if read else None))
        memory = MemoryReading(cgroup_version="v1", cgroup_path="/train", usage_bytes=4000 * MB, file_bytes=50 * MB,
                               limit_bytes=limit, limit_source=GROUP if limit else None,
                               limit_usage_bytes=4000 * MB if limit else None)
        frame = make_frame(i, counts=[main_count(FORWARD, n=10)], processes=processes)
        made.append(dataclasses.replace(frame, memory=memory))
    return made


def test_workers_copying_their_parents_pages_are_named_copy_on_read_with_the_advice():
    risk = memory_risk(copy_on_read_frames(0.3 * MB, -0.3 * MB))
    assert risk is not None and risk.copy_on_read_workers == 4 and risk.workers == 4
    # 8000 MB less the 4000 MB held (50 MB of it page cache) at 4 x 0.3 MB/s: ~3375 s
    assert risk.words() == ("memory: its 4 DataLoader workers grow 1.2 MB/s together (over the last 85 s): their "
                            "parent's pages turning private as they read them (copy-on-read: Python's reference "
                            "counts write to every object a worker touches); its memory cgroup's 8.0 GB limit (set on "
                            "/sys/fs/cgroup/memory/train) is reached in ~56 min at that rate")
    verdict = fold(copy_on_read_frames(0.3 * MB, -0.3 * MB)).view.verdict
    assert verdict.evidence[1] == risk.words()  # not near: under the headline, but with its fix
    assert verdict.advice[-1].startswith("Hold the dataset in numpy arrays, tensors or a memory map")


def test_workers_that_allocate_or_hold_still_are_not_copy_on_read():
    allocating = memory_risk(copy_on_read_frames(0.3 * MB, 0.0))
    assert allocating is None  # their private bytes grow with the shared ones steady, and their RSS holds still
    assert memory_risk(copy_on_read_frames(0.0, 0.0)) is None
    # one of two workers copying, the other not
    frames = copy_on_read_frames(0.3 * MB, -0.3 * MB, workers=2)
    frames = [dataclasses.replace(f, processes=(*f.processes[:2], dataclasses.replace(
        f.processes[2], private_bytes=None if f.processes[2].private_bytes is None else 100 * MB,
        shared_bytes=None if f.processes[2].shared_bytes is None else 1700 * MB))) for f in frames]
    one = memory_risk(frames)
    assert one is not None, frames[-1]
    assert one.words().startswith("memory: 1 of its 2 DataLoader workers grows 300.0 kB/s (over "), one.words()
