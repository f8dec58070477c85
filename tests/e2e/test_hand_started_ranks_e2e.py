"""Two gloo ranks started by hand on this machine, as tutorials do (``MASTER_ADDR=127.0.0.1 MASTER_PORT=...
WORLD_SIZE=2 RANK=0 python train.py &`` and the same with RANK=1, from one shell), rank 1 killed before gputop
attaches, rank 0 left waiting: gputop names rank 1 as not running, with how it knows (the job runs only on this
machine: MASTER_ADDR 127.0.0.1), never as "elsewhere".

Killed once it has joined, a rank's closed sockets make gloo fail rank 0's all_reduce at once: rank 0 waits only
when a helper that rank 1 left running holds them (a `sleep` its shell command started, a forked child: both
carry rank 1's environment and are told apart from it), or when rank 1 dies before it joins (rank 0 then waits in
init_process_group). A rank running outside the watched tree (started from another terminal) is named with its PID,
never as not running.

The ranks are tests/targets/hand_started_rank.py; each test waits for states (the ranks' lines, rank 1 gone, the
verdict), never for a time, and kills every process it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

import psutil
import pytest
from support.cli import gputop
from support.hand_started import by_hand, gone, logged_pid
from support.processes import free_port, wait_for
from support.real_jobs import START_TIMEOUT_S, kill_job, watching

from probes.monitoring.monitor import Monitor

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]  # torch's import in two ranks on a busy 2-core machine

HANG_AFTER_S = 5.0
HEAD = ("rank 1 of 2 is not running (the job runs only on this machine: MASTER_ADDR 127.0.0.1); rank 0 waits for "
        "it in {place}: hung until the process group's timeout (30 min by gloo's default; no rank uses a GPU)")


@contextlib.contextmanager
def ranks_by_hand(helper: str, tmp_path: Path, ready: str):
    """The two ranks, started; yields once rank 1 has logged `ready` (a pattern with its PID) and rank 0 is up;
    kills them, and the helper rank 1 left, after."""
    job = by_hand(helper, free_port(), tmp_path)
    try:
        rank1 = wait_for(lambda: logged_pid(tmp_path / "r1.log", ready) or job.poll() is not None,
                         timeout=START_TIMEOUT_S, interval=0.2)
        assert job.poll() is None, (tmp_path / "r1.log").read_text()[-2000:]
        yield job, rank1
    finally:
        helper_pid = logged_pid(tmp_path / "r1.log", r"helper PID (\d+)")
        kill_job(job)
        if helper_pid is not None:
            with contextlib.suppress(psutil.Error):
                psutil.Process(helper_pid).kill()


def rank0_of(job: subprocess.Popen) -> int:
    (rank0,) = [c.pid for c in psutil.Process(job.pid).children() if not gone(c.pid)]
    return rank0


def verdict_naming_rank_1(rank0: int):
    """gputop attached to rank 0, ticked until the job's verdict names rank 1 as not running and rank 0 hung:
    (the last frame, that verdict)."""
    monitor = Monitor(hang_after_s=HANG_AFTER_S)
    verdicts = []
    with watching(rank0) as watch:
        def named(frame) -> bool:
            verdicts.append(monitor.ingest(frame).job)
            job = verdicts[-1]
            return job is not None and job.finding == "rank_exited" and job.verdict.liveness == "hung" and \
                "not running" in job.verdict.evidence[0]
        frame = watch.until(named)
    return frame, verdicts[-1]


@pytest.mark.parametrize("helper", ["sleep", "fork"])
def test_a_killed_rank_whose_helper_holds_its_sockets_is_named_as_not_running(tmp_path, helper):
    with ranks_by_hand(helper, tmp_path, r"rank 1 ready PID (\d+)") as (job, rank1):
        wait_for(lambda: logged_pid(tmp_path / "r0.log", r"rank 0 ready PID (\d+)"), timeout=START_TIMEOUT_S)
        helper_pid = logged_pid(tmp_path / "r1.log", r"helper PID (\d+)")
        assert helper_pid is not None
        os.kill(rank1, signal.SIGKILL)
        wait_for(lambda: gone(rank1) and len([c for c in psutil.Process(job.pid).children()]) == 1,
                 timeout=START_TIMEOUT_S)
        assert not gone(helper_pid), "the helper rank 1 left must outlive it"
        rank0 = rank0_of(job)

        frame, verdict = verdict_naming_rank_1(rank0)
        info = frame.job
        assert (info.kind, info.world_size, info.missing_ranks, info.ranks_elsewhere) == ("ranks", 2, (1,), ())
        assert info.one_machine == "MASTER_ADDR 127.0.0.1"
        assert info.rank_leftovers == ((1, helper_pid),), "the helper is rank 1's leftover, never rank 1"
        assert verdict.responsible_rank == 1 and verdict.verdict.bottleneck == "comms_bound"
        assert verdict.verdict.evidence[0] == HEAD.format(place="all_reduce")
        assert verdict.verdict.evidence[1] == (f"PID {helper_pid} carries rank 1's environment (a process rank 1 "
                                               "left running) and holds TCP connections open")
        assert "not on this node" not in "\n".join(verdict.verdict.evidence)

        if helper == "sleep":  # the same words as a person reads them: the headless snapshot on stdout
            snapshot = headless_snapshot(rank0)
            assert snapshot["verdict"]["evidence"][0] == HEAD.format(place="all_reduce")
            assert (snapshot["job"]["missing_ranks"], snapshot["job"]["ranks_elsewhere"]) == ([1], [])


def headless_snapshot(pid: int) -> dict:
    """`gputop --pid PID --snapshot - --duration 15`, run again until its snapshot names rank 1 (a run on a busy
    machine may end before rank 0 has been silent for the hang threshold): its JSON."""
    last: list[dict] = []

    def named() -> bool:
        result = gputop("--pid", str(pid), "--snapshot", "-", "--duration", "15", "--hang-after", str(HANG_AFTER_S),
                        timeout=120)
        assert result.returncode == 0, result.stderr
        last.append(json.loads(result.stdout))
        return "not running" in last[-1]["verdict"]["evidence"][0] and last[-1]["verdict"]["liveness"] == "hung"

    wait_for(named, timeout=START_TIMEOUT_S, interval=0)
    return last[-1]


def test_a_rank_killed_before_it_joined_is_named_while_rank_0_waits_in_init_process_group(tmp_path):
    with ranks_by_hand("late", tmp_path, r"rank 1 starting PID (\d+)") as (job, rank1):
        os.kill(rank1, signal.SIGKILL)
        wait_for(lambda: gone(rank1) and len(psutil.Process(job.pid).children()) == 1, timeout=START_TIMEOUT_S)
        frame, verdict = verdict_naming_rank_1(rank0_of(job))
        assert (frame.job.missing_ranks, frame.job.rank_leftovers) == ((1,), ())
        assert verdict.verdict.evidence[0] == HEAD.format(place="init_process_group")


def test_a_rank_started_apart_is_named_with_its_pid_never_as_not_running(tmp_path):
    # Rank 0 from one shell, rank 1 from another (two terminals): both run; gputop attached to rank 0 sees only its
    # tree.
    port = free_port()
    first, second = by_hand("none", port, tmp_path, ranks="0"), by_hand("none", port, tmp_path, ranks="1")
    try:
        rank1 = wait_for(lambda: logged_pid(tmp_path / "r1.log", r"rank 1 ready PID (\d+)"), timeout=START_TIMEOUT_S)
        wait_for(lambda: logged_pid(tmp_path / "r0.log", r"rank 0 ready PID (\d+)"), timeout=START_TIMEOUT_S)
        with watching(rank0_of(first)) as watch:
            frame = watch.until(lambda f: f.job is not None and f.job.ranks_outside != ())
            for _ in range(3):  # past the tick a missing rank would be named on
                frame = watch.until(lambda f: True)
        assert (frame.job.ranks_outside, frame.job.missing_ranks, frame.job.ranks_elsewhere) == (((1, rank1),), (), ())
        verdict = Monitor(hang_after_s=HANG_AFTER_S).ingest(frame).job
        assert (f"rank 1 of 2 runs on this machine outside the watched tree (PID {rank1}): gputop --pid {rank1} "
                "watches it") in verdict.verdict.evidence
    finally:
        kill_job(first)
        kill_job(second)
