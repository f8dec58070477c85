"""The job found from any of its processes (probes/jobs/).

Pure unit tests of the environment parsing, the layout decision (ranks, mp.spawn, a launched main process),
owners and the GPU mapping; then real jobs (tests/targets/job_*.py): torchrun with two gloo ranks attached
through the agent, a rank and --process-only; mp.spawn; `bash train.sh`; torchrun restarting a failed rank.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil
import pytest
from support.paths import REPO
from support.processes import free_port, wait_for
from support.real_jobs import (
    START_TIMEOUT_S,
    children_with,
    kill_job,
    ranks_of,
    start_job,
    watching,
    whole_job,
    workers_of,
)

from probes.frame import (
    ROLE_DATALOADER_WORKER,
    ROLE_LAUNCHER,
    ROLE_MAIN,
    ROLE_OTHER,
    ROLE_RANK,
    ROLE_RESOURCE_TRACKER,
    ProcessSample,
)
from probes.jobs import tracker as tracker_module
from probes.jobs.tracker import JobTracker
from probes.sensors.process_facts import (
    short_command,
    start_ticks,
)

# --- environment ------------------------------------------------------------------------------------------

TORCHRUN_ENV = {
    "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
    "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0", "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500", "CUDA_VISIBLE_DEVICES": "2,3", "PATH": "/usr/bin",
}


# --- which GPU ----------------------------------------------------------------------------------------------


def sample(pid, ppid, role=ROLE_OTHER, name="python3", alive=True, cmdline=("python3", "train.py")):
    return ProcessSample(pid=pid, ppid=ppid, role=role, name=name, cmdline=cmdline, alive=alive,
                         state="sleeping" if alive else "zombie")


# --- real jobs --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def torchrun_job(tmp_path_factory):
    """A 2-rank torchrun gloo job (one DataLoader worker per rank), shared by the attach tests below."""
    log = tmp_path_factory.mktemp("torchrun") / "job.log"
    proc = start_job("job_torchrun.py", str(free_port()), "2", "0", "--workers", "1", log=log)
    try:
        yield proc
    finally:
        kill_job(proc)


@pytest.mark.slow
@pytest.mark.timeout(300)  # torch's import in every rank and worker, on a loaded 2-core machine
def test_torchrun_attached_to_the_agent(torchrun_job):
    agent = torchrun_job.pid
    with watching(agent) as watch:
        agent_waits = lambda f: any(  # noqa: E731
            t.pid == agent and any(fr.function.endswith("_invoke_run") for fr in t.frames) for t in f.stacks.threads)
        frame = watch.until(lambda f: whole_job(watch)(f) and agent_waits(f))
    job = frame.job
    rank0, rank1 = ranks_of(frame)
    assert (job.kind, job.attached_pid, job.root_pid, job.launcher_pid) == ("torchrun", agent, agent, agent)
    assert job.rank_pids == (rank0.pid, rank1.pid) and job.selected_pid is None
    assert (job.world_size, job.local_world_size) == (2, 2) and job.run_id
    assert frame.target.pid == agent and frame.process(agent).role == ROLE_LAUNCHER
    for number, rank in enumerate((rank0, rank1)):
        assert (rank.rank, rank.local_rank, rank.world_size, rank.restart_count) == (number, number, 2, 0)
        assert rank.ppid == agent and rank.gpu_index is None, "a CPU job: no GPU to name"
    assert {p.role for p in frame.processes} <= {ROLE_LAUNCHER, ROLE_RANK, ROLE_DATALOADER_WORKER}, \
        "nothing left as 'other'"
    assert "torchrun job, 2 ranks" in job.note


@pytest.mark.slow
@pytest.mark.timeout(300)  # torch's import in every rank and worker, on a loaded 2-core machine
def test_torchrun_attached_to_rank_1_watches_the_job_with_it_selected(torchrun_job):
    agent = torchrun_job.pid
    rank1 = wait_for(lambda: children_with(agent, RANK="1"), timeout=START_TIMEOUT_S)[0]
    with watching(rank1) as watch:
        frame = watch.until(whole_job(watch))
    job = frame.job
    assert (job.kind, job.attached_pid, job.root_pid, job.selected_pid) == ("torchrun", rank1, agent, rank1)
    assert frame.target.pid == agent and watch.engine.pid == rank1 and watch.engine.root_pid == agent
    assert frame.process(rank1).rank == 1 and len(job.rank_pids) == 2
    assert "rank 1" in job.note and "--process-only" in job.note


@pytest.mark.slow
@pytest.mark.timeout(300)  # torch's import in every rank and worker, on a loaded 2-core machine
def test_torchrun_rank_with_process_only_is_watched_alone(torchrun_job):
    agent = torchrun_job.pid
    rank1 = wait_for(lambda: children_with(agent, RANK="1"), timeout=START_TIMEOUT_S)[0]
    with watching(rank1, process_only=True) as watch:
        frame = watch.until(lambda f: rank1 in watch.sampled and any(
            p.role == ROLE_DATALOADER_WORKER for p in f.processes))
    assert frame.job is None and frame.target.pid == rank1
    assert {p.pid for p in frame.processes if p.role != ROLE_DATALOADER_WORKER} == {rank1}
    assert frame.process(rank1).role == ROLE_MAIN and frame.process(rank1).rank is None, "exactly as before"
    assert agent not in watch.sampled


@pytest.mark.slow
@pytest.mark.timeout(300)  # torch's import in every rank and worker, on a loaded 2-core machine
def test_mp_spawn_parent_is_the_launcher_and_children_are_ranks_by_start_order(spawn_target):
    parent = spawn_target("job_train.py", "--spawn", "2", "--master-port", str(free_port()), "--workers", "1",
                          stdout=subprocess.DEVNULL)
    with watching(parent.pid) as watch:
        frame = watch.until(whole_job(watch))
    job = frame.job
    assert (job.kind, job.root_pid, job.launcher_pid, job.world_size) == ("mp.spawn", parent.pid, parent.pid, 2)
    rank0, rank1 = ranks_of(frame)
    assert psutil.Process(rank0.pid).create_time() <= psutil.Process(rank1.pid).create_time()
    assert (rank0.rank, rank0.local_rank, rank1.rank, rank1.local_rank) == (0, 0, 1, 1)
    assert rank0.restart_count is None and rank0.ppid == parent.pid
    assert frame.process(parent.pid).role == ROLE_LAUNCHER
    assert [p.role for p in frame.processes if p.ppid == parent.pid and p.pid not in job.rank_pids] == [
        ROLE_RESOURCE_TRACKER], "spawn's resource tracker is no rank"
    assert any(t.pid == parent.pid and any(fr.file.endswith("torch/multiprocessing/spawn.py") for fr in t.frames)
               for t in frame.stacks.threads), "the parent waits in torch's spawn, as the layout assumed"

    with watching(rank1.pid) as watch:  # attached to a spawned rank: its parent's job, the rank selected
        frame = watch.until(lambda f: f.job is not None and f.job.selected_pid == rank1.pid
                            and len(f.job.rank_pids) == 2)
    assert frame.job.root_pid == parent.pid and frame.job.kind == "mp.spawn"


def shell_ready(proc) -> bool:
    return proc.stdout.readline().startswith(b"ready")


@pytest.mark.slow
@pytest.mark.timeout(300)  # torch's import in every rank and worker, on a loaded 2-core machine
def test_shell_script_watches_the_python_it_started(spawn_target):
    shell = spawn_target("job_shell.py", "--workers", "2", "--step-ms", "5", stdout=subprocess.PIPE,
                         ready=shell_ready, timeout=START_TIMEOUT_S)
    assert psutil.Process(shell.pid).name() == "bash"
    with watching(shell.pid) as watch:
        frame = watch.until(lambda f: f.job is not None and f.job.rank_pids and len(
            workers_of(f, f.job.rank_pids[0])) == 2 and f.job.rank_pids[0] in watch.sampled)
    job = frame.job
    (main,) = [p for p in frame.processes if p.role == ROLE_MAIN]
    assert job.kind == "launched" and job.rank_pids == (main.pid,) and main.ppid == shell.pid
    assert (job.root_pid, job.launcher_pid) == (shell.pid, shell.pid)
    assert frame.process(shell.pid).role == ROLE_LAUNCHER
    assert job.note == f"attached to bash (PID {shell.pid}): watching {short_command(main.cmdline)} " \
                      f"(PID {main.pid}) under it"
    assert shell.pid not in watch.sampled, "py-spy is not pointed at bash"
    assert not any(str(shell.pid) in e for f in watch.seen for e in f.stacks.errors)

    # Headless, as a user runs it: the note once on stderr, and a verdict drawn from the Python child's stacks.
    result = subprocess.run([sys.executable, "-m", "tui", "--pid", str(shell.pid), "--snapshot", "-",
                             "--duration", "6"], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count(f"gputop: attached to bash (PID {shell.pid}): watching ") == 1, result.stderr
    snapshot = json.loads(result.stdout)
    verdict = snapshot["verdict"]
    assert not any("no samples of the main thread" in line for line in verdict["evidence"]), verdict
    assert verdict["bottleneck"] != "unknown", verdict
    roles = {p["pid"]: p["role"] for p in snapshot["processes"]}
    assert roles[shell.pid] == ROLE_LAUNCHER and roles[main.pid] == ROLE_MAIN


@pytest.mark.slow
@pytest.mark.timeout(300)  # torch's import in every rank and worker, on a loaded 2-core machine
def test_torchrun_restart_is_followed(tmp_path):
    fail_now = tmp_path / "fail-now"
    proc = start_job("job_torchrun.py", str(free_port()), "2", "1", "--workers", "1", "--fail-rank", "1",
                     "--fail-when", str(fail_now), log=tmp_path / "job.log")
    try:
        with watching(proc.pid) as watch:
            first = watch.until(whole_job(watch, restart_count=0))
            first_pids = set(first.job.rank_pids)
            fail_now.touch()  # rank 1 exits with status 3: torchrun stops rank 0 and starts both again
            second = watch.until(lambda f: whole_job(watch, restart_count=1)(f)
                                 and not first_pids & set(f.job.rank_pids))
            proc.terminate()  # torchrun stops its ranks and exits: the job ends with its launcher
            ended = watch.until(lambda f: not f.target.alive, timeout=60)
    finally:
        kill_job(proc)
    assert "fails on purpose" in (tmp_path / "job.log").read_text(errors="replace")
    restarted = ranks_of(second)
    assert [r.rank for r in restarted] == [0, 1] and all(r.restart_count == 1 for r in restarted)
    assert {r.pid for r in restarted} <= watch.sampled, "py-spy samples the new ranks"
    assert second.job.root_pid == proc.pid and second.target.alive
    assert not first_pids & {p.pid for p in second.processes if p.alive}, "the first attempt's ranks are gone"
    assert ended.job.kind == "torchrun" and ended.job.rank_pids == () and ended.target.exit_reason
    assert not any(p.alive for p in ended.processes)


# --- real processes without torch: the tracker's reading of /proc ------------------------------------------

SLEEPER = "import time; time.sleep(600)"


def shell(script: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(["bash", "-c", script], start_new_session=True,
                            env=dict(os.environ, PY=sys.executable, **env))


@pytest.fixture
def shells():
    started: list[subprocess.Popen] = []

    def start(script: str, **env: str) -> subprocess.Popen:
        started.append(shell(script, **env))
        return started[-1]

    yield start
    for proc in started:
        kill_job(proc)


@pytest.mark.slow
def test_ranks_started_by_a_script_and_a_restarted_rank_keeps_the_selection(shells):
    script = (f'RANK=0 WORLD_SIZE=2 "$PY" -c "{SLEEPER}" & '
              f'while true; do RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 CUDA_VISIBLE_DEVICES=2,3 "$PY" -c "{SLEEPER}"; done')
    proc = shells(script)
    rank1 = wait_for(lambda: children_with(proc.pid, RANK="1"))[0]
    rank0 = wait_for(lambda: children_with(proc.pid, RANK="0"))[0]
    with watching(rank1, sample_stacks=False) as watch:
        frame = watch.until(lambda f: f.job is not None and len(f.job.rank_pids) == 2, timeout=30)
        job = frame.job
        assert (job.kind, job.root_pid, job.launcher_pid, job.selected_pid) == ("ranks", proc.pid, proc.pid, rank1)
        assert job.rank_pids == (rank0, rank1) and frame.process(proc.pid).role == ROLE_LAUNCHER
        sample = frame.process(rank1)
        assert (sample.role, sample.rank, sample.local_rank, sample.world_size, sample.cuda_visible_devices) == (
            ROLE_RANK, 1, 1, 2, "2,3")
        os.kill(rank1, signal.SIGKILL)  # the script starts rank 1 again: the selection follows the rank
        frame = watch.until(lambda f: f.job.selected_pid not in (None, rank1) and len(f.job.rank_pids) == 2,
                            timeout=30)
    assert frame.process(frame.job.selected_pid).rank == 1 and rank1 not in frame.job.rank_pids


@pytest.mark.slow
def test_a_shell_running_python_makes_it_main_and_a_lone_python_stays_alone(shells):
    proc = shells(f'"$PY" -c "{SLEEPER}"; echo done')
    child = wait_for(lambda: psutil.Process(proc.pid).children())[0].pid
    with watching(proc.pid, sample_stacks=False) as watch:
        frame = watch.until(lambda f: f.job is not None, timeout=30)
    assert (frame.job.kind, frame.job.rank_pids, frame.job.selected_pid) == ("launched", (child,), None)
    assert frame.process(child).role == ROLE_MAIN and frame.process(proc.pid).role == ROLE_LAUNCHER
    assert frame.job.note.startswith(f"attached to bash (PID {proc.pid}): watching ")
    with watching(child, sample_stacks=False) as watch:
        frame = watch.until(lambda f: f.processes, timeout=30)
    assert frame.job is None and frame.process(child).role == ROLE_MAIN, "attached to the Python child itself"


@pytest.mark.slow
def test_a_python_launcher_waiting_for_its_child(shells):
    launcher = f'import subprocess, sys; subprocess.run([sys.executable, "-c", "{SLEEPER}"])'
    proc = shells(f"exec \"$PY\" -c '{launcher}'")
    child = wait_for(lambda: psutil.Process(proc.pid).children())[0].pid
    with watching(proc.pid, sample_stacks=False) as watch:
        frame = watch.until(lambda f: f.job is not None, timeout=30)
    assert frame.job.kind == "launched" and frame.job.rank_pids == (child,)
    assert frame.process(proc.pid).role == ROLE_LAUNCHER


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_spawn_context_dataloader_workers_are_not_mp_spawn_ranks(spawn_target):
    # They start as `spawn_main` children of a Python process, as mp.spawn's ranks do; once their parent's stack
    # is known (not in torch's spawn), or they have named themselves, the process is a lone trainer again.
    target = spawn_target("dataloader_loop.py", "--num-workers", "2", "--context", "spawn", "--seconds", "600",
                          stdout=subprocess.PIPE, ready=lambda p: p.stdout.readline().strip() == b"ready",
                          timeout=START_TIMEOUT_S)
    with watching(target.pid) as watch:
        frame = watch.until(lambda f: target.pid in watch.sampled and len(
            [p for p in f.processes if p.role == ROLE_DATALOADER_WORKER and p.alive]) == 2)
        later = [watch.until(lambda f: True) for _ in range(3)]
    for f in (frame, *later):
        assert f.job is None and f.process(target.pid).role == ROLE_MAIN
        assert not any(p.role in (ROLE_RANK, ROLE_LAUNCHER) for p in f.processes)


@pytest.mark.slow
def test_tracker_takes_start_times_from_the_tree_read_without_reading_stat_again(spawn_target, tmp_path, monkeypatch):
    """The engine passes proctree's start times of this tick to the tracker: it reads no /proc/PID/stat of its own
    for them, keys each process on the same start time, and lays out the same job as when it reads them itself."""
    from probes.sensors.proctree import ProcessTreeProbe
    ready_file = tmp_path / "pids.json"
    proc = spawn_target("proctree_family.py", str(ready_file), ready=lambda _: ready_file.exists())
    probe = ProcessTreeProbe(proc.pid)
    _, samples = probe.read()
    started = probe.started_ticks()
    assert started == {s.pid: start_ticks(s.pid) for s in samples} and len(started) == len(samples) >= 5
    reads = []
    monkeypatch.setattr(tracker_module, "start_ticks", lambda pid: reads.append(pid) or start_ticks(pid))
    given, read_itself = JobTracker(proc.pid), JobTracker(proc.pid)
    with_times = given.update(samples, started=started)
    assert reads == [], "no stat read again for a start time the tree read already had"
    assert read_itself.update(samples) == with_times and sorted(reads) == sorted(started)
    assert set(given._static) == set(read_itself._static) == set(started.items())
