"""Why it died (issue 40): a real job watched by the real command dies a real death — a SIGSEGV from reading address
0, a SIGKILL from another process, an uncaught exception, a DataLoader worker killed — and the verdict's first line
says how, from what the machine recorded (the zombie's exit status in /proc), within the ticks after it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from support.jobwatch import watch_job_until, watch_until_ended
from support.processes import said_ready, wait_for

from probes.monitoring.monitor import fold
from probes.sensors.proc_readers import decode_wait_status, read_stat

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _start(spawn_target):
    target = spawn_target("dies_on_signal.py", stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                          ready=lambda proc: True, timeout=90)
    line = target.stdout.readline().split()
    assert line[:1] == ["ready"], line
    return target, [int(pid) for pid in line[1:]]


def _dies(spawn_target, tmp_path, kill, expected: str):
    """Watch the job, kill it with `kill(target, workers)` once gputop has seen it, and wait for the verdict."""
    target, workers = _start(spawn_target)
    verdict = watch_until_ended(target.pid, tmp_path, lambda: kill(target, workers)).document["verdict"]
    assert expected in verdict["evidence"][0] or any(expected in line for line in verdict["evidence"]), \
        verdict["evidence"]
    return verdict


def test_a_segfault_is_named_a_crash_in_native_code(spawn_target, tmp_path):
    verdict = _dies(spawn_target, tmp_path, lambda target, _: os.kill(target.pid, signal.SIGUSR1),
                    "killed by SIGSEGV")
    assert "a crash in native code" in verdict["evidence"][0]
    assert any("faulthandler" in line for line in verdict["advice_text"]), verdict["advice_text"]


def test_a_sigkill_from_another_process_is_named(spawn_target, tmp_path):
    verdict = _dies(spawn_target, tmp_path, lambda target, _: os.kill(target.pid, signal.SIGKILL),
                    "killed by SIGKILL")
    assert "OOM killer" in verdict["evidence"][0]  # one of the senders it names, none claimed


def test_an_uncaught_exception_is_its_exit_status(spawn_target, tmp_path):
    _dies(spawn_target, tmp_path, lambda target, _: os.kill(target.pid, signal.SIGUSR2),
          "exited with status 1, as Python does on an uncaught exception")


def test_a_killed_dataloader_worker_is_named_beside_the_jobs_exit(spawn_target, tmp_path):
    """The worker dies first and the main process raises at once (PyTorch's "DataLoader worker (pid X) is killed by
    signal: Killed."), so both end within one tick; the main process's own end is its exit status."""
    killed = []

    def kill_worker(_, workers):
        os.kill(workers[0], signal.SIGKILL)
        killed.append(workers[0])

    verdict = _dies(spawn_target, tmp_path, kill_worker, "exited with status 1")
    # Named beside the exit: the headline's cause where its SIGKILL was read (before a sibling the main process
    # stopped as it raised: a stop is a consequence), else a line of its own (reaped before a tick read how it ended).
    assert f"after its DataLoader worker PID {killed[0]} was killed by SIGKILL" in verdict["evidence"][0] or \
        any(line.startswith(f"its DataLoader worker PID {killed[0]} ") for line in verdict["evidence"]), \
        verdict["evidence"]


def test_a_zombies_stat_keeps_the_signal_that_ended_it():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(child.pid, signal.SIGKILL)
        # not reaped yet: Popen waits only when asked, so the zombie keeps its status
        stat = wait_for(lambda: (found := read_stat(child.pid)) is not None and found.state == "zombie" and found,
                        timeout=10)
        assert stat is not None and stat.state == "zombie" and stat.exit_status is not None
        assert decode_wait_status(stat.exit_status) == (None, signal.SIGKILL, False)
    finally:
        child.wait()


def test_a_rank_dead_of_sigsegv_is_named_in_the_first_line_within_a_tick(spawn_target, tmp_path):
    """A real 2-rank torchrun job on gloo: rank 1 reads address 0 (SIGUSR1 makes it, tests/targets/ddp_job.py).
    torchrun then stops rank 0 (SIGTERM) and exits, often within the same tick. From the tick that first records rank
    1's end, the verdict's first line names rank 1 and its SIGSEGV, whichever of the job's ends it speaks of."""
    out = tmp_path / "job.out"
    with out.open("w") as handle:
        launcher = spawn_target("ddp_job.py", "straggler", "--launch", stdout=handle, stderr=subprocess.STDOUT,
                                timeout=150, ready=lambda _: said_ready(out.read_text()))
    crashed = []

    def reached(job) -> bool:
        ranks = {rank.rank: rank.pid for rank in job.ranks}
        if not crashed:
            if set(ranks) == {0, 1}:
                os.kill(ranks[1], signal.SIGUSR1)
                crashed.append(ranks[1])
            return False
        return any(rank.rank == 1 and rank.verdict.liveness == "exited" for rank in job.ranks)

    watched = watch_job_until(launcher.pid, tmp_path, reached, timeout=150)
    pid = crashed[0]
    ended_at = next(index for index, frame in enumerate(watched.frames) if any(e.pid == pid for e in frame.exits))
    (end,) = [e for e in watched.frames[ended_at].exits if e.pid == pid]
    assert (end.role, end.rank) == ("rank", 1), end
    # As rank 1 alone gone, both ranks gone with the launcher still up, or the launcher gone too:
    first = fold(watched.frames[:ended_at + 1]).view.verdict.evidence[0]
    assert any(said in first for said in (
        f"rank 1 (PID {pid}) has ended: killed by SIGSEGV: a crash in native code",
        "have ended, rank 1: killed by SIGSEGV: a crash in native code",
        "have ended, rank 1 first: killed by SIGSEGV: a crash in native code",
        f"its rank 1 PID {pid} was killed by SIGSEGV: a crash in native code")), first
