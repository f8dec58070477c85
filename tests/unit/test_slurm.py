"""probes/sensors/slurm.py and the slurm launcher: Slurm's marks parsed from fixtures (stepd titles, cgroup paths of
proctrack/cgroup, `scontrol -o` records), a client whose job trains elsewhere judged never hung, and Slurm's real
commands against the test cluster (tests/support/slurm_cluster.py), with `gputop --slurm-job`'s bad input."""

from __future__ import annotations

import pytest
from support.paths import REPO

from probes.jobs.launchers.slurm import Slurm, task_step
from probes.sensors.slurm import (
    SlurmError,
    SlurmStep,
    cgroup_step,
    parse_step_id,
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
