"""Slurm, as gputop asks it: which job step a process belongs to, where that step's processes are on this node,
and what Slurm's own commands say about a job.

This module is the only one that runs Slurm's commands (``scontrol listpids``, ``scontrol show step``,
``scontrol show job``; clients find their cluster through SLURM_CONF as usual) and the only one that reads
Slurm's marks on processes: ``slurmstepd: [JOB.STEP]`` command lines, and the step in a process's cgroup path
under proctrack/cgroup (``.../slurm/uid_U/job_J/step_S/task_T`` with cgroup v1,
``.../job_J/step_S/user/task_T`` with v2). Nothing here raises: a command that is missing, fails or times out
gives a :class:`SlurmError` value with one line that says why.

It also reads what srun wrote in a batch job's output file about its tasks' ends (``srun: error: n2: task 1:
Exited with exit code 1``): while a job runs, Slurm keeps nothing else a user can ask about a task that has ended
(`sacct` needs accounting storage and `sstat` a running task; checked with Slurm 22.05), and `agent_target` says
so for a node of the job where no task of it runs (NoTaskHere).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass

from probes.sensors.cgroup import parse_proc_cgroup
from probes.sensors.proctree import ancestors, in_nested_pid_namespace, node_processes
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
    found = _root_and_job(step)
    if isinstance(found, tuple):
        return found
    return found if isinstance(found, SlurmError) else _no_step_here(step, found)


def _root_and_job(step: SlurmStep) -> tuple[int, SlurmStep] | dict[str, str] | SlurmError:
    """step_root's search: the slurmstepd found, else the job as `scontrol show job` describes it."""
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
    return found if found is not None else job


def _no_step_here(step: SlurmStep, job: dict[str, str]) -> SlurmError:
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
    names = hostnames(node_list)
    if isinstance(names, SlurmError):
        return names
    return names or SlurmError(f"Slurm job {job.job_id}: `scontrol show hostnames {node_list}` named no node")


def hostnames(node_list: str) -> tuple[str, ...] | SlurmError:
    """A compressed node list ('n[1-2],gpu7') as node names, expanded by ``scontrol show hostnames`` (which asks
    no controller)."""
    out = _scontrol("show", "hostnames", node_list)
    if isinstance(out, SlurmError):
        return out
    return tuple(line.strip() for line in out.splitlines() if line.strip())


def agent_step_command(job: SlurmStep, node: str, agent_argv: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The srun that runs `agent_argv` as a step of the job on one node, beside its tasks (--overlap: it takes
    none of their CPUs or GPUs from them). One srun per node, so each node's frames come through a pipe of their
    own: no label to strip, long lines of two nodes never interleave, and a node's srun ending is that node lost."""
    return ("srun", "--jobid", job.job_id, "--overlap", "--nodes", "1", "--ntasks", "1", "--nodelist", node,
            "--job-name", AGENT_STEP_NAME, "--quiet", *agent_argv)


# --- a node of a running job where no task of it runs ------------------------------------------------------

# srun's line when tasks of its step end other than with status 0 (Slurm 22.05; one node a line, as it printed):
# "srun: error: n2: task 1: Exited with exit code 1", "srun: error: n2: tasks 2-3: Killed", "srun: error: n2:
# task 1: Segmentation fault". A task that exits with status 0 gets none (only with srun -v). The line names no
# step: in a batch script that ran several steps, an earlier step's line reads the same.
_SRUN_TASK_END = re.compile(r"^srun: error: (?P<node>[^\s:]+): tasks? (?P<tasks>\d+(?:[-,]\d+)*): (?P<how>\S.*)$")
_EXIT_CODE = re.compile(r"^Exited with exit code (\d+)$")
# How much of the end of the job's output file is read for srun's lines: a job may log gigabytes, and srun writes
# a task's end as it learns of it, after what the task itself wrote.
OUTPUT_TAIL_BYTES = 256 * 1024


def clock(at: float) -> str:
    """A Unix time as this machine's wall clock: '14:18:50'."""
    return time.strftime("%H:%M:%S", time.localtime(at))


@dataclass(frozen=True)
class TaskEnd:
    """One line srun wrote in the job's output when tasks of its step ended other than with status 0."""

    node: str
    tasks: tuple[int, ...]  # the step's task numbers (SLURM_PROCID)
    how: str  # srun's words: 'Exited with exit code 1', 'Killed', 'Segmentation fault'
    exit_code: int | None  # N of 'Exited with exit code N'; None when a signal ended them
    line: str
    # When srun wrote it: the output file's modification time where this line is the file's last (srun writes a
    # task's end as soon as it hears of it); `by` that time where the file was written after it; None: not known.
    at: float | None = None
    by: float | None = None

    def ended(self) -> str:
        """'exited with status 1 at 14:18:50', 'ended (Killed) by 14:18:52', as far as what was read says."""
        words = f"exited with status {self.exit_code}" if self.exit_code is not None else f"ended ({self.how})"
        if self.at is not None:
            return f"{words} at {clock(self.at)}"
        return f"{words} by {clock(self.by)}" if self.by is not None else words


def _task_numbers(text: str) -> tuple[int, ...]:
    """'1' -> (1,), '2-3' -> (2, 3), '0,2-3' -> (0, 2, 3)."""
    numbers: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        numbers += range(int(first), int(last or first) + 1)
    return tuple(numbers)


def parse_task_ends(text: str, written_at: float | None = None) -> tuple[TaskEnd, ...]:
    """srun's lines on its tasks' ends in a job's output (`text`, oldest first). `written_at`, the file's
    modification time, is when the line that ends the text was written (`at`), and a time every earlier line
    was written by (`by`)."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    ends = []
    for index, line in enumerate(lines):
        match = _SRUN_TASK_END.match(line)
        if match is None:
            continue
        code = _EXIT_CODE.match(match.group("how"))
        last = index == len(lines) - 1
        ends.append(TaskEnd(node=match.group("node"), tasks=_task_numbers(match.group("tasks")),
                            how=match.group("how"), exit_code=int(code.group(1)) if code else None, line=line,
                            at=written_at if last else None, by=None if last else written_at))
    return tuple(ends)


def read_task_ends(path: str) -> tuple[TaskEnd, ...] | SlurmError:
    """srun's lines on its tasks' ends in the last OUTPUT_TAIL_BYTES of a job's output file."""
    try:
        with open(path, "rb") as file:
            written_at = os.fstat(file.fileno()).st_mtime
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - OUTPUT_TAIL_BYTES))
            data = file.read(OUTPUT_TAIL_BYTES)
    except OSError as exc:
        return SlurmError(f"cannot read the job's output {path}: {exc.strerror or exc}")
    text = data.decode("utf-8", "replace")
    if size > OUTPUT_TAIL_BYTES:  # the first line read is cut: not one of srun's
        text = text.partition("\n")[2]
    return parse_task_ends(text, written_at)


