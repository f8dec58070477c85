"""How a process of the job ended, in words a person acts on, from what the machine recorded of it.

The facts come from the frames: each process of the tree that ended carries a ProcessExit (probes/sensors/
process_exits.py: the exit status or signal its zombie kept, or why none was left to read), and the kernel's own
records name the OOM killer's victims and the segfaults (Frame.kernel_events, probes/sensors/kernel_log.py), and the
job's own log its last error (ProgressReading.failures, probes/logformats/failures.py: a traceback's last line, CUDA
out of memory, a collective's timeout, a DataLoader worker killed). An exit status or a signal is said as what it
usually means for a training job, with the one step that tells more; nothing is said of a cause that was not read (a
SIGKILL is the OOM killer's only where the kernel says so, a worker's only where its main process's log says so).

Pure: no I/O, time from the frames.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass

from probes.frame import FailureKind, Frame, LogFailure, ProcessExit
from probes.logformats.failures import LAUNCHER_KINDS
from probes.machine_records import KernelEvent

# What a signal that ends a training process usually means, and the step that tells more. Where the signal is not
# listed, its name alone is said.
SIGNAL_MEANINGS: dict[int, tuple[str, str]] = {
    signal.SIGKILL: ("sent by the kernel's OOM killer, a scheduler's limit or `kill -9`",
                     "The kernel log (dmesg) says whether the OOM killer sent it; a scheduler's log whether it did."),
    signal.SIGSEGV: ("a crash in native code (a C/C++ extension, CUDA, a driver), not a Python error",
                     "Run it with python -X faulthandler (PYTHONFAULTHANDLER=1) to print the Python stack at the "
                     "crash; a core dump (ulimit -c unlimited) holds the native one."),
    signal.SIGBUS: ("often shared memory run out (/dev/shm, where DataLoader workers pass batches; a container's "
                    "default is 64 MB), or a memory-mapped file truncated under it",
                    "df -h /dev/shm; give the container more (docker --shm-size) or fewer workers."),
    signal.SIGABRT: ("aborted: a C++ exception or a failed assertion in native code",
                     "The end of its stderr has the message."),
    signal.SIGTERM: ("asked to stop: a scheduler's cancel or time limit, or a launcher stopping it after another "
                     "rank failed",
                     "The scheduler's or the launcher's log says who sent it."),
    signal.SIGINT: ("interrupted (Ctrl-C)", ""),
}
# A shell reports a child that a signal ended as 128 + the signal: the exit status of `bash train.sh`.
SHELL_SIGNAL_BASE = 128
# A failure line of the log is said beside an exit only where it reached the log at most this long before the exit was
# seen (or after): an older one is from before (an error the job lived through, an earlier run's in the same file).
LOG_FAILURE_BEFORE_S = 120.0
# What a failure line means where its words alone do not say it to someone who has not met it.
FAILURE_MEANINGS: dict[FailureKind, str] = {
    "nccl_timeout": "NCCL's watchdog: a collective waited past the process group's timeout for a rank that never "
                    "joined it",
    "gloo_timeout": "gloo: a collective waited past the process group's timeout for a peer",
    "gloo_peer_lost": "gloo: a peer's connection closed, as when that rank ended",
}
# Whose words a failure of each kind is, where it tells how another process ended.
_TOLD_BY: dict[FailureKind, str] = {"worker_killed": "the main process's own log", "worker_exited": "the main "
                                    "process's own log", "rank_failed": "torchrun's log"}


@dataclass(frozen=True)
class ExitAccount:
    """One ended process said: how (`how`, one clause), and the step that tells more (`advice`, may be empty)."""

    pid: int
    role: str
    name: str
    how: str
    advice: str


def ended(history: Sequence[Frame]) -> dict[int, ProcessExit]:
    """{pid: how it ended} of every process whose end the frames recorded, oldest first (a PID that ended twice, a
    reused one, is said as its latest)."""
    return {exit_.pid: exit_ for frame in history for exit_ in frame.exits}


def kernel_records(history: Sequence[Frame]) -> dict[int, KernelEvent]:
    """{pid: the kernel's record of its death} (an OOM kill or a segfault) over the frames, the latest per PID."""
    return {event.pid: event for frame in history for event in frame.kernel_events
            if event.pid is not None and event.kind in ("oom_kill", "segfault")}


def account(exit_: ProcessExit, kernel: dict[int, KernelEvent] | None = None,
            log: Sequence[LogFailure] = ()) -> ExitAccount:
    """The words for one ended process; `kernel` (kernel_records) names the OOM killer's victims and segfaults, and
    `log` (log_failures) how a process ended that /proc could not read, where another's log says (a DataLoader
    worker killed, as its main process prints it)."""
    record = (kernel or {}).get(exit_.pid)
    told = told_in_log(log, exit_.pid) if exit_.signal is None and exit_.exit_code is None else None
    if record is not None and record.kind == "oom_kill":
        how, advice = _oom_killed(record)
    elif told is not None and record is None:
        how, advice = _told(told)
    else:
        how, advice = _how(exit_)
        if record is not None and record.kind == "segfault" and exit_.signal in (None, signal.SIGSEGV):
            where = f" in {record.library}" if record.library else ""
            at = f" at address {record.address}" if record.address is not None else ""
            how = ("killed by SIGSEGV: a crash in native code" if exit_.signal is None else how) + \
                f" (the kernel log: a fault{at}{where})"
    return ExitAccount(exit_.pid, exit_.role, exit_.name, how, advice)


def log_failures(history: Sequence[Frame]) -> tuple[LogFailure, ...]:
    """The log's failure lines as the newest frame that read the log carries them (the probe keeps the last few)."""
    for frame in reversed(history):
        if frame.progress is not None:
            return frame.progress.failures
    return ()


# Signals that ask a process to stop: a launcher stops the other ranks this way once one fails.
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


def asked_to_stop(exit_: ProcessExit, log: Sequence[LogFailure]) -> bool:
    """It ended by a signal that asks a process to stop (STOP_SIGNALS), by /proc or by the log: the consequence of
    another's end more often than a cause."""
    number = exit_.signal
    if number is None:
        told = told_in_log(log, exit_.pid)
        number = told.signal if told is not None else None
    return number in STOP_SIGNALS


def told_in_log(log: Sequence[LogFailure], pid: int) -> LogFailure | None:
    """The newest failure line that says how process `pid` ended (a signal or an exit status), or None."""
    return next((failure for failure in reversed(log) if failure.pid == pid and failure.kind in _TOLD_BY
                 and (failure.signal is not None or failure.exit_code is not None)), None)


def last_log_failure(log: Sequence[LogFailure], near: float | None, rank: int | None = None,
                     pid: int | None = None) -> LogFailure | None:
    """The failure line to say beside an exit seen at `near`: the job's own last words (a launcher's account of them
    only where it printed none); for a rank (`rank`, `pid`), its own line where one names it, else one that names no
    process, never another rank's."""
    recent = [f for f in log if near is None or f.logged_at is None or f.logged_at >= near - LOG_FAILURE_BEFORE_S]
    own = [f for f in recent if f.kind not in LAUNCHER_KINDS]
    if rank is None and pid is None:
        chosen = own or recent
        return chosen[-1] if chosen else None

    def names(failure: LogFailure) -> bool:
        return (rank is not None and failure.rank == rank) or (pid is not None and failure.pid == pid)

    return next((f for group in (own, recent) for f in reversed(group) if names(f)), None) or \
        next((f for f in reversed(own) if f.rank is None and f.pid is None), None)


def failure_line(failure: LogFailure, whose: str = "the log's") -> str:
    """One evidence line: the failure in the job's own words, with what it means where the words do not say."""
    rank = f" (rank {failure.rank})" if failure.rank is not None and whose == "the log's" else ""
    meaning = FAILURE_MEANINGS.get(failure.kind)
    return f"{whose} last error{rank}: {failure.text}" + (f" — {meaning}" if meaning else "")


def _told(failure: LogFailure) -> tuple[str, str]:
    """How a process ended, as another process's log (its DataLoader's main process, torchrun) said it."""
    by = f"per {_TOLD_BY[failure.kind]}"
    if failure.signal is None:
        return f"exited with status {failure.exit_code} ({by})", "The end of its log or stderr says why."
    meaning, advice = SIGNAL_MEANINGS.get(failure.signal, ("", ""))
    return f"killed by {_signal_name(failure.signal)} ({by})" + (f": {meaning}" if meaning else ""), advice


def _oom_killed(record: KernelEvent) -> tuple[str, str]:
    """The OOM killer's victim, with the limit it hit where the kernel said which."""
    held = f", holding {record.anon_rss_kb / 1024:.0f} MB" if record.anon_rss_kb is not None else ""
    if record.memcg:
        group = f" {record.memcg_path}" if record.memcg_path else ""
        return (f"killed by the OOM killer at its memory cgroup's limit{group}{held} (the kernel log)",
                "Give the job more memory (the container's or the Slurm job's --mem) or use less: fewer DataLoader "
                "workers or prefetch_factor, a smaller batch; workers that grow copy the dataset's Python objects "
                "(keep it in numpy arrays or tensors, not lists of objects).")
    return (f"killed by the OOM killer: the machine ran out of memory{held} (the kernel log)",
            "Use less memory (fewer DataLoader workers, a smaller batch) or run on a node with more, alone.")


def _how(exit_: ProcessExit) -> tuple[str, str]:
    if exit_.signal is not None:
        name = _signal_name(exit_.signal)
        core = ", core dumped" if exit_.core_dumped else ""
        meaning, advice = SIGNAL_MEANINGS.get(exit_.signal, ("", ""))
        return (f"killed by {name}{core}" + (f": {meaning}" if meaning else "")), advice
    code = exit_.exit_code
    if code is None:
        return (f"how it ended is not known ({exit_.read_from})" if exit_.read_from else "how it ended is not known",
                "Its exit status is in its launcher's output (torchrun prints each rank's exitcode); the kernel log "
                "(dmesg) shows whether the OOM killer ended it.")
    if code == 0:
        return "finished (exit status 0)", ""
    if code > SHELL_SIGNAL_BASE and code - SHELL_SIGNAL_BASE in SIGNAL_MEANINGS:
        by = code - SHELL_SIGNAL_BASE
        meaning, advice = SIGNAL_MEANINGS[by]
        return (f"exited with status {code}, a shell's word for a child killed by {_signal_name(by)}: {meaning}",
                advice)
    if code == 1:
        return ("exited with status 1, as Python does on an uncaught exception",
                "The end of its log or stderr has the traceback.")
    return f"exited with status {code}", "The end of its log or stderr says why."


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
