"""Which processes of the target's tree ended, and how, as /proc still says: a zombie keeps its exit status (the
waitpid status in /proc/PID/stat's field 52) until its parent reaps it; a process reaped between two ticks leaves
nothing, and is said as such. The tree walk (proctree.py) tells this watch what it read each tick; the engine takes
the exits into the frame (Frame.exits), and probes/diagnosis/exit_causes.py words them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence

import psutil

from probes.frame import ROLE_MAIN, ROLE_OTHER, ProcessExit, ProcessSample, Role
from probes.sensors.proc_readers import PreviousRead, ProcStat, decode_wait_status, read_stat

# Why an ended process's status is unknown: its parent reaped it between two ticks, and /proc keeps nothing after.
GONE_UNREAD = "reaped by its parent before gputop read how it ended"


class ExitWatch:
    """The ends seen in a tree rooted at `target_pid`, each reported once (take())."""

    def __init__(self, target_pid: int) -> None:
        self.target_pid = target_pid
        self._ended: dict[int, int] = {}  # {pid: start time} of each process whose end was reported
        self._new: list[ProcessExit] = []  # ended since take() was last asked

    def take(self) -> tuple[ProcessExit, ...]:
        """The processes that ended since the last call."""
        found, self._new = tuple(self._new), []
        return found

    def note_tick(self, tree: Sequence[tuple[int, ProcStat]], samples: Sequence[ProcessSample],
                  last_samples: Sequence[ProcessSample], previous: Mapping[int, PreviousRead], seen: set[int]) -> None:
        """After a tick's walk: each process that became a zombie (with the status it keeps), and each of the last
        tick's that vanished (reaped between two reads: no status left)."""
        for pid, stat in tree:
            if stat.state == psutil.STATUS_ZOMBIE and self._ended.get(pid) != stat.started:
                sample = next((s for s in samples if s.pid == pid), None)
                self._ended[pid] = stat.started
                self._new.append(_exit_of(pid, sample.role if sample else ROLE_OTHER, stat.comm, stat.exit_status))
        self._note_vanished(last_samples, previous, seen)
        for pid in set(self._ended) - seen - {self.target_pid}:
            if not os.path.exists(f"/proc/{pid}"):
                del self._ended[pid]  # reaped and gone: its PID may name another process later

    def _note_vanished(self, last_samples: Sequence[ProcessSample], previous: Mapping[int, PreviousRead],
                       seen: set[int]) -> None:
        """Each of the last tick's processes not in this one's tree: a zombie now elsewhere (its parent died and it
        was handed to another reaper) with its status, or gone with none."""
        for sample in last_samples:
            before = previous.get(sample.pid)
            if sample.pid in seen or sample.pid == self.target_pid or before is None \
                    or self._ended.get(sample.pid) == before.started:
                continue
            stat = read_stat(sample.pid)
            if stat is not None and stat.started == before.started and stat.state == psutil.STATUS_ZOMBIE:
                self._ended[sample.pid] = before.started
                self._new.append(_exit_of(sample.pid, sample.role, sample.name, stat.exit_status))
            elif stat is None or stat.started != before.started:
                self._ended[sample.pid] = before.started
                self._new.append(ProcessExit(sample.pid, sample.role, sample.name, time.time(),
                                             read_from=GONE_UNREAD))
            # else: alive, missed once (a read raced its fork, or a permission): not ended

    def note_target_ended(self, last_samples: Sequence[ProcessSample],
                          previous: Mapping[int, PreviousRead]) -> None:
        """The target's own end, once: its status where it is still a zombie (the same process: its start time
        matches the last tick's), else why none is known."""
        pid = self.target_pid
        if pid in self._ended:
            return
        self._note_vanished(last_samples, previous, set())  # its children gone with it, or just before
        root = next((s for s in last_samples if s.pid == pid), None)
        stat = read_stat(pid)
        before = previous.get(pid)
        same = stat is not None and (before is None or before.started == stat.started)
        self._ended[pid] = stat.started if stat is not None else -1
        name = root.name if root is not None else (stat.comm if stat is not None else "")
        if stat is not None and same and stat.state == psutil.STATUS_ZOMBIE:
            self._new.append(_exit_of(pid, ROLE_MAIN, name, stat.exit_status))
        else:
            self._new.append(ProcessExit(pid, ROLE_MAIN, name, time.time(), read_from=GONE_UNREAD))


def _exit_of(pid: int, role: Role, name: str, status: int | None) -> ProcessExit:
    """A zombie's exit, from the waitpid status its /proc/PID/stat keeps."""
    if status is None:
        return ProcessExit(pid, role, name, time.time(), read_from="its zombie, whose stat has no exit status here")
    code, signal, core = decode_wait_status(status)
    return ProcessExit(pid, role, name, time.time(), exit_code=code, signal=signal, core_dumped=core,
                       read_from="its zombie's /proc stat")
