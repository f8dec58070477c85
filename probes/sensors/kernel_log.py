"""What the kernel recorded about the machine's own faults: NVIDIA Xid errors, OOM kills and segfaults, read
from /dev/kmsg. This module is the only one that reads the kernel log.

A training job that dies of a GPU falling off the bus, of the OOM killer or of a SIGSEGV in a native library
leaves nothing in its own log that says so; the kernel's ring buffer does. `KernelLog.read_new()` returns the
events recorded since its previous call, the first call those of the last LOOK_BACK_S already in the buffer (so
a death just before gputop attached is seen). It only reads: /dev/kmsg opened O_RDONLY|O_NONBLOCK, one record
per read(2) until EAGAIN, so a tick never blocks on it; it never writes to the log, clears it or moves another
reader's position (each open file of /dev/kmsg has its own).

No dmesg fallback: dmesg reads the same buffer through /dev/kmsg or syslog(2), which need the same permission
(CAP_SYSLOG where kernel.dmesg_restrict=1), so running it would add a child process a second and see nothing
more. Where the log cannot be read, `reason` says why and how to fix it.
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from probes.machine_records import KernelEvent, KernelEventKind
from probes.sensors.textfiles import read_text

KMSG_PATH = "/dev/kmsg"
DMESG_RESTRICT_PATH = "/proc/sys/kernel/dmesg_restrict"

# The first read_new() returns the events of the last ten minutes already in the buffer: long enough for a
# job that died while the person was reaching for gputop, short enough not to blame a job on last night's fault.
LOOK_BACK_S: Final = 10 * 60
# One record per read(2), so a flood (an OOM storm prints dozens of lines per kill) is read over several ticks
# rather than in one long tick; 5000 records take a few milliseconds.
MAX_RECORDS_PER_READ: Final = 5000
# The events one call returns and the events kept in `recent`: a storm keeps its newest, memory stays flat.
MAX_EVENTS: Final = 256
# The kernel formats a record into at most CONSOLE_EXT_LOG_MAX (8 KiB) bytes; a smaller buffer gets EINVAL.
_READ_SIZE: Final = 16 * 1024
# An OOM kill is two records microseconds apart (the oom-kill: summary, then "Killed process"); a summary
# whose "Killed process" has not come within this long is returned alone.
_OOM_PAIR_WAIT_S: Final = 2.0

XidPointsAt = Literal["application", "node"]


@dataclass(frozen=True)
class XidMeaning:
    meaning: str  # in plain words
    points_at: XidPointsAt  # "application": the job's own code or input; "node": the GPU, its memory or the node


# The common Xids, from NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
# for Ampere and newer: description and "resolution bucket", RESTART_APP vs RESET_GPU / CONTACT_SUPPORT) and
# its older Xid listing (docs.nvidia.com/deploy/xid-errors/, "Xid Error Listing" and "Common XID Errors").
# "application" where NVIDIA's first action is to restart or check the application, "node" where it is to
# reset the GPU, drain the node or replace hardware.
XID_MEANINGS: Final[Mapping[int, XidMeaning]] = {
    13: XidMeaning("graphics engine exception: a GPU kernel did something illegal (often an out-of-bounds "
                   "access)", "application"),
    31: XidMeaning("GPU memory page fault: a kernel touched an address it does not own (illegal memory access)",
                   "application"),
    43: XidMeaning("GPU stopped processing: the application's kernel hit a fault and its work was stopped",
                   "application"),
    45: XidMeaning("preemptive cleanup: the driver ended the process's GPU work, after its exit or an "
                   "earlier error (read the Xid before it)", "application"),
    48: XidMeaning("double-bit ECC error: uncorrectable GPU memory error", "node"),
    61: XidMeaning("internal micro-controller breakpoint or warning", "node"),
    62: XidMeaning("internal micro-controller halted", "node"),
    63: XidMeaning("ECC page retirement or row remapping recorded: reset the GPU to apply it", "node"),
    64: XidMeaning("ECC page retirement or row remapping failed", "node"),
    68: XidMeaning("video decoder (NVDEC) exception", "application"),
    69: XidMeaning("graphics engine class error: the GPU rejected a command of the application", "application"),
    74: XidMeaning("NVLink error", "node"),
    79: XidMeaning("the GPU has fallen off the bus: it no longer answers on PCIe", "node"),
    92: XidMeaning("high single-bit ECC error rate", "node"),
    94: XidMeaning("contained ECC error: a memory error stopped only the application that hit it", "node"),
    95: XidMeaning("uncontained ECC error: every application on the GPU is affected; the GPU needs a reset",
                   "node"),
    109: XidMeaning("context switch timeout: the GPU could not switch away from a channel", "application"),
    119: XidMeaning("GSP RPC timeout: the GPU's system processor stopped answering the driver", "node"),
    120: XidMeaning("GSP error: the GPU's system processor reported an error", "node"),
    154: XidMeaning("GPU recovery action changed: the GPU needs a reset or the node a reboot", "node"),
}


def xid_meaning(event: KernelEvent) -> XidMeaning | None:
    """What NVIDIA's catalogue says of an Xid event's code; None for other events and unknown codes."""
    return XID_MEANINGS.get(event.code) if event.kind == "xid" and event.code is not None else None


# --- PCI bus ids ----------------------------------------------------------------------------------------

_PCI_BUS_ID = re.compile(
    r"^(?:PCI:)?(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<device>[0-9a-fA-F]{1,2})"
    r"(?:\.(?P<function>[0-7]))?$"
)


def normalise_pci_bus_id(bus_id: str | bytes | None) -> str | None:
    """A PCI address in NVML's form, "00000000:3B:00.0", or None when it is not one.

    NVML's nvmlDeviceGetPciInfo().busId is "00000000:3B:00.0" (8-digit domain, upper case, with the
    function); its busIdLegacy and sysfs write "0000:3b:00.0"; the NVIDIA driver's Xid lines print
    "PCI:0000:3b:00" (4-digit domain, no function: a GPU is function 0). All of them come out equal here.
    """
    if isinstance(bus_id, bytes):  # older pynvml returns bytes
        bus_id = bus_id.decode("ascii", "replace")
    if not bus_id:
        return None
    match = _PCI_BUS_ID.match(bus_id.strip().rstrip("\x00"))
    if match is None:
        return None
    domain = int(match["domain"] or "0", 16)
    function = int(match["function"] or "0")
    return f"{domain:08X}:{int(match['bus'], 16):02X}:{int(match['device'], 16):02X}.{function:X}"


# --- one line of the log --------------------------------------------------------------------------------

# NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.
# The driver prints "pid=..., name=..." since about R460, "pid='<unknown>', name=<unknown>" where it cannot
# tell, nothing on older drivers; the oldest omit "PCI:" ("NVRM: Xid (0000:01:00): 31, ...").
_XID = re.compile(r"NVRM: Xid \((?P<bus>[^)]*)\): (?P<code>\d+)(?:, (?P<rest>.*))?$")
_XID_PROCESS = re.compile(r"^pid=(?P<pid>'?<unknown>'?|\d+), name=(?P<name>.*?), (?P<rest>.*)$")

# mm/oom_kill.c __oom_kill_process: "%s: Killed process %d (%s) total-vm:%lukB, anon-rss:%lukB, ..." where
# %s is "Memory cgroup out of memory" or "Out of memory" (since 4.19; before, no prefix).
_OOM_KILLED = re.compile(
    r"(?:(?P<message>[^:]*): )?Killed process (?P<pid>\d+) \((?P<name>.*)\) (?P<rest>total-vm:.*)$"
)
_ANON_RSS = re.compile(r"anon-rss:(?P<kb>\d+)kB")
# dump_oom_summary/dump_oom_victim: "oom-kill:constraint=%s,nodemask=%*pbl" then cpuset, memcg context
# (",oom_memcg=%s,task_memcg=%s"; v1 hierarchy paths), and ",task=%s,pid=%d,uid=%d" (since 4.19).
_OOM_SUMMARY = re.compile(r"oom-kill:constraint=(?P<constraint>[A-Z_]+)(?P<rest>.*)$")

# arch/x86/mm/fault.c show_signal_msg: "%s[%d]: segfault at %lx ip %px sp %px error %lx" then
# print_vma_addr's " in %s[%lx+%lx]" (since 6.x " in %s[%lx,%lx+%lx]": offset, start+size) and, since 6.2,
# " likely on CPU %d (core %d, socket %d)".
_SEGFAULT = re.compile(
    r"^(?P<name>.+?)\[(?P<pid>\d+)\]: segfault at (?P<address>[0-9a-fA-F]+) ip (?P<ip>\S+) sp (?P<sp>\S+) "
    r"error (?P<error>[0-9a-fA-F]+)(?: in (?P<library>[^\s\[]+)\[[^\]]*\])?"
)
# arch/x86/kernel/traps.c (pr_fmt "traps: "): "%s[%d] %s%s ip:%lx sp:%lx error:%lx" and the same " in ...".
_GENERAL_PROTECTION = re.compile(
    r"traps: (?P<name>.+?)\[(?P<pid>\d+)\] (?P<what>general protection(?: fault)?)(?P<desc>[^:]*?) "
    r"ip:(?P<ip>[0-9a-fA-F]+) sp:(?P<sp>[0-9a-fA-F]+) error:(?P<error>[0-9a-fA-F]+)"
    r"(?: in (?P<library>[^\s\[]+)\[[^\]]*\])?"
)
# "[  949.024734] " as dmesg prints it, for lines pasted from dmesg rather than read from /dev/kmsg.
_DMESG_STAMP = re.compile(r"^\[\s*\d+\.\d+\]\s*")
# Cheap test before the expressions: most records are none of these.
_MARKERS: Final = (b"Xid", b"Killed process", b"oom-kill:", b"segfault at", b"general protection")


def _xid(line: str, wall_time: float | None) -> KernelEvent | None:
    match = _XID.search(line)
    if match is None:
        return None
    rest = match["rest"] or ""
    pid: int | None = None
    name: str | None = None
    process = _XID_PROCESS.match(rest)
    if process is not None:
        pid = int(process["pid"]) if process["pid"].isdigit() else None
        name = None if process["name"] == "<unknown>" else process["name"]
        rest = process["rest"]
    return KernelEvent(
        kind="xid", wall_time=wall_time, pid=pid, process_name=name,
        pci_bus_id=normalise_pci_bus_id(match["bus"]), code=int(match["code"]), detail=rest.strip(), raw=line,
    )


def _oom_killed(line: str, wall_time: float | None) -> KernelEvent | None:
    match = _OOM_KILLED.search(line)
    if match is None:
        return None
    message = match["message"]
    rss = _ANON_RSS.search(match["rest"])
    return KernelEvent(
        kind="oom_kill", wall_time=wall_time, pid=int(match["pid"]), process_name=match["name"],
        pci_bus_id=None, code=None, detail=line[match.start() :].strip(), raw=line,
        # Only "Memory cgroup out of memory" says memcg; "Out of memory" is the machine's; no prefix says nothing.
        memcg=None if message is None else message.strip().startswith("Memory cgroup"),
        anon_rss_kb=int(rss["kb"]) if rss else None,
    )


def _oom_summary(line: str, wall_time: float | None) -> KernelEvent | None:
    match = _OOM_SUMMARY.search(line)
    if match is None:
        return None
    fields: dict[str, str] = {}
    for item in match["rest"].split(","):
        key, sep, value = item.partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    pid = fields.get("pid", "")
    return KernelEvent(
        kind="oom_kill", wall_time=wall_time, pid=int(pid) if pid.isdigit() else None,
        process_name=fields.get("task"), pci_bus_id=None, code=None, detail=line[match.start() :].strip(),
        raw=line, memcg=match["constraint"] == "CONSTRAINT_MEMCG",
        memcg_path=fields.get("oom_memcg") or fields.get("task_memcg"),
    )


def _segfault(line: str, wall_time: float | None) -> KernelEvent | None:
    match = _SEGFAULT.match(line)
    if match is not None:
        return KernelEvent(
            kind="segfault", wall_time=wall_time, pid=int(match["pid"]), process_name=match["name"],
            pci_bus_id=None, code=int(match["error"], 16), detail=f"segfault at {match['address']}", raw=line,
            address=match["address"], library=match["library"],
        )
    match = _GENERAL_PROTECTION.search(line)
    if match is not None:
        return KernelEvent(
            kind="segfault", wall_time=wall_time, pid=int(match["pid"]), process_name=match["name"],
            pci_bus_id=None, code=int(match["error"], 16), detail=(match["what"] + match["desc"]).strip(),
            raw=line, library=match["library"],
        )
    return None


def parse_line(line: str, wall_time: float | None = None) -> KernelEvent | None:
    """The event one line of the kernel log records, or None for any other line.

    `line` is the message as the kernel logged it (a /dev/kmsg record's text, or a dmesg line, whose
    "[   12.345678] " stamp is dropped). An OOM kill's two lines each give an event; KernelLog joins them.
    """
    line = _DMESG_STAMP.sub("", line.rstrip("\n"))
    if "NVRM: Xid" in line:
        return _xid(line, wall_time)
    if "Killed process" in line:
        return _oom_killed(line, wall_time)
    if "oom-kill:constraint=" in line:
        return _oom_summary(line, wall_time)
    if "segfault at" in line or "general protection" in line:
        return _segfault(line, wall_time)
    return None


def join_oom(summary: KernelEvent, killed: KernelEvent) -> KernelEvent:
    """One oom_kill event from the oom-kill: summary and the "Killed process" line of the same kill."""
    return KernelEvent(
        kind="oom_kill", wall_time=killed.wall_time if killed.wall_time is not None else summary.wall_time,
        pid=killed.pid, process_name=killed.process_name or summary.process_name, pci_bus_id=None, code=None,
        detail=killed.detail, raw=summary.raw + "\n" + killed.raw,
        memcg=summary.memcg if summary.memcg is not None else killed.memcg,
        memcg_path=summary.memcg_path, anon_rss_kb=killed.anon_rss_kb,
    )


# --- /dev/kmsg records ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KmsgRecord:
    """One /dev/kmsg record: "PRI,SEQ,TS_USEC,FLAGS[,more];text\\n" then " KEY=value\\n" dictionary lines
    (Documentation/ABI/testing/dev-kmsg)."""

    priority: int  # facility * 8 + level
    sequence: int
    monotonic_us: int  # microseconds since boot, the printk clock
    flags: str  # "-"; "c" begins and "+" continues a line split over records (kernels before 4.9)
    text: str  # unescaped: "\\x0a" in the record is a newline here
    dictionary: tuple[tuple[str, str], ...] = ()


_ESCAPE = re.compile(rb"\\x([0-9a-fA-F]{2})")


def _unescape(data: bytes) -> str:
    # The kernel writes every byte < 0x20, >= 0x7f and the backslash itself as \xNN; a line that held a
    # newline keeps it as \x0a inside one record.
    return _ESCAPE.sub(lambda m: bytes([int(m[1], 16)]), data).decode("utf-8", "replace")


def parse_kmsg_record(data: bytes) -> KmsgRecord | None:
    """A record as one read(2) of /dev/kmsg returns it; None when it is not one."""
    prefix, sep, body = data.partition(b";")
    if not sep:
        return None
    fields = prefix.split(b",")
    if len(fields) < 4:
        return None
    try:
        priority, sequence, monotonic_us = int(fields[0]), int(fields[1]), int(fields[2])
    except ValueError:
        return None
    message, *continuation = body.rstrip(b"\n").split(b"\n")
    dictionary = []
    for line in continuation:
        # Dictionary lines (SUBSYSTEM=, DEVICE=) start with a space; the message's own newlines are escaped.
        key, eq, value = line[1:].partition(b"=") if line.startswith(b" ") else (b"", b"", b"")
        if eq:
            dictionary.append((_unescape(key), _unescape(value)))
    return KmsgRecord(
        priority=priority, sequence=sequence, monotonic_us=monotonic_us,
        flags=fields[3].decode("ascii", "replace"), text=_unescape(message), dictionary=tuple(dictionary),
    )


# --- the reader -----------------------------------------------------------------------------------------


class RecordSource(Protocol):
    """What KernelLog reads: one record per read(); BlockingIOError when none is left, BrokenPipeError when
    records were overwritten before they were read (the next read returns the oldest one left)."""

    def read(self, size: int) -> bytes: ...

    def close(self) -> None: ...


class _KmsgFile:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)

    def read(self, size: int) -> bytes:
        return os.read(self._fd, size)

    def close(self) -> None:
        os.close(self._fd)


def _unreadable_reason(error: OSError, path: str) -> str:
    if error.errno in (errno.EPERM, errno.EACCES):
        restrict = (read_text(DMESG_RESTRICT_PATH) or "").strip()
        if restrict == "1":
            return ("the kernel log is unreadable as this user (kernel.dmesg_restrict=1): run gputop as root "
                    "or with CAP_SYSLOG")
        return f"the kernel log is unreadable as this user ({path}: {error.strerror}): run gputop as root"
    if error.errno == errno.ENOENT:
        return (f"{path} does not exist here (a container without the host's kernel log?): GPU Xids, OOM "
                "kills and segfaults are not seen")
    return f"the kernel log cannot be read ({path}: {error.strerror or error})"


class KernelLog:
    """Reads the kernel log's fault events: read_new() once a tick. Never raises; `reason` says why nothing
    can be read."""

    def __init__(
        self,
        path: str = KMSG_PATH,
        *,
        opener: Callable[[], RecordSource] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        look_back_s: float = LOOK_BACK_S,
    ) -> None:
        self._path = path
        self._opener = opener or (lambda: _KmsgFile(path))
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        self._look_back_s = look_back_s
        self._source: RecordSource | None = None
        self._opened = False
        self._oldest_us = 0  # records older than the look-back, at the first read, are skipped
        self._partial: KmsgRecord | None = None  # a line split over records ("c" then "+"), old kernels
        self._pending_oom: dict[int | None, KernelEvent] = {}  # oom-kill: summaries awaiting "Killed process"
        self._recent: deque[KernelEvent] = deque(maxlen=MAX_EVENTS)
        self.reason: str | None = None
        self.overruns = 0  # times records were overwritten before this reader got to them

    @property
    def recent(self) -> tuple[KernelEvent, ...]:
        """The last MAX_EVENTS events read_new() returned, oldest first."""
        return tuple(self._recent)

    def read_new(self) -> tuple[KernelEvent, ...]:
        """The events recorded since the previous call (the first: those of the last look_back_s). Never
        blocks, never raises."""
        try:
            events = self._read_new()
        except Exception as error:  # a sensor never raises into the tick
            self.reason = f"kernel log read failed: {error}"
            self.close()
            return ()
        events = events[-MAX_EVENTS:]
        self._recent.extend(events)
        return events

    def close(self) -> None:
        if self._source is not None:
            try:
                self._source.close()
            except OSError:
                pass
            self._source = None

    # --- reading ----------------------------------------------------------------------------------------

    def _open(self) -> RecordSource | None:
        if self._opened:
            return self._source
        self._opened = True  # once: a log unreadable now (permission, no device) stays so for this process
        try:
            self._source = self._opener()
        except OSError as error:
            self.reason = _unreadable_reason(error, self._path)
            return None
        self._oldest_us = int(max(0.0, self._monotonic() - self._look_back_s) * 1e6)
        return self._source

    def _read_new(self) -> tuple[KernelEvent, ...]:
        source = self._open()
        if source is None:
            return ()
        # printk stamps records with the kernel's local clock: nanoseconds since boot that stop while the
        # machine is suspended, as CLOCK_MONOTONIC does (CLOCK_BOOTTIME and /proc/stat's btime count the
        # suspended time too). So wall = now_wall - now_monotonic + stamp is exact for records since the
        # last resume, the ones a running job's death leaves; dmesg -T, which uses the boot time, is off by
        # the time spent suspended for those. Read once a call, so an NTP step moves later calls only.
        offset = self._wall_clock() - self._monotonic()
        records = list(self._records(source))
        events: list[KernelEvent] = []
        for record in records:
            if record.monotonic_us < self._oldest_us:
                continue
            wall_time = offset + record.monotonic_us / 1e6
            for line in record.text.split("\n"):
                event = parse_line(line, wall_time)
                if event is not None:
                    events.extend(self._join_oom(event))
        events.extend(self._flush_pending_oom(offset))
        return tuple(events)

    def _records(self, source: RecordSource) -> Iterable[KmsgRecord]:
        for _ in range(MAX_RECORDS_PER_READ):
            try:
                data = source.read(_READ_SIZE)
            except BlockingIOError:
                break
            except BrokenPipeError:
                # The ring buffer wrapped past this reader: the kernel moved it to the oldest record left.
                self.overruns += 1
                continue
            except OSError as error:
                self.reason = _unreadable_reason(error, self._path)
                self.close()
                break
            if not data:
                break
            # Cheap: decode only records that may be one of ours (or continue one).
            if not any(marker in data for marker in _MARKERS) and self._partial is None:
                head = data.partition(b";")[0].split(b",")
                if len(head) < 4 or b"c" not in head[3]:
                    continue
            record = parse_kmsg_record(data)
            if record is None:
                continue
            yield from self._assemble(record)
        if self._partial is not None:
            yield self._partial
            self._partial = None

    def _assemble(self, record: KmsgRecord) -> Iterable[KmsgRecord]:
        # Before 4.9 a line printed in pieces (the segfault line's " in libfoo.so[...]") could reach
        # /dev/kmsg as a "c" record and "+" fragments; newer kernels join them before storing.
        if "+" in record.flags and self._partial is not None:
            partial = self._partial
            self._partial = KmsgRecord(partial.priority, partial.sequence, partial.monotonic_us, partial.flags,
                                       partial.text + record.text, partial.dictionary)
            return
        if self._partial is not None:
            yield self._partial
            self._partial = None
        if "c" in record.flags:
            self._partial = record
        else:
            yield record

    def _join_oom(self, event: KernelEvent) -> list[KernelEvent]:
        if event.kind != "oom_kill":
            return [event]
        if event.detail.startswith("oom-kill:"):
            if len(self._pending_oom) >= MAX_EVENTS:
                return [event]
            self._pending_oom[event.pid] = event
            return []
        summary = self._pending_oom.pop(event.pid, None)
        return [join_oom(summary, event) if summary is not None else event]

    def _flush_pending_oom(self, offset: float) -> list[KernelEvent]:
        now_wall = offset + self._monotonic()
        flushed = [
            summary for summary in self._pending_oom.values()
            if summary.wall_time is None or now_wall - summary.wall_time >= _OOM_PAIR_WAIT_S
        ]
        for summary in flushed:
            self._pending_oom.pop(summary.pid, None)
        return flushed


__all__ = [
    "KMSG_PATH",
    "LOOK_BACK_S",
    "MAX_EVENTS",
    "XID_MEANINGS",
    "KernelEvent",
    "KernelEventKind",
    "KernelLog",
    "KmsgRecord",
    "RecordSource",
    "XidMeaning",
    "XidPointsAt",
    "join_oom",
    "normalise_pci_bus_id",
    "parse_kmsg_record",
    "parse_line",
    "xid_meaning",
]


class SharedKernelLog:
    """One kernel log reader for every job a process watches (`gputop serve`, the agent): read once a tick by its
    owner (refresh()), as the GPUs are (nvml.SharedGpuReading), and handed to each job's Engine as a view of its
    own. N engines with a KernelLog each opened /dev/kmsg N times and parsed every record N times a tick."""

    def __init__(self, log: KernelLog | None = None) -> None:
        self._log = log if log is not None else KernelLog()
        self._kept: deque[tuple[int, KernelEvent]] = deque(maxlen=MAX_EVENTS)  # (number, event), oldest first
        self._numbered = 0

    @property
    def reason(self) -> str | None:
        return self._log.reason

    def refresh(self) -> None:
        """Read what the kernel recorded since the last refresh (the first: the last LOOK_BACK_S)."""
        for event in self._log.read_new():
            self._numbered += 1
            self._kept.append((self._numbered, event))

    def view(self) -> KernelLogView:
        """A reader for one engine: its first read_new() returns the events kept (the look-back, and what came
        since), each later one what the refreshes read since its previous call."""
        return KernelLogView(self)

    def since(self, number: int) -> tuple[tuple[KernelEvent, ...], int]:
        """(the kept events numbered after `number`, the newest number)."""
        return tuple(event for n, event in self._kept if n > number), self._numbered

    def close(self) -> None:
        self._log.close()


class KernelLogView:
    """One engine's reader of a SharedKernelLog: the KernelLog calls an Engine makes (read_new, reason, close),
    reading nothing itself. Closing it leaves the shared log to its owner."""

    def __init__(self, shared: SharedKernelLog) -> None:
        self._shared = shared
        self._seen = 0

    @property
    def reason(self) -> str | None:
        return self._shared.reason

    def read_new(self) -> tuple[KernelEvent, ...]:
        events, self._seen = self._shared.since(self._seen)
        return events

    def close(self) -> None:
        pass
