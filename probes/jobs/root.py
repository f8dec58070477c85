"""Which tree to watch when the user names a PID: the launcher of a training process, else the process itself.

:func:`resolve_root` reads the named process and its parent once (probes/jobs/environment.py) and asks the
launchers in LAUNCHERS' order; the first whose training process it is names the root (torchrun's agent for a
rank, mp.spawn's parent for a spawned child). A tree that holds gputop is never watched as a job.
"""

from __future__ import annotations

import os

from probes.jobs.environment import is_python_command, process_cmdline, process_executable, process_name
from probes.jobs.facts import Attachment, RootChoice
from probes.jobs.launchers import LAUNCHERS, read_dist_env
from probes.proctree import child_pids, parent_pid


def _our_ancestors() -> set[int]:
    """gputop and its ancestors: a tree that holds gputop is never watched as a job (py-spy would sample us)."""
    found = set()
    pid: int | None = os.getpid()
    while pid and pid not in found:
        found.add(pid)
        pid = parent_pid(pid)
    return found


def _attachment(pid: int, parent: int) -> Attachment:
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
    parent = parent_pid(attached_pid)
    if parent is None or parent <= 1 or parent in _our_ancestors():
        return RootChoice(attached_pid)
    attached = _attachment(attached_pid, parent)
    if attached.env.rank is not None and attached.parent_env.rank is not None:
        return RootChoice(attached_pid)  # a helper of a rank (a DataLoader worker): watched as asked
    for launcher in LAUNCHERS:
        choice = launcher.root_for(attached)
        if choice is not None:
            return choice
    return RootChoice(attached_pid)


def resolve_root_safely(attached_pid: int) -> RootChoice:
    """resolve_root, but never raising: a process that cannot be read is watched as named."""
    try:
        return resolve_root(attached_pid)
    except Exception:
        return RootChoice(attached_pid)
