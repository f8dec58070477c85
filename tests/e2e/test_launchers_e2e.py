"""Real jobs started the way people start them, found by gputop from the command they typed and from a rank:
`accelerate launch` (accelerate 1.x, torch's agent in its process), `python -m torch.distributed.launch`
(deprecated, still in torch 2.13), a DeepSpeed-shaped tree (tests/targets/deepspeed_shape/: DeepSpeed needs a
CUDA torch), `mpirun` (Open MPI, when installed), torchrun under `uv run` (when uv is on PATH); and a rank gone
before gputop attached while rank 0 waits in all_reduce (the job knows its world size).

Every job is 2 gloo ranks of tests/targets/launcher_job.py on CPU. Each test waits for states (the job's "ready"
line, the layout gputop finds, the verdict), never for a time, and kills every process it started.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from support.paths import REPO, TARGETS
from support.processes import free_port, wait_for
from support.real_jobs import START_TIMEOUT_S, kill_job, ranks_of, watching

from probes.frame import ROLE_LAUNCHER
from probes.monitoring.monitor import Monitor

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # torch's import in every rank on a busy 2-core machine

JOB = str(TARGETS / "launcher_job.py")
DEEPSPEED_RUNNER = str(TARGETS / "deepspeed_shape" / "bin" / "deepspeed")
HANG_AFTER_S = 5.0


@contextlib.contextmanager
def running(command: list[str], log: Path, ready: str = "ready", env: dict[str, str] | None = None):
    """The job in its own session, its output in `log`; yields once a rank has printed `ready`, kills it all
    after."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", **(env or {}))
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, env=full_env, start_new_session=True, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: ready in log.read_text() or proc.poll() is not None, timeout=START_TIMEOUT_S, interval=0.2)
        assert proc.poll() is None, f"the job ended early: {log.read_text()[-2000:]}"
        yield proc
    finally:
        kill_job(proc)


@contextlib.contextmanager
def keeper_stopped(log: Path):
    """The child rank 1 left holding its sockets (launcher_job.py's gone()) ends with rank 0; killed here too."""
    try:
        yield
    finally:
        found = re.search(r"PID (\d+) holds its sockets", log.read_text())
        if found:
            with contextlib.suppress(psutil.Error):
                psutil.Process(int(found.group(1))).kill()


def live_children(pid: int) -> list[psutil.Process]:
    return [c for c in psutil.Process(pid).children() if c.status() != psutil.STATUS_ZOMBIE]


def found_job(pid: int, kind: str):
    """gputop attached to `pid`: the first frame whose job is `kind` with two live ranks."""
    with watching(pid) as watch:
        return watch.until(lambda f: f.job is not None and f.job.kind == kind and len(ranks_of(f)) == 2
                           and len(f.job.rank_pids) == 2)


def assert_found_from_the_command_and_from_rank_1(root: int, launcher: int, kind: str, note: str):
    frame = found_job(root, kind)
    job = frame.job
    assert (job.attached_pid, job.root_pid, job.launcher_pid, job.world_size) == (root, root, launcher, 2)
    assert [(r.rank, r.local_rank, r.world_size) for r in ranks_of(frame)] == [(0, 0, 2), (1, 1, 2)]
    assert frame.process(launcher).role == ROLE_LAUNCHER
    assert job.note.startswith(note), job.note
    assert (job.missing_ranks, job.ranks_elsewhere) == ((), ())
    rank1 = ranks_of(frame)[1].pid
    frame = found_job(rank1, kind)
    assert (frame.job.root_pid, frame.job.selected_pid) == (launcher, rank1)
    return frame


def test_accelerate_launch_is_found_from_accelerate_and_from_a_rank(tmp_path):
    accelerate = Path(sys.executable).with_name("accelerate")
    if not accelerate.exists():
        pytest.skip("accelerate is not installed (pip install accelerate)")
    command = [sys.executable, str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines",
               "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
               JOB, "steady"]
    with running(command, tmp_path / "job.log") as job:
        frame = assert_found_from_the_command_and_from_rank_1(
            job.pid, job.pid, "accelerate",
            f"attached to accelerate launch (PID {job.pid}): watching the accelerate launch job, 2 ranks")
        assert "torchrun" not in frame.job.note


