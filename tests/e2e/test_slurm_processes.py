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
from probes.jobs.launchers.slurm import Slurm
from probes.sensors.slurm import (
    SlurmError,
    SlurmStep,
    show_job,
    show_steps,
    step_of_srun,
    step_root,
    stepd_pids,
)

CGROUP_FIXTURES = REPO / "tests" / "fixtures" / "cgroup" / "slurm"


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
