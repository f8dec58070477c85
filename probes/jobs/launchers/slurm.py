"""Slurm (``srun``, ``sbatch``, ``salloc``): the tasks of a job step and the slurmstepd that started them.

Slurm's shape (checked with Debian's Slurm 22.05): each node runs one ``slurmstepd: [JOB.STEP]`` per step
(parent PID 1), and the step's tasks are its children, never children of ``srun``; the user's ``srun`` only
has a helper ``srun`` child, and its step runs wherever Slurm placed it (this node or another). A batch script
runs as ``bash <spool>/jobN/slurm_script`` under ``slurmstepd: [JOB.batch]``, with SLURM_PROCID=0 but no
SLURM_STEP_ID: it is not a rank. A task carries SLURM_PROCID (its rank), SLURM_LOCALID, SLURM_NTASKS or
SLURM_STEP_NUM_TASKS (the world), SLURM_JOB_ID and SLURM_STEP_ID; Slurm sets no RANK or WORLD_SIZE.

So the root of a Slurm job is its step's slurmstepd on this node, whichever of the job's processes the user
named: a task (its parent), ``srun`` (the step it started, asked of Slurm through probes/sensors/slurm.py), the batch
script (the job's newest task step here). A client whose step is not on this node stays the root, and the job
is said to train elsewhere: nothing in its tree is judged, so it is never called hung.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from probes.jobs.facts import (
    HELPER_ROLES,
    Attachment,
    JobLayout,
    NoteContext,
    ProcessFacts,
    RootChoice,
    WatchedTree,
)
from probes.jobs.launchers.base import Launcher
from probes.sensors.process_facts import DistEnv, int_or_none, process_name, torch_distributed_env
from probes.sensors.slurm import (
    STEPD_COMM,
    SlurmStep,
    process_cgroup_step,
    step_of_srun,
    stepd_title_step,
    task_stepd,
    tasks_on_node,
)

# Slurm's clients: they talk to the controller and the step's slurmstepd, and train nothing themselves.
SLURM_CLIENTS = ("srun", "salloc", "sbatch")


def task_step(environ: Mapping[str, str]) -> str | None:
    """A task's JOBID.STEP; None for a process that is no task (the batch script, a login shell)."""
    job, step = environ.get("SLURM_JOB_ID"), environ.get("SLURM_STEP_ID")
    return f"{job}.{step}" if job and step and "SLURM_PROCID" in environ else None


def is_task_stepd(name: str, cmdline: Sequence[str]) -> bool:
    """slurmstepd serving a step of tasks (not the batch script's or the extern step)."""
    step = stepd_title_step(tuple(cmdline)) if name == STEPD_COMM else None
    return step is not None and step.is_task_step