def test_torch_distributed_launch_is_named_as_typed(tmp_path):
    command = [sys.executable, "-m", "torch.distributed.launch", "--nproc_per_node", "2", "--master_addr",
               "127.0.0.1", "--master_port", str(free_port()), JOB, "steady"]
    with running(command, tmp_path / "job.log") as job:
        frame = assert_found_from_the_command_and_from_rank_1(
            job.pid, job.pid, "torchrun",
            f"attached to torch.distributed.launch (PID {job.pid}): watching the torch.distributed.launch job")
        rank1 = frame.process(frame.job.selected_pid)
        assert "--local-rank=1" in rank1.cmdline, rank1.cmdline


def test_a_deepspeed_shaped_tree_is_a_deepspeed_job(tmp_path):
    command = [sys.executable, DEEPSPEED_RUNNER, "--master_port", str(free_port()), JOB, "steady"]
    with running(command, tmp_path / "job.log") as job:
        (launch,) = live_children(job.pid)
        assert "deepspeed.launcher.launch" in launch.cmdline()
        frame = assert_found_from_the_command_and_from_rank_1(
            job.pid, launch.pid, "deepspeed",
            f"attached to deepspeed (PID {job.pid}): watching the deepspeed job, 2 ranks")
        assert frame.job.local_world_size == 2  # from LOCAL_SIZE: DeepSpeed sets no LOCAL_WORLD_SIZE


def test_mpirun_ranks_are_numbered_by_open_mpi(tmp_path):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun is not installed (apt-get install openmpi-bin)")
    command = [mpirun, "-np", "2", "--allow-run-as-root", "--oversubscribe", "-x", "MASTER_ADDR=127.0.0.1", "-x",
               f"MASTER_PORT={free_port()}", "-x", "PYTHONPATH", "-x", "PYTHONUNBUFFERED", sys.executable, JOB,
               "steady"]
    with running(command, tmp_path / "job.log") as job:
        assert_found_from_the_command_and_from_rank_1(
            job.pid, job.pid, "mpirun", f"attached to mpirun (PID {job.pid}): watching the mpirun job, 2 ranks")


def test_torchrun_under_uv_run_is_found_from_uv(tmp_path):
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH (pip install uv)")
    command = [uv, "run", "--no-project", "--offline", "--python", sys.executable, "--", sys.executable, "-m",
               "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port",
               str(free_port()), JOB, "steady"]
    with running(command, tmp_path / "job.log") as job:
        (agent,) = live_children(job.pid)
        frame = found_job(job.pid, "torchrun")
        assert (frame.job.root_pid, frame.job.launcher_pid) == (job.pid, agent.pid)
        assert frame.job.note.startswith(f"attached to uv (PID {job.pid}): watching the torchrun job, 2 ranks")
        assert frame.process(job.pid).role == frame.process(agent.pid).role == ROLE_LAUNCHER


