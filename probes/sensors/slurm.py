"""Slurm, as gputop asks it: which job step a process belongs to, where that step's processes are on this node,
and what Slurm's own commands say about a job.

This module is the only one that runs Slurm's commands (``scontrol listpids``, ``scontrol show step``,
``scontrol show job``; clients find their cluster through SLURM_CONF as usual) and the only one that reads
Slurm's marks on processes: ``slurmstepd: [JOB.STEP]`` command lines, and the step in a process's cgroup path
under proctrack/cgroup (``.../slurm/uid_U/job_J/step_S/task_T`` with cgroup v1,
``.../job_J/step_S/user/task_T`` with v2). Nothing here raises: a command that is missing, fails or times out
gives a :class:`SlurmError` value with one line that says why.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass

from probes.jobs.facts import ancestors
from probes.sensors.cgroup import parse_proc_cgroup
from probes.sensors.proctree import in_nested_pid_namespace, node_processes
from probes.sensors.textfiles import read_text

STEPD_COMM = "slurmstepd"
COMMAND_TIMEOUT_S = 10.0
# Steps that are not training tasks: the batch script, the extern step (PrologFlags=contain), an allocation.
NON_TASK_STEPS = ("batch", "extern", "interactive")
_STEPD_TITLE = re.compile(r"^slurmstepd: \[(\d+)\.(\w+)\]$")
_STEP_ID = re.compile(r"^(\d+)(?:\.(\w+))?$")
_CGROUP_STEP = re.compile(r"/job_(\d+)/step_(\w+)(?:/(?:.*/)?task_(\d+))?")
# Asked each tick (the note of an srun whose tasks are elsewhere): scontrol is asked at most this often.
_SRUN_LOOKUP_TTL_S = 10.0
# The name of the step a merging gputop starts its agent in on each node (agent_step_command): a step of the
# job to Slurm, never one of its task steps to gputop.
AGENT_STEP_NAME = "gputop-agent"


@dataclass(frozen=True)
class SlurmStep:
    """A Slurm job, or one step of it (step None: the job as a whole)."""

    job_id: str
    step: str | None = None

    def __str__(self) -> str:
        return self.job_id if self.step is None else f"{self.job_id}.{self.step}"

    @property
    def is_task_step(self) -> bool:
        """A step that runs the user's tasks (0, 1, ...), not the batch script or the extern step."""
        return self.step is not None and self.step not in NON_TASK_STEPS


@dataclass(frozen=True)
class SlurmError:
    """Why Slurm could not answer: one line for the user."""

    reason: str


@dataclass(frozen=True)
class StepInfo:
    """One step as ``scontrol show step`` describes it."""

    step: SlurmStep
    name: str
    node_list: str
    tasks: int | None
    srun_host: str | None  # where the srun that started it runs
    srun_pid: int | None


_TASKS_PER_NODE = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def tasks_on_node(tasks_per_node: str | None, node_index: int | None) -> int | None:
    """How many tasks Slurm put on the node numbered `node_index` of a step, from its compressed per-node count
    (SLURM_STEP_TASKS_PER_NODE: "2", "2(x3),1" = 2,2,2,1); None where either is missing or malformed."""
    if not tasks_per_node or node_index is None or node_index < 0:
        return None
    counts: list[int] = []
    for part in tasks_per_node.split(","):
        match = _TASKS_PER_NODE.match(part.strip())
        if match is None:
            return None
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts[node_index] if node_index < len(counts) else None


def parse_step_id(text: str) -> SlurmStep | None:
    """'12' or '12.0' or '12.batch' as a SlurmStep; None when it is not one."""
    match = _STEP_ID.match(text.strip())
    return SlurmStep(match.group(1), match.group(2)) if match else None


def stepd_title_step(cmdline: tuple[str, ...] | list[str]) -> SlurmStep | None:
    """The step a slurmstepd serves, from the title it gives itself ('slurmstepd: [12.0]')."""
    match = _STEPD_TITLE.match(" ".join(cmdline).strip())
    return SlurmStep(match.group(1), match.group(2)) if match else None


def cgroup_step(cgroup_text: str | None) -> tuple[SlurmStep, int | None] | None:
    """The step (and task number, where the path has one) of a process under proctrack/cgroup, from the text
    of its /proc/PID/cgroup; None when no line names a Slurm step."""
    for _, path in parse_proc_cgroup(cgroup_text or ""):
        match = _CGROUP_STEP.search(path)
        if match:
            task = int(match.group(3)) if match.group(3) is not None else None
            return SlurmStep(match.group(1), match.group(2)), task
    return None


def process_cgroup_step(pid: int) -> tuple[SlurmStep, int | None] | None:
    return cgroup_step(read_text(f"/proc/{pid}/cgroup"))


