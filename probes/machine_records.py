"""What the machine itself recorded of a job, as the frames carry it: the kernel's records of faults (Xids, OOM
kills, segfaults), the memory cgroup's reading, and NCCL's RAS port's answer. Frame types of their own, beside
probes/frame.py (which holds them in each Frame), at the lowest floor so that the sensors that read them and the
diagnosis that words them share one definition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

KernelEventKind = Literal["xid", "oom_kill", "segfault"]


@dataclass(frozen=True)
class KernelEvent:
    """One fault the kernel recorded (probes/sensors/kernel_log.py reads them): an NVIDIA Xid, an OOM kill, a
    segfault. Fields a line does not print are None."""

    kind: KernelEventKind
    wall_time: float | None  # Unix seconds; None where the line came without a timestamp
    pid: int | None  # the process the line names (Xid: the process using the GPU where the driver prints it)
    process_name: str | None  # its comm, as the kernel printed it (at most 15 characters)
    pci_bus_id: str | None  # xid: NVML's form, "00000000:3B:00.0" (normalise_pci_bus_id)
    code: int | None  # xid: the Xid number; segfault: the page-fault or trap error code
    detail: str  # the rest of the line in the kernel's words
    raw: str  # the line as logged
    memcg: bool | None = None  # oom_kill: the kill was a memory cgroup's limit (None: the line does not say)
    memcg_path: str | None = None  # oom_kill: the cgroup over its limit, where printed
    anon_rss_kb: int | None = None  # oom_kill: the victim's anonymous resident memory when killed
    address: str | None = None  # segfault: the faulting address (hex), None for a general protection fault
    library: str | None = None  # segfault: the file mapped at the instruction pointer, where printed


@dataclass(frozen=True)
class NcclRasReading:
    """What NCCL's own RAS port said of the job (probes/sensors/nccl_ras.py), as received: the diagnosis parses `raw`,
    so a replay reads the same text the live run did."""

    read_at: float  # Unix time of the answer
    address: str  # "localhost:28028"
    answered: bool  # a RAS thread spoke the protocol
    raw: str  # the status text (all of it, or what came by the deadline)
    reason: str | None = None  # why there is no status, or why it is partial


@dataclass(frozen=True)
class MemoryReading:
    """The memory the target's cgroup holds and may hold, and the OOM kills and limit hits in it (the cgroup memory
    controller, v1 or v2). Counters are cumulative as read; the `_new` fields are their change since the previous
    read (None on the first), so a kill between two ticks is seen in the tick after it."""

    cgroup_version: str | None = None  # "v1", "v2", or None when no memory cgroup could be read
    cgroup_path: str | None = None  # the target's memory cgroup, relative to the controller's mount
    usage_bytes: int | None = None  # the target's cgroup: memory.current / memory.usage_in_bytes (page cache too)
    file_bytes: int | None = None  # of which page cache (memory.stat file / total_cache): the kernel may reclaim it
    limit_bytes: int | None = None  # memory.max / memory.limit_in_bytes, lowest over the ancestors; None: unlimited
    limit_source: str | None = None  # the directory whose limit is the lowest
    limit_usage_bytes: int | None = None  # what that limit is compared against: its own directory's usage
    swap_usage_bytes: int | None = None  # memory.swap.current; v1: memsw usage less memory usage
    swap_limit_bytes: int | None = None  # memory.swap.max (lowest over the ancestors); v1: memsw limit less memory's
    oom_kills_total: int | None = None  # processes of the cgroup the OOM killer killed (memory.events / oom_control)
    oom_kills_new: int | None = None
    max_events_total: int | None = None  # times usage hit the limit (v2 memory.events max; v1 failcnt + memsw's)
    max_events_new: int | None = None
    host_oom_kills_total: int | None = None  # OOM kills on the whole machine (/proc/vmstat oom_kill)
    host_oom_kills_new: int | None = None
    # Bytes the whole machine swapped in since the previous read (/proc/vmstat pswpin, pages): a job whose memory sits
    # in swap and whose main process faults is being read back from it while this moves (no cgroup file counts it).
    host_swapped_in_bytes_new: int | None = None
    pressure_some_avg10: float | None = None  # memory PSI "some avg10", percent: a task stalled on memory
    pressure_full_avg10: float | None = None  # "full avg10": all non-idle tasks stalled at once
    pressure_source: str | None = None  # the file read: the cgroup's memory.pressure or /proc/pressure/memory
    # The PSI read is the whole machine's (/proc/pressure/memory, or the cgroup2 root's), shared with every other
    # process there, not the job's own group's; None where none was read.
    pressure_whole_machine: bool | None = None
    reason: str | None = None  # why something above is None