def test_a_rank_gone_before_attach_is_named_while_rank_0_waits_in_all_reduce(tmp_path):
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
               "127.0.0.1", "--master_port", str(free_port()), JOB, "gone"]
    log = tmp_path / "job.log"
    with running(command, log, ready="waiting") as job, keeper_stopped(log):
        # The state to attach in: rank 1 has exited and torchrun has reaped it; rank 0 is left.
        (rank0,) = wait_for(lambda: len(live_children(job.pid)) == 1 and not any(
            c.status() == psutil.STATUS_ZOMBIE for c in psutil.Process(job.pid).children())
            and live_children(job.pid), timeout=START_TIMEOUT_S)
        monitor = Monitor(hang_after_s=HANG_AFTER_S)
        verdicts = []
        with watching(job.pid) as watch:
            def named(frame) -> bool:
                verdicts.append(monitor.ingest(frame).job)
                return verdicts[-1] is not None and verdicts[-1].finding == "rank_exited" and \
                    verdicts[-1].verdict.liveness == "hung"
            frame = watch.until(named)
        assert (frame.job.missing_ranks, frame.job.ranks_elsewhere, frame.job.rank_pids) == ((1,), (), (rank0.pid,))
        in_all_reduce = [t for f in watch.seen for t in f.stacks.threads
                         if t.pid == rank0.pid and any(fr.function == "all_reduce" for fr in t.frames)]
        assert in_all_reduce, "rank 0's stack was never seen in all_reduce"
        verdict = verdicts[-1]
        assert verdict.responsible_rank == 1 and verdict.verdict.bottleneck == "comms_bound"
        assert verdict.verdict.evidence[0] == (
            "rank 1 of 2 is gone (exited before attach); rank 0 waits in all_reduce: hung until the process group's "
            "timeout (30 min by gloo's default; no rank uses a GPU)")
        assert not any(v is not None and v.finding == "rank_exited" and "has exited" in v.verdict.evidence[0]
                       for v in verdicts), "a rank never seen here is gone before attach, not 'has exited'"


def test_one_node_of_a_larger_world_lists_the_other_ranks_and_calls_none_missing(tmp_path):
    # Node 0 of a 2-node job as a script starts it: two ranks with WORLD_SIZE=4, LOCAL_WORLD_SIZE=2, GROUP_RANK=0.
    rank = 'RANK={0} LOCAL_RANK={0} WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 "$PYTHON" -c "$SLEEPER" &'
    script = " ".join(rank.format(n) for n in (0, 1)) + " wait"
    sleeper = "import time; print('ready', flush=True); time.sleep(600)"
    with running(["bash", "-c", script], tmp_path / "job.log", env={"PYTHON": sys.executable, "SLEEPER": sleeper}) \
            as job:
        frame = found_job(job.pid, "ranks")
        assert (frame.job.world_size, frame.job.ranks_elsewhere, frame.job.missing_ranks) == (4, ((2, 3),), ())
        monitor = Monitor(hang_after_s=HANG_AFTER_S)
        with watching(job.pid) as watch:
            watch.until(lambda f: (view := monitor.ingest(f)).job is not None and len(view.job.ranks) == 2)
        assert all("gone" not in line for line in monitor.ingest(watch.engine.tick()).job.verdict.evidence)


def test_a_python_wrapper_that_relays_its_childs_output_is_its_launcher(tmp_path):
    # Its main thread is blocked reading the pipe its child writes as stderr (wchan anon_pipe_read, not do_wait):
    # it waits on the child as surely as Popen.wait does, so the child is the training process.
    command = [sys.executable, str(TARGETS / "relaying_wrapper.py"), str(TARGETS / "busy_loop.py"), "--seconds", "300"]
    with running(command, tmp_path / "job.log") as job:
        (child,) = live_children(job.pid)
        with watching(job.pid) as watch:
            frame = watch.until(lambda f: f.job is not None and f.job.rank_pids == (child.pid,))
    assert frame.job.kind == "launched" and frame.process(job.pid).role == ROLE_LAUNCHER
    assert frame.job.note.startswith(f"attached to python (PID {job.pid}): watching python"), frame.job.note


def test_accelerate_launch_of_one_process_is_a_launched_trainer_named_after_accelerate(tmp_path):
    accelerate = Path(sys.executable).with_name("accelerate")
    if not accelerate.exists():
        pytest.skip("accelerate is not installed (pip install accelerate)")
    command = [sys.executable, str(accelerate), "launch", "--cpu", "--num_processes", "1", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", str(TARGETS / "busy_loop.py"), "--seconds", "300"]
    with running(command, tmp_path / "job.log") as job:
        (child,) = live_children(job.pid)
        with watching(job.pid) as watch:
            frame = watch.until(lambda f: f.job is not None and f.job.rank_pids == (child.pid,))
        assert frame.job.kind == "launched"
        assert frame.job.note.startswith(f"attached to accelerate launch (PID {job.pid}): watching python"), \
            frame.job.note
