"""probes/sensors/slurm.py and the slurm launcher: Slurm's marks parsed from fixtures (stepd titles, cgroup paths of
proctrack/cgroup, `scontrol -o` records), a client whose job trains elsewhere judged never hung, and Slurm's real
commands against the test cluster (tests/support/slurm_cluster.py), with `gputop --slurm-job`'s bad input."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from support.paths import REPO
from support.processes import wait_for
from support.slurm_cluster import list_pids

from probes.diagnosis.job import diagnose_job
from probes.frame import Frame, JobInfo, ProcessSample, TargetInfo
from probes.jobs.facts import NoteContext, ProcessFacts, WatchedTree
from probes.jobs.launchers.slurm import Slurm, task_step
from probes.sensors.slurm import (
    SlurmError,
    SlurmStep,
    cgroup_step,
    parse_step_id,
    show_job,
    show_steps,
    step_of_srun,
    step_root,
    stepd_pids,
    stepd_title_step,
    tasks_on_node,
)

CGROUP_FIXTURES = REPO / "tests" / "fixtures" / "cgroup" / "slurm"


def test_step_ids_and_stepd_titles():
    assert parse_step_id("12") == SlurmStep("12") and str(parse_step_id("12.0")) == "12.0"
    assert parse_step_id("12.batch").is_task_step is False and parse_step_id("12.3").is_task_step
    assert parse_step_id("x") is None and parse_step_id("12.0.1") is None
    assert stepd_title_step(["slurmstepd: [7.0]"]) == SlurmStep("7", "0")
    assert stepd_title_step(["slurmstepd: [7.batch]"]) == SlurmStep("7", "batch")
    assert stepd_title_step(["/usr/sbin/slurmstepd"]) is None


@pytest.mark.parametrize(("name", "expected"), [
    ("v1_task", (SlurmStep("12", "0"), 1)),  # proctrack/cgroup on cgroup v1: /slurm/uid_U/job_J/step_S/task_T
    ("v2_task", (SlurmStep("12", "0"), 1)),  # cgroup v2: /system.slice/slurmstepd.scope/job_J/step_S/user/task_T
    ("v2_batch", (SlurmStep("12", "batch"), 0)),
    ("no_slurm", None),
])
def test_the_step_of_a_task_from_its_cgroup(name, expected):
    assert cgroup_step((CGROUP_FIXTURES / f"{name}.cgroup").read_text()) == expected


def test_a_task_is_named_by_slurm_variables_and_the_batch_script_is_not():
    task = {"SLURM_JOB_ID": "12", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_LOCALID": "1",
            "SLURM_NTASKS": "2", "MASTER_ADDR": "vm", "MASTER_PORT": "29500"}
    env = Slurm().rank_variables(task)
    assert (env.rank, env.local_rank, env.world_size, env.slurm_step, env.master_port) == (1, 1, 2, "12.0", 29500)
    batch = {"SLURM_JOB_ID": "12", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}
    assert task_step(batch) is None and Slurm().rank_variables(batch) is None


@pytest.mark.parametrize(("per_node", "node", "expected"), [
    ("2", 0, 2), ("2(x3),1", 2, 2), ("2(x3),1", 3, 1), ("2(x3),1", 4, None), ("2", None, None), ("two", 0, None),
])
def test_this_nodes_share_of_a_step(per_node, node, expected):
    """SLURM_STEP_TASKS_PER_NODE's compressed counts, read for this node (SLURM_NODEID): the share that lets a
    gone task be named missing rather than elsewhere."""
    assert tasks_on_node(per_node, node) == expected
    task = {"SLURM_JOB_ID": "12", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "4",
            "SLURM_STEP_TASKS_PER_NODE": per_node, **({"SLURM_NODEID": str(node)} if node is not None else {})}
    assert Slurm().rank_variables(task).local_world_size == expected


def _srun_tree() -> WatchedTree:
    return WatchedTree(10, [
        ProcessFacts(pid=10, ppid=1, role="main", name="srun", cmdline=("srun", "-n", "2", "python", "t.py")),
        ProcessFacts(pid=11, ppid=10, role="other", name="srun", cmdline=("srun", "-n", "2", "python", "t.py")),
    ])


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="a PID namespace (unshare --pid) needs root")
def test_a_slurmstepd_in_a_nested_pid_namespace_is_another_nodes(tmp_path):
    """Two real processes titled as the slurmstepd of step 4242.0: one beside this test, one in a PID namespace
    of its own (as a namespaced or containerised node's on the same kernel). This machine's /proc shows both;
    only the first is on this node."""
    # cat under the name slurmstepd (its comm, as the real daemon's), with the title as its only argument (as
    # the daemon's rewritten one), reading a pipe this test holds open: it runs until killed.
    stepd = tmp_path / "slurmstepd"
    shutil.copy("/bin/cat", stepd)
    title = "exec -a 'slurmstepd: [4242.0]' " + str(stepd)
    here = subprocess.Popen(["bash", "-c", title], start_new_session=True, stdin=subprocess.PIPE)
    nested = subprocess.Popen(["unshare", "--pid", "--fork", "bash", "-c", title], start_new_session=True,
                              stdin=subprocess.PIPE)
    try:
        def both_titled():
            found = [p for p in (here.pid, *_children(nested.pid)) if "4242" in _cmdline(p)]
            return found if len(found) == 2 else None

        here_pid, nested_pid = wait_for(both_titled, timeout=30)
        assert here_pid == here.pid
        assert stepd_pids(SlurmStep("4242")) == {here.pid: SlurmStep("4242", "0")}
        assert nested_pid not in stepd_pids()
    finally:
        for proc in (here, nested):
            os.killpg(proc.pid, 9)
            proc.wait()


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in open(f"/proc/{pid}/task/{pid}/children").read().split()]
    except OSError:
        return []


def _cmdline(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline").read()
    except OSError:
        return ""


@pytest.mark.slow
def test_an_srun_whose_tasks_are_elsewhere_is_never_judged_hung():
    layout = Slurm().find(_srun_tree())
    assert layout is not None and layout.training_elsewhere and layout.ranks == ()
    layout = layout.__class__(**{**layout.__dict__, "slurm_step": "12.0"})
    note = Slurm().note(layout, NoteContext(attached_pid=10, root_pid=10, attached_rank=None, root_label="srun",
                                            live_training=0, processes=_srun_tree().by_pid))
    assert note.startswith("srun (PID 10) runs job 12 step 0, whose tasks are not on this node"), note
    samples = (ProcessSample(pid=10, ppid=1, role="launcher", name="srun", cpu_pct=0.0),
               ProcessSample(pid=11, ppid=10, role="other", name="srun", cpu_pct=0.0))
    job = JobInfo(kind="slurm", attached_pid=10, root_pid=10, launcher_pid=10, note=note, slurm_step="12.0",
                  training_elsewhere=True)
    frames = [Frame(seq=i, time=1000.0 + i, interval_s=1.0, target=TargetInfo(pid=10, alive=True),
                    processes=samples, job=job) for i in range(1, 40)]
    verdict = diagnose_job(frames, None, hang_after_s=5.0)
    assert verdict.finding == "elsewhere" and verdict.verdict.liveness == "unknown", verdict
    assert verdict.verdict.evidence == (note,)


# --- the real cluster ---------------------------------------------------------------------------------------


@pytest.fixture
def sleep_job(slurm_cluster):
    """`srun -n 2 sleep` on the test cluster; (srun's Popen, job id) once both tasks run."""
    srun = subprocess.Popen(["srun", "-n", "2", "-J", "sleeper", "sleep", "600"], env=slurm_cluster.env,
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    job_id = None
    try:
        def running():
            steps = show_steps()
            return next((s for s in steps if s.srun_pid == srun.pid), None) if not isinstance(steps, SlurmError) \
                else None

        os.environ["SLURM_CONF"] = str(slurm_cluster.conf)  # for probes/slurm's own scontrol calls
        step = wait_for(running, timeout=60).step
        job_id = step.job_id
        wait_for(lambda: not isinstance(pids := list_pids(step), SlurmError) and len(pids) == 2, timeout=60)
        yield srun, step
    finally:
        from support.processes import stop_process_tree

        stop_process_tree(srun)
        if job_id is not None:
            slurm_cluster.cancel(job_id)
        os.environ.pop("SLURM_CONF", None)


@pytest.mark.slow
def test_slurm_commands_on_a_real_cluster(sleep_job, slurm_cluster):
    srun, step = sleep_job
    assert step_of_srun(srun.pid).step == step
    listed = list_pids(step)
    assert sorted(p.global_id for p in listed) == [0, 1]
    assert show_job(step)["JobName"] == "sleeper"
    stepd, served = step_root(SlurmStep(step.job_id))
    assert served == step and {p.pid for p in listed} <= {c for c in _children(stepd)}
    assert isinstance(show_job(SlurmStep("999999")), SlurmError)


@pytest.mark.slow
def test_slurm_job_flag_bad_input_is_one_line_and_exit_2(slurm_cluster):
    env = dict(slurm_cluster.env, PYTHONPATH=str(REPO))
    for args, said in ((["--slurm-job", "999999"], "Invalid job id"), (["--slurm-job", "1.2.3"], "JOBID.STEP"),
                       (["--slurm-job", "1", "--pid", "1"], "not allowed")):
        done = subprocess.run([sys.executable, "-m", "tui", *args, "--snapshot", "-", "--duration", "1"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done


def _children(pid: int) -> set[int]:
    import psutil

    return {c.pid for c in psutil.Process(pid).children()}


# --- two merges of one job: another gputop's agent step is never the job ----------------------------------------

AGENT_BASE = 4_000_000_000  # PIDs far above any real one: environment reads find nothing there
PYTHON_TASK = ("python", "train.py")
OTHER_AGENT = ("/opt/venv/bin/python", "-m", "tui", "agent", "--slurm-job", "12", "--interval", "1")


def two_merges_table():
    """Job 12 on one node: step 0 runs two tasks; step 1 is a first merge's agent (with its py-spy); step 2 is
    this agent's own; step 3 is a second merge's agent whose task is not started yet (Slurm names it)."""
    from probes.sensors.proctree import NodeProcess

    b = AGENT_BASE
    rows = [
        (b + 1, 1, "slurmstepd", ("slurmstepd: [12.0]",)),
        (b + 2, b + 1, "python", PYTHON_TASK), (b + 3, b + 1, "python", PYTHON_TASK),
        (b + 10, 1, "slurmstepd", ("slurmstepd: [12.1]",)),
        (b + 11, b + 10, "python", OTHER_AGENT),
        (b + 12, b + 11, "py-spy", ("py-spy", "record", "--pid", str(b + 2))),
        (b + 20, 1, "slurmstepd", ("slurmstepd: [12.2]",)),
        (b + 21, b + 20, "gputop", ("/opt/venv/bin/gputop", "agent", "--slurm-job", "12")),
        (b + 30, 1, "slurmstepd", ("slurmstepd: [12.3]",)),
    ]
    return {pid: NodeProcess(pid, ppid, name, cmdline) for pid, ppid, name, cmdline in rows}


def test_an_agent_command_is_told_from_a_training_command():
    from probes.sensors.slurm import is_agent_command

    assert is_agent_command(OTHER_AGENT) and is_agent_command(("/usr/bin/gputop", "agent", "--follow"))
    assert is_agent_command(("python3", "-X", "utf8", "-m", "tui", "agent", "--pid", "3"))
    assert not is_agent_command(PYTHON_TASK) and not is_agent_command(("python", "-m", "tui", "--pid", "3"))
    assert not is_agent_command(("python", "agent.py")) and not is_agent_command(("python", "tui", "agent"))


def test_the_jobs_newest_task_step_is_never_another_merges_agent_step(monkeypatch):
    """The defect: a second merge's agent took the first merge's agent step (the newest step not its own) for
    the job, and watched that agent and its py-spy instead of the tasks."""
    import probes.sensors.slurm as slurm
    from probes.sensors.slurm import AGENT_STEP_NAME, StepInfo, task_stepd

    table = two_merges_table()
    monkeypatch.setattr(slurm, "node_processes", lambda: table)
    monkeypatch.setattr(slurm, "show_steps", lambda job=None: (
        StepInfo(SlurmStep("12", "3"), AGENT_STEP_NAME, "n1", 1, None, None),
        StepInfo(SlurmStep("12", "0"), "train", "n1", 2, None, None)))
    monkeypatch.setenv("SLURM_JOB_ID", "12")
    monkeypatch.setenv("SLURM_STEP_ID", "2")  # this agent's own step
    assert task_stepd(SlurmStep("12")) == (AGENT_BASE + 1, SlurmStep("12", "0"))
    # Slurm unreachable: the agents' processes alone say it; the not-yet-started agent step (3) is then the
    # newest, but a step of tasks that run no agent (0) is what a real job's step looks like once started.
    monkeypatch.setattr(slurm, "show_steps", lambda job=None: SlurmError("scontrol is not installed"))
    table.pop(AGENT_BASE + 30)
    assert task_stepd(SlurmStep("12")) == (AGENT_BASE + 1, SlurmStep("12", "0"))


def test_a_census_leaves_out_other_gputop_agents_their_steps_and_their_py_spy():
    from probes.jobs.follow import find_training_jobs
    from probes.sensors.slurm import agent_processes

    table = two_merges_table()
    b = AGENT_BASE
    assert agent_processes(table) == {b + 10, b + 11, b + 12, b + 20, b + 21}
    table.pop(b + 30)
    assert [job.root_pid for job in find_training_jobs(procs=table)] == [b + 1]  # step 0's slurmstepd alone
