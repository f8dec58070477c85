"""memory_bound: the job's steps are slow because it is short of memory. The kernel reclaims its pages and reads
them back (a page cache thrashed under a limit below the working set, anonymous pages swapped out and in), and
its tasks stall meanwhile: the memory cgroup's PSI (memory.pressure) says for how long, the main process's major
page faults (/proc/PID/stat majflt: faults that waited for a disk read) say that it is among those waiting, and
the swap use rising says the kernel is swapping.

Whose pressure it is is said: the job's own cgroup's PSI (a cgroup2 group of its own) is the job's, and "full"
there means none of its tasks ran. The machine's (/proc/pressure/memory, or the root group's where the job has no
group of its own, as in a v1-only or hybrid host) is every process's: another job's thrashing raises it as much.
So the job is called memory-bound from the machine's figure only where its own main process is seen taking major
faults at the same time, never from the machine's figure alone.
"""

from __future__ import annotations

from probes.diagnosis.evidence import Evidence
from probes.diagnosis.rules.rule import BottleneckFacts, Candidate, Rule
from probes.frame import Frame
from probes.machine_records import MemoryReading

MEMORY_BOUND = BottleneckFacts(
    name="memory_bound",
    words="short of host memory",
    runs_on_host_cpu=False,
    short_of_host_cpu=False,
    hung_in=(),
    badge="worth_fixing",
    fix_removes=None,  # a stall in reclaim or a fault shows in no phase of the stacks: no share bounds the gain
    gpu_busy=False,
    kernels_bound=False,
    # Measured from outside the code: a job short of memory stalls in its imports as much as in its steps.
    news_while_starting=True,
)

# PSI "full" is the share of wall time in which every non-idle task of the group was stalled on memory at once
# (the kernel's Documentation/accounting/psi.rst: "full" is lost productivity, nothing ran). 10% of the last 10 s
# with none of the job's tasks running makes its steps a tenth slower or worse from memory alone; a job with its
# working set resident reads 0.00, and one reclaiming its page cache now and then a few tenths of a percent.
FULL_PCT = 10.0
# PSI "some": at least one task stalled, so one DataLoader worker's stall while the main thread trains counts as
# much as the main thread's own. Twice full's threshold, and only with the main process's own major faults, say
# that the steps wait for memory.
SOME_PCT = 20.0
# Major faults a second of the main process (its threads together) that say it waits for pages read back from
# disk: after its warm-up a training process whose memory stays resident takes none; each one waits for a read
# (0.1 to 10 ms, more on a busy disk), so 10 a second, over the metric window, is a steady stream of them. With
# readahead one fault brings back up to a few hundred kB of a file: a job thrashing its page cache here took ~30 a
# second while its group's PSI full was 35%.
MAJOR_FAULTS_PER_S = 10.0


