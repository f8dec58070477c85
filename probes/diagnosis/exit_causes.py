"""How a process of the job ended, in words a person acts on, from what the machine recorded of it.

The facts come from the frames: each process of the tree that ended carries a ProcessExit (probes/sensors/proctree.py:
the exit status or signal its zombie kept, or why none was left to read). An exit status or a signal is said as
what it usually means for a training job, with the one step that tells more; nothing is said of a cause that was not
read (a SIGKILL is the OOM killer's only where the kernel or the cgroup says so).

Pure: no I/O, time from the frames.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass

from probes.frame import Frame, ProcessExit

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


def account(exit_: ProcessExit) -> ExitAccount:
    """The words for one ended process."""
    how, advice = _how(exit_)
    return ExitAccount(exit_.pid, exit_.role, exit_.name, how, advice)


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
