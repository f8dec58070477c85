"""Which tree to watch when the user names a PID: the launcher of a training process, else the process itself.

:func:`resolve_root` reads the named process and its parent once (probes/sensors/process_facts.py) and asks the
launchers in LAUNCHERS' order; the first whose training process it is names the root (torchrun's agent for a
rank, mp.spawn's parent for a spawned child). A tree that holds gputop is never watched as a job.
"""

from __future__ import annotations

import os

from probes.jobs.facts import Attachment, RootChoice
from probes.jobs.launchers import LAUNCHERS, read_dist_env
from probes.sensors.process_facts import NO_ENV, is_python_command, process_cmdline, process_executable, process_name
from probes.sensors.proctree import child_pids, parent_pid


def _our_ancestors() -> set[int]:
    """gputop and its ancestors: a tree that holds gputop is never watched as a job (py-spy would sample us)."""
    found = set()
    pid: int | None = os.getpid()
    while pid and pid not in found:
        found.add(pid)
        pid = parent_pid(pid)
    return found


def holds_gputop(pid: int) -> bool:
    """Whether `pid`'s tree holds this gputop (it is gputop or one of its ancestors: the shell gputop was typed in,
    the terminal's session, the machine's init): such a tree is never watched as a job, nor listed as one."""
    return pid in _our_ancestors()


def _attachment(pid: int, parent: int | None) -> Attachment:
    """The named process and its parent; a parent that must not be watched (init, gputop's own ancestors) is
    left blank, so that no launcher takes it for the root."""
    if parent is None:
        return Attachment(pid=pid, name=process_name(pid), cmdline=process_cmdline(pid), env=read_dist_env(pid),
                          parent_pid=0, parent_name="", parent_cmdline=(), parent_python=False, parent_env=NO_ENV,
                          ranked_siblings=0)
    parent_cmdline = process_cmdline(parent)
    return Attachment(
        pid=pid, name=process_name(pid), cmdline=process_cmdline(pid), env=read_dist_env(pid),
        parent_pid=parent, parent_name=process_name(parent), parent_cmdline=parent_cmdline,
        parent_python=is_python_command(parent_cmdline, process_executable(parent)),
        parent_env=read_dist_env(parent),
        ranked_siblings=sum(1 for c in child_pids(parent) if read_dist_env(c).rank is not None),
    )


def resolve_root(attached_pid: int) -> RootChoice:
    """The process whose tree is watched when the user names `attached_pid`: the launcher of a training process
    (torchrun's agent, mp.spawn's parent, a script that started two or more ranks), else the process itself."""
    ours = _our_ancestors()
    parent = parent_pid(attached_pid)
    # An orphan or a sibling of gputop may still name its job elsewhere (srun names its step's slurmstepd).
    attached = _attachment(attached_pid, parent if parent is not None and parent > 1 and parent not in ours else None)
    if attached.env.rank is not None and attached.parent_env.rank is not None:
        return RootChoice(attached_pid)  # a helper of a rank (a DataLoader worker): watched as asked
    for launcher in LAUNCHERS:
        choice = launcher.root_for(attached)
        if choice is not None:
            return choice if choice.root_pid > 1 and choice.root_pid not in ours else RootChoice(attached_pid)
    return RootChoice(attached_pid)


def resolve_root_safely(attached_pid: int) -> RootChoice:
    """resolve_root, but never raising: a process that cannot be read is watched as named."""
    try:
        return resolve_root(attached_pid)
    except Exception:
        return RootChoice(attached_pid)