def stepd_pids(step: SlurmStep | None = None) -> dict[int, SlurmStep]:
    """{pid: step} of the slurmstepd processes on this node (of one job or step when given). A slurmstepd in a
    PID namespace below ours is another node's sharing this kernel (a node in a container or namespace, as the
    test cluster's are): this machine's /proc shows it, but a step there is not on this node."""
    found = {}
    for pid, proc in node_processes().items():
        if proc.name != STEPD_COMM:
            continue
        served = stepd_title_step(proc.cmdline)
        if served is None or in_nested_pid_namespace(pid):
            continue
        if step is None or (served.job_id == step.job_id and step.step in (None, served.step)):
            found[pid] = served
    return found


def is_agent_command(cmdline: tuple[str, ...] | list[str]) -> bool:
    """A `gputop agent` process (`python -m tui agent ...`, or the `gputop agent` entry point): another merge's
    agent, whose step, py-spy and all are never part of the job it watches."""
    words = list(cmdline)
    for index in range(1, len(words)):
        if words[index] != "agent":
            continue
        before = words[index - 1]
        if os.path.basename(before) == "gputop" or (before == "tui" and index >= 2 and words[index - 2] == "-m"):
            return True
    return False


def agent_steps(step: SlurmStep, stepds: dict[int, SlurmStep]) -> set[SlurmStep]:
    """The steps among `stepds` ({pid: step} on this node) that run a gputop agent, not the job's tasks: those
    whose tasks are `gputop agent` processes, and those Slurm names AGENT_STEP_NAME (which also covers an agent
    step whose task is not started yet). Two merges of one job each start agent steps: neither may take the
    other's for the job, whose newest task step it would be."""
    children: dict[int, list] = {}
    for proc in node_processes().values():
        children.setdefault(proc.ppid, []).append(proc)
    found = {served for pid, served in stepds.items()
             if any(is_agent_command(child.cmdline) for child in children.get(pid, ()))}
    named = show_steps(SlurmStep(step.job_id))
    if not isinstance(named, SlurmError):  # Slurm unreachable: the processes alone say it
        found |= {s.step for s in named if s.name == AGENT_STEP_NAME}
    return found


def agent_processes(procs) -> set[int]:
    """Of a process table ({pid: probes.sensors.proctree.NodeProcess}): the gputop agents, the slurmstepd of each one's
    step, and what the agents started (their py-spy). None of them is ever a training job: a census (follow
    mode, the picker) leaves them out."""
    agents = {pid for pid, proc in procs.items() if is_agent_command(proc.cmdline)}
    found = set(agents)
    for pid in agents:
        parent = procs.get(procs[pid].ppid)
        if parent is not None and parent.name == STEPD_COMM:
            found.add(parent.pid)
    parent_of = {pid: proc.ppid for pid, proc in procs.items()}
    found |= {pid for pid in procs if not agents.isdisjoint(ancestors(pid, parent_of))}  # their descendants
    return found


def own_step() -> SlurmStep | None:
    """The step this process itself runs in (a `gputop agent` started by srun), from Slurm's variables."""
    job, step = os.environ.get("SLURM_JOB_ID"), os.environ.get("SLURM_STEP_ID")
    return SlurmStep(job, step) if job and step else None


def task_stepd(step: SlurmStep) -> tuple[int, SlurmStep] | None:
    """The slurmstepd on this node of a task step, or, for a whole job, of its newest task step (the one with
    the highest number: the step running now, when a batch script runs its steps one after another). Never the
    step this process runs in, nor any step that runs a gputop agent (agent_steps): an agent started as a step of
    the job (srun --overlap), this gputop's or another's, is the newest one."""
    mine = own_step()
    candidates = [(pid, served) for pid, served in stepd_pids(step).items()
                  if served.is_task_step and served != mine]
    if candidates:
        agents = agent_steps(step, dict(candidates))
        candidates = [(pid, served) for pid, served in candidates if served not in agents]
    if not candidates:
        return None
    return max(candidates, key=lambda item: (int(item[1].step) if item[1].step and item[1].step.isdigit() else -1,
                                             item[0]))


def slurm_missing() -> SlurmError | None:
    """Why Slurm's commands cannot run here, or None when they are installed."""
    if shutil.which("scontrol") is None:
        return SlurmError("Slurm's scontrol is not installed on this node")
    return None


def _scontrol(*args: str) -> str | SlurmError:
    missing = slurm_missing()
    if missing is not None:
        return missing
    try:
        done = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return SlurmError(f"`scontrol {' '.join(args)}` did not answer within {COMMAND_TIMEOUT_S:g} s")
    except OSError as exc:
        return SlurmError(f"cannot run scontrol: {exc.strerror or exc}")
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        return SlurmError(f"`scontrol {' '.join(args)}`: {said[-1] if said else f'exit status {done.returncode}'}")
    return done.stdout


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def _records(text: str) -> list[dict[str, str]]:
    """`scontrol show ... -o` output: one record a line of Key=Value words (a job name may hold spaces: a word
    without '=' belongs to the value before it)."""
    records = []
    for line in text.splitlines():
        record: dict[str, str] = {}
        key = None
        for word in line.split():
            name, sep, value = word.partition("=")
            if sep and name:
                key, record[name] = name, value
            elif key is not None:
                record[key] += " " + word
        if record:
            records.append(record)
    return records