def evaluate(ev: Evidence) -> Candidate | None:
    memory = ev.latest.memory
    faults = _main_major_faults(ev.metric_frames, ev.main_pid)
    faulting = faults is not None and faults >= MAJOR_FAULTS_PER_S
    swapped = _swap_rise(ev.metric_frames)
    full, some = memory.pressure_full_avg10, memory.pressure_some_avg10
    own = memory.pressure_whole_machine is False
    lines: list[str] = []
    stall = 0.0
    if full is not None and full >= FULL_PCT and (own or faulting):
        lines.append(_pressure_words(memory, "full", full, own))
        stall = full
    elif some is not None and some >= SOME_PCT and faulting:
        lines.append(_pressure_words(memory, "some", some, own))
        stall = some / 2
    # Swapping: the job's swap use rising, or its memory in swap while the machine reads pages back from swap. A job
    # swapping out and in at the same pace holds its swap use still (a page read back keeps its slot): one whose 192
    # MiB sat a third under its limit held 141 MB in swap, rising a few hundred kB a second or not at all.
    in_swap = memory.swap_usage_bytes or 0
    swapped_in = _host_swapped_in(ev.metric_frames)
    rose = swapped is not None and swapped > 0
    swapping = faulting and (rose or (in_swap > 0 and bool(swapped_in)))
    if swapping:
        window = _window_s(ev.metric_frames)
        if rose and swapped is not None:
            now = f" (now {_bytes(memory.swap_usage_bytes)})" if memory.swap_usage_bytes is not None else ""
            said = f"the job's swap use rose {_bytes(swapped)} over the last {window:.0f} s{now}"
        else:
            said = f"{_bytes(in_swap)} of the job's memory is in swap"
        if swapped_in and window > 0:
            said += (f"; the machine swapped in {_bytes(swapped_in / window)} a second (/proc/vmstat pswpin, every "
                     "process's)")
        lines.append(f"swapping: {said}")
    if not lines:
        return None
    if faults is not None:
        stalling = ": it is one of the tasks stalling" if memory.pressure_whole_machine and stall else ""
        lines[0] += f"; the main process takes {faults:.0f} major page faults a second{stalling}"
    held = _held_words(memory)
    if held:
        lines.append(held)
    advice = ["Give the job more memory (its memory cgroup's limit: the container's memory or the Slurm job's "
              "--mem), or make it need less: fewer DataLoader workers (each holds its own copy of what it touches), "
              "a smaller batch or prefetch_factor, the dataset memory-mapped rather than loaded whole."]
    if swapping or (memory.swap_usage_bytes or 0) > 0:
        advice.append("No swap on training nodes (swapoff, or memory.swap.max 0 for the job's group): a step that "
                      "waits for a swapped-out page waits for the disk; the OOM killer's clear error is better than "
                      "a job many times slower.")
    if memory.pressure_whole_machine and stall:
        advice.append("The pressure figure is the whole machine's: where other jobs share it, their memory use "
                      "counts too (run the job in a memory cgroup of its own to read its own).")
    score = min(1.0, 0.35 + max(stall, 10.0 if swapping else 0.0) / 100)
    # PSI's avg10 is already an average over 10 s, two stack windows, and the faults and swap are the metric
    # window's: a finding that spans windows, so it replaces the previous verdict without the margin kept for one
    # noisy window (a job that starts thrashing mid-run would otherwise stay "CPU-bound" on its old samples).
    return Candidate("memory_bound", score, lines, advice, from_metrics=True, sustained=True)


def _pressure_words(memory: MemoryReading, kind: str, pct: float, own: bool) -> str:
    source = memory.pressure_source or "PSI"
    if own:
        whose = "all of the job's tasks" if kind == "full" else "some task of the job"
        return (f"memory pressure: {whose} stalled on memory {pct:.0f}% of the last 10 s (PSI {kind} avg10, "
                f"the cgroup's {source})")
    whose = "all of the machine's tasks" if kind == "full" else "some task on the machine"
    return (f"memory pressure on the whole machine: {whose} stalled on memory {pct:.0f}% of the last 10 s (PSI "
            f"{kind} avg10, {source}: every process's, not the job's alone)")


def _held_words(memory: MemoryReading) -> str | None:
    """What its memory cgroup holds against its limit, where both are read."""
    used = memory.limit_usage_bytes if memory.limit_usage_bytes is not None else memory.usage_bytes
    if memory.limit_bytes is None or used is None:
        return None
    where = f" (set on {memory.limit_source})" if memory.limit_source else ""
    cache = f", {_bytes(memory.file_bytes)} of it page cache" if memory.file_bytes is not None else ""
    return f"its memory cgroup holds {_bytes(used)} of its {_bytes(memory.limit_bytes)} limit{where}{cache}"


def _main_major_faults(frames: list[Frame], main_pid: int) -> float | None:
    """The main process's major faults a second, averaged over the frames that read them."""
    rates = [p.major_faults_per_s for f in frames for p in f.processes
             if p.pid == main_pid and p.major_faults_per_s is not None]
    return sum(rates) / len(rates) if rates else None


def _swap_rise(frames: list[Frame]) -> int | None:
    """How much the job's swap use rose over the frames (None where it is not read at both ends)."""
    read = [f.memory.swap_usage_bytes for f in frames if f.memory.swap_usage_bytes is not None]
    return read[-1] - read[0] if len(read) >= 2 else None


def _host_swapped_in(frames: list[Frame]) -> int | None:
    """Bytes the machine swapped in over the frames after the first (each frame's count is since the one before);
    None where none read it."""
    read = [f.memory.host_swapped_in_bytes_new for f in frames[1:] if f.memory.host_swapped_in_bytes_new is not None]
    return sum(read) if read else None


def _window_s(frames: list[Frame]) -> float:
    return frames[-1].time - frames[0].time if len(frames) >= 2 else 0.0


def _bytes(value: float | None) -> str:
    value = value or 0
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


RULE = Rule(concludes=(MEMORY_BOUND,), evaluate=evaluate)
