"""memory_bound (probes/diagnosis/rules/memory_pressure.py) on constructed frames: the job's own cgroup's PSI, the
machine's PSI only with the main process's own major faults, swapping, and its place before the quota's rule."""

from __future__ import annotations

import dataclasses

from support.frames import FORWARD, PID, main_count, make_frame, proc, run

from probes.frame import CpuReading
from probes.machine_records import MemoryReading
from probes.monitoring.monitor import fold

MB = 1_000_000
GROUP = "/sys/fs/cgroup/memory/train"
OWN = "/sys/fs/cgroup/unified/train/memory.pressure"


def frames(full: float = 0.0, some: float = 0.0, machine: bool = False, faults: float | None = 0.0,
           swap: tuple[int, int] | None = None, cpu: CpuReading | None = None, n: int = 8,
           swapped_in: int | None = None):
    """A main process training on the CPU (its stacks in forward) in a 1 GB cgroup holding 990 MB, with the PSI, the
    main process's major faults and the swap use given (swap: from, to over the frames), and the bytes the machine
    swapped in each tick."""
    made = []
    for i in range(n):
        swap_now = None if swap is None else swap[0] + (swap[1] - swap[0]) * i // (n - 1)
        memory = MemoryReading(
            cgroup_version="v1", cgroup_path="/train", usage_bytes=990 * MB, file_bytes=20 * MB,
            limit_bytes=1000 * MB, limit_source=GROUP, limit_usage_bytes=990 * MB, swap_usage_bytes=swap_now,
            pressure_some_avg10=some, pressure_full_avg10=full,
            pressure_source="/proc/pressure/memory" if machine else OWN, pressure_whole_machine=machine,
            host_swapped_in_bytes_new=swapped_in)
        frame = make_frame(i, counts=[main_count(FORWARD, n=10)], cpu_reading=cpu,
                           processes=[proc(cpu=60.0, rss_bytes=900 * MB, major_faults_per_s=faults)])
        made.append(dataclasses.replace(frame, memory=memory))
    return made


def test_the_jobs_own_cgroup_stalled_on_memory_is_memory_bound_with_its_figures():
    last = run(frames(full=23.4, some=41.0, faults=850.0))[-1]
    assert last.bottleneck == "memory_bound", last.evidence
    assert last.evidence[0] == ("memory pressure: all of the job's tasks stalled on memory 23% of the last 10 s (PSI "
                                f"full avg10, the cgroup's {OWN}); the main process takes 850 major page faults a "
                                "second")
    assert "its memory cgroup holds 990.0 MB of its 1.0 GB limit (set on /sys/fs/cgroup/memory/train), 20.0 MB of " \
           "it page cache" in last.evidence
    assert last.advice[0].startswith("Give the job more memory") and "fewer DataLoader workers" in last.advice[0]
    # the job's own group stalled in full needs no faults to be the cause (reclaim stalls without reading back)
    assert run(frames(full=15.0, faults=None))[-1].bottleneck == "memory_bound"


def test_little_pressure_or_some_without_the_main_process_faulting_is_not_memory_bound():
    assert run(frames(full=2.0, some=8.0, faults=850.0))[-1].bottleneck != "memory_bound"
    # a worker's stalls count in "some" while the main thread trains: not the steps' cause without its faults
    assert run(frames(full=3.0, some=35.0, faults=0.5))[-1].bottleneck != "memory_bound"
    some = run(frames(full=3.0, some=35.0, faults=40.0))[-1]
    assert some.bottleneck == "memory_bound"
    assert some.evidence[0].startswith("memory pressure: some task of the job stalled on memory 35% of the last 10 s")


def test_the_machines_pressure_is_the_jobs_only_where_its_own_main_process_faults():
    # another job thrashing on a shared machine: its PSI is high, this job's main process takes no major faults
    busy = run(frames(full=30.0, some=60.0, machine=True, faults=0.0))[-1]
    assert busy.bottleneck != "memory_bound", busy.evidence
    ours = run(frames(full=4.0, some=31.0, machine=True, faults=120.0))[-1]
    assert ours.bottleneck == "memory_bound"
    assert ours.evidence[0] == ("memory pressure on the whole machine: some task on the machine stalled on memory 31% "
                                "of the last 10 s (PSI some avg10, /proc/pressure/memory: every process's, not the "
                                "job's alone); the main process takes 120 major page faults a second: it is one of "
                                "the tasks stalling")
    assert any(a.startswith("The pressure figure is the whole machine's") for a in ours.advice)


def test_swapping_with_major_faults_is_memory_bound_and_says_no_swap():
    last = run(frames(faults=300.0, swap=(100 * MB, 170 * MB)))[-1]
    assert last.bottleneck == "memory_bound"
    assert last.evidence[0] == ("swapping: the job's swap use rose 50.0 MB over the last 5 s (now 170.0 MB); the main "
                                "process takes 300 major page faults a second")
    assert any(a.startswith("No swap on training nodes") for a in last.advice)
    # swap held still (swapped out once, not read back) is no stall of the steps
    assert run(frames(faults=0.0, swap=(100 * MB, 100 * MB)))[-1].bottleneck != "memory_bound"


def test_swap_use_held_still_while_the_machine_swaps_in_and_the_job_faults_is_swapping():
    """Swapped out and back in at the same pace, a job's swap use holds still (a page read back keeps its slot): a real
    one held 141 MB in swap, rising by a few hundred kB or not at all. The machine's swap-ins, beside the job's own
    faults and its memory in swap, say it is read back from swap."""
    steady = run(frames(faults=9000.0, swap=(141 * MB, 141 * MB), swapped_in=36 * MB))[-1]
    assert steady.bottleneck == "memory_bound", steady.evidence
    assert steady.evidence[0] == ("swapping: 141.0 MB of the job's memory is in swap; the machine swapped in 36.0 MB a "
                                  "second (/proc/vmstat pswpin, every process's); the main process takes 9000 major "
                                  "page faults a second")
    assert any(a.startswith("No swap on training nodes") for a in steady.advice)
    # the machine swapping in for another process, this job not faulting: not this job's stall
    assert run(frames(faults=0.0, swap=(141 * MB, 141 * MB), swapped_in=36 * MB))[-1].bottleneck != "memory_bound"
    # nothing swapped in and the swap use still: the faults are no swap-ins
    assert not any(line.startswith("swapping:") for line in run(frames(faults=9000.0, swap=(141 * MB, 141 * MB),
                                                                      swapped_in=0))[-1].evidence)


def test_memory_pressure_comes_before_a_throttled_quota():
    # reclaim runs on the job's CPU time, under its quota: the memory is the cause
    cpu = CpuReading(cgroup_version="v1", quota_cpus=1.0, quota_source="/train", effective_cpus=1.0, affinity_cpus=8,
                     usage_cpus=1.0, throttled_fraction=0.4, runnable_threads=2)
    assert run(frames(cpu=cpu))[-1].bottleneck == "cpu_throttled"
    assert run(frames(full=25.0, faults=200.0, cpu=cpu))[-1].bottleneck == "memory_bound"


def test_the_verdict_as_shown_carries_it():
    view = fold(frames(full=23.4, some=41.0, faults=850.0)).view
    assert view.verdict.bottleneck == "memory_bound"
    assert view.verdict.from_counters
    assert view.latest.processes[0].pid == PID and view.latest.processes[0].major_faults_per_s == 850.0


def test_major_faults_are_read_from_proc_stat():
    import os

    from probes.sensors.proc_readers import read_stat

    stat = read_stat(os.getpid())
    assert stat is not None and stat.majflt is not None and stat.majflt >= 0