def show_steps(job: SlurmStep | None = None) -> tuple[StepInfo, ...] | SlurmError:
    """The running steps (of one job when given), as ``scontrol show step -o`` describes them."""
    out = _scontrol("show", "step", "-o", *([str(job)] if job is not None else []))
    if isinstance(out, SlurmError):
        return out
    steps = []
    for record in _records(out):
        step = parse_step_id(record.get("StepId", ""))
        if step is None:
            continue
        host, _, pid = record.get("SrunHost:Pid", "").rpartition(":")
        steps.append(StepInfo(step=step, name=record.get("Name", ""), node_list=record.get("NodeList", ""),
                              tasks=_int(record.get("Tasks", "")), srun_host=host or None,
                              srun_pid=_int(pid)))
    return tuple(steps)


def show_job(job: SlurmStep) -> dict[str, str] | SlurmError:
    """``scontrol show job -o JOB`` as {key: value} (JobName, JobState, NodeList, BatchHost, ...)."""
    out = _scontrol("show", "job", "-o", job.job_id)
    if isinstance(out, SlurmError):
        return out
    records = _records(out)
    return records[0] if records else SlurmError(f"Slurm knows no job {job.job_id}")


def this_node_names() -> set[str]:
    """The names this node may go by in Slurm's answers (its short and full host name)."""
    name = socket.gethostname()
    return {name, name.split(".")[0]}


_srun_steps: dict[int, tuple[float, StepInfo | None]] = {}


def step_of_srun(srun_pid: int) -> StepInfo | None:
    """The step an srun on this node started (its SrunHost:Pid), or None when Slurm lists none (or cannot be
    asked). Remembered for a few seconds: a note asks each tick."""
    now = time.monotonic()
    cached = _srun_steps.get(srun_pid)
    if cached is not None and now - cached[0] < _SRUN_LOOKUP_TTL_S:
        return cached[1]
    steps = show_steps()
    found = None
    if not isinstance(steps, SlurmError):
        here = this_node_names()
        found = next((s for s in steps if s.srun_pid == srun_pid and s.srun_host in here), None)
    _srun_steps[srun_pid] = (now, found)
    return found


def step_root(step: SlurmStep) -> tuple[int, SlurmStep] | SlurmError:
    """The slurmstepd on this node whose tree holds a job's tasks (`gputop --slurm-job JOB[.STEP]`): the named
    step's, or the job's newest task step's; a SlurmError saying why there is none (Slurm missing, no such
    job, or a job that runs no step here, with the nodes it runs on)."""
    missing = slurm_missing()
    if missing is not None:
        return missing
    job = show_job(step)
    if isinstance(job, SlurmError):
        return job
    if step.step is not None and not step.is_task_step:  # 12.batch: the batch script's own tree
        found = next(iter(stepd_pids(step).items()), None)
    else:
        found = task_stepd(step)
    if found is not None:
        return found
    state, nodes = job.get("JobState", "?"), job.get("NodeList", "?")
    here = sorted(this_node_names())[0]
    return SlurmError(f"Slurm job {step.job_id} ({state}, nodes {nodes}) has no step {step} process on this node "
                      f"({here})" if step.step is not None else
                      f"Slurm job {step.job_id} ({state}, nodes {nodes}) runs no task step on this node ({here})")


def job_nodes(job: SlurmStep) -> tuple[str, ...] | SlurmError:
    """The nodes a running job holds (``scontrol show job`` NodeList, expanded by ``scontrol show hostnames``);
    a SlurmError when Slurm cannot say or the job does not run (pending, ended)."""
    info = show_job(job)
    if isinstance(info, SlurmError):
        return info
    state = info.get("JobState", "?")
    if state != "RUNNING":
        return SlurmError(f"Slurm job {job.job_id} is {state}: it holds no node to start agents on")
    node_list = info.get("NodeList", "")
    if not node_list or node_list == "(null)":
        return SlurmError(f"Slurm job {job.job_id} lists no nodes")
    out = _scontrol("show", "hostnames", node_list)
    if isinstance(out, SlurmError):
        return out
    names = tuple(line.strip() for line in out.splitlines() if line.strip())
    return names or SlurmError(f"Slurm job {job.job_id}: `scontrol show hostnames {node_list}` named no node")


def agent_step_command(job: SlurmStep, node: str, agent_argv: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The srun that runs `agent_argv` as a step of the job on one node, beside its tasks (--overlap: it takes
    none of their CPUs or GPUs from them). One srun per node, so each node's frames come through a pipe of their
    own: no label to strip, long lines of two nodes never interleave, and a node's srun ending is that node lost."""
    return ("srun", "--jobid", job.job_id, "--overlap", "--nodes", "1", "--ntasks", "1", "--nodelist", node,
            "--job-name", AGENT_STEP_NAME, "--quiet", *agent_argv)