class Slurm(Launcher):
    kind = "slurm"

    def rank_variables(self, environ: Mapping[str, str]) -> DistEnv | None:
        step = task_step(environ)
        if step is None:
            return None
        world = int_or_none(environ.get("SLURM_STEP_NUM_TASKS")) or int_or_none(environ.get("SLURM_NTASKS"))
        # This node's share of the step, as Slurm states it: with it a task that is gone is named missing.
        on_this_node = tasks_on_node(environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE"),
                                     int_or_none(environ.get("SLURM_NODEID")))
        # torch.distributed's own variables (MASTER_ADDR/PORT a job script exports) ride along; the rank is Slurm's.
        return dataclasses.replace(
            torch_distributed_env(environ), rank=int_or_none(environ.get("SLURM_PROCID")),
            local_rank=int_or_none(environ.get("SLURM_LOCALID")), world_size=world, local_world_size=on_this_node,
            slurm_step=step)

    def is_launcher_process(self, name: str, cmdline: Sequence[str]) -> bool:
        return is_task_stepd(name, cmdline)

    def find(self, tree: WatchedTree) -> JobLayout | None:
        """The tasks of a step (processes with Slurm's task variables), or, for a tree rooted at a Slurm client
        or slurmstepd that holds no Python process, the client alone: its job trains elsewhere."""
        heads = [h for h in tree.rank_heads if h.env.slurm_step is not None]
        if heads:
            layout = tree.ranks_layout(self.kind, heads)
            step = next((h.env.slurm_step for h in heads if h.alive), heads[0].env.slurm_step)
            return dataclasses.replace(layout, slurm_step=step)
        root = tree.root
        if root is None or not (root.name in SLURM_CLIENTS or root.name == STEPD_COMM):
            return None
        if any(f.python for f in tree.processes if f.role not in HELPER_ROLES):
            return None  # a batch script running Python itself: a launched job
        client_step = _client_step(root)
        return JobLayout(kind=self.kind, launcher_pid=root.pid, launchers=(root.pid,),
                         slurm_step=str(client_step) if client_step is not None else None, training_elsewhere=True)

    def root_for(self, attached: Attachment) -> RootChoice | None:
        """A task's slurmstepd; for srun, the slurmstepd of the step it started, when it runs on this node; for
        the batch script (or a process under a task), the slurmstepd of the job's newest task step here."""
        if attached.env.slurm_step is not None and is_task_stepd(attached.parent_name, attached.parent_cmdline):
            return RootChoice(attached.parent_pid, attached_rank=attached.env.rank)
        step = _attached_step(attached)
        if step is None:
            return None
        found = task_stepd(step)
        if found is None:
            return None
        stepd, _ = found
        return RootChoice(stepd, attached_rank=attached.env.rank if attached.env.slurm_step else None)

    def local_rank(self, process: ProcessFacts, rank: int) -> int | None:
        return process.env.local_rank

    def note(self, layout: JobLayout, context: NoteContext) -> str:
        root = context.processes.get(context.root_pid)
        root_name = root.name if root is not None else "PID"
        if layout.training_elsewhere:
            if layout.slurm_step is None:
                return (f"{root_name} (PID {context.root_pid}) is a Slurm client whose job's tasks gputop cannot "
                        "find: attach to a task, or use --slurm-job JOBID on the node that runs it")
            job, _, step = layout.slurm_step.partition(".")
            which = f"job {job} step {step}" if step else f"job {job}"
            return (f"{root_name} (PID {context.root_pid}) runs {which}, whose tasks are not on this node: "
                    f"attach there (gputop --slurm-job {layout.slurm_step})")
        tasks = f"{context.live_training} task{'s' if context.live_training != 1 else ''}"
        what = f"Slurm step {layout.slurm_step}: {tasks} on this node under slurmstepd (PID {context.root_pid})"
        if context.attached_pid == context.root_pid:
            return f"watching {what}"
        attached = context.processes.get(context.attached_pid)
        ranks = dict(layout.ranks)
        if context.attached_pid in ranks:
            named = f"task {ranks[context.attached_pid]}"
        else:
            # The srun or batch script the user named is outside the watched tree.
            named = attached.name if attached is not None else (process_name(context.attached_pid) or "PID")
        return f"attached to {named} (PID {context.attached_pid}): watching {what}"


def _client_step(root: ProcessFacts) -> SlurmStep | None:
    """The step an srun started (asked of Slurm), or the job of a slurmstepd (the batch script's) whose tasks
    run under another."""
    if root.name == "srun":
        info = step_of_srun(root.pid)
        return info.step if info is not None else None
    served = stepd_title_step(root.cmdline) if root.name == STEPD_COMM else None
    return SlurmStep(served.job_id) if served is not None else None


def _attached_step(attached: Attachment) -> SlurmStep | None:
    """The job (or step) of the process the user named: srun's step from Slurm, a task's or the batch
    script's from its environment or its cgroup, the batch script's from its slurmstepd's title."""
    if attached.name == "srun":
        info = step_of_srun(attached.pid)
        return info.step if info is not None else None
    if attached.env.slurm_step is not None:
        job, _, step = attached.env.slurm_step.partition(".")
        return SlurmStep(job, step)
    parent_step = stepd_title_step(attached.parent_cmdline) if attached.parent_name == STEPD_COMM else None
    if parent_step is not None:  # the batch script: its job's task steps
        return SlurmStep(parent_step.job_id)
    in_cgroup = process_cgroup_step(attached.pid)  # proctrack/cgroup: a process that lost Slurm's variables
    if in_cgroup is not None:
        cgroup_step, _ = in_cgroup
        return cgroup_step if cgroup_step.is_task_step else SlurmStep(cgroup_step.job_id)
    return None