@dataclass(frozen=True)
class NoTaskHere:
    """A node of a running job where no task of it runs (its tasks here have ended, or none was placed here), and
    what Slurm says of it: what `gputop agent --slurm-job J` reports there instead of frames."""

    job: str  # the job or step asked for: '12', '12.0'
    node: str  # this node, as Slurm names it
    steps: tuple[StepInfo, ...] = ()  # the job's task steps running now whose nodes include this one
    ends: tuple[TaskEnd, ...] = ()  # srun's lines on tasks of this node
    source: str | None = None  # the job's output file they were read from
    unread: str | None = None  # why srun's lines could not be read

    def keeping_times(self, earlier: NoTaskHere | None) -> NoTaskHere:
        """This reading, where a line of srun's was read before as the file's last: with the time it had then (the
        job may have written more since, which leaves only `by` a later time)."""
        if earlier is None:
            return self
        known = {end.line: end.at for end in earlier.ends if end.at is not None}
        ends = tuple(dataclasses.replace(end, at=known[end.line], by=None) if end.at is None and end.line in known
                     else end for end in self.ends)
        return dataclasses.replace(self, ends=ends)

    def line(self) -> str:
        """'no task of job 12 here: its step 12.0 runs on n[1-2] (2 tasks) with none left on n2; srun wrote
        "srun: error: n2: task 1: Exited with exit code 1" in /home/a/job.out, its last line, at 14:18:50'."""
        words = f"no task of job {self.job} here"
        if self.steps:
            words += ": " + ", ".join(f"its step {s.step} runs on {s.node_list}" +
                                      (f" ({s.tasks} tasks)" if s.tasks is not None else "") for s in self.steps)
            words += f" with none left on {self.node}"
        else:
            words += f": no step of it runs on {self.node} now"
        for end in self.ends:
            when = (f", its last line, at {clock(end.at)}" if end.at is not None else
                    f", written by {clock(end.by)}" if end.by is not None else "")
            words += f"; srun wrote \"{end.line}\" in {self.source}{when}"
        if not self.ends and self.source is not None and self.unread is None:
            words += (f"; srun wrote no line on a task of {self.node} in the end of {self.source} (it writes none "
                      "for a task that exits with status 0)")
        if self.unread is not None:
            words += f"; how its tasks here ended was not read: {self.unread}"
        return words


def _output_file(job: dict[str, str]) -> str | SlurmError:
    """The file srun's own lines go to in a batch job (its StdErr, which is StdOut unless --error parts them)."""
    path = next((job[key] for key in ("StdErr", "StdOut") if job.get(key) not in (None, "", "(null)")), None)
    if path is not None:
        return path
    if job.get("BatchFlag") == "0":
        return SlurmError(f"job {job.get('JobId', '?')} was started by srun outside a batch script: srun wrote how "
                          "its tasks ended on its own terminal")
    return SlurmError(f"Slurm names no output file for job {job.get('JobId', '?')}")


def agent_target(step: SlurmStep, node: str) -> tuple[int, SlurmStep] | NoTaskHere | SlurmError:
    """What `gputop agent --slurm-job JOB[.STEP]` on `node` watches: the slurmstepd of the job's tasks here
    (step_root); where the job runs and holds this node but no task of it runs here, what Slurm says of that
    (NoTaskHere), a fact the merge shows rather than a node lost; a SlurmError otherwise (no such job, or one
    that does not run, or does not hold this node)."""
    found = _root_and_job(step)
    if isinstance(found, (tuple, SlurmError)):
        return found
    job = found
    nodes = hostnames(job.get("NodeList", "")) if job.get("JobState") == "RUNNING" else ()
    if isinstance(nodes, SlurmError) or node not in nodes:
        return _no_step_here(step, job)
    steps = show_steps(SlurmStep(step.job_id))
    listing = []
    for info in steps if not isinstance(steps, SlurmError) else ():
        if not info.step.is_task_step or info.name == AGENT_STEP_NAME or info.step == own_step() or \
                (step.step is not None and info.step != step):
            continue
        on = hostnames(info.node_list)
        if not isinstance(on, SlurmError) and node in on:
            listing.append(info)
    source = _output_file(job)
    if isinstance(source, SlurmError):
        return NoTaskHere(str(step), node, tuple(listing), unread=source.reason)
    ends = read_task_ends(source)
    if isinstance(ends, SlurmError):
        return NoTaskHere(str(step), node, tuple(listing), source=source, unread=ends.reason)
    return NoTaskHere(str(step), node, tuple(listing), tuple(e for e in ends if e.node == node), source=source)
