"""Why it died, in the job's own words (issue 40): real jobs whose stdout and stderr go to a log file gputop reads die
real deaths, and the verdict says the log's last error beside how the machine saw them end — an uncaught exception,
a DataLoader worker killed with SIGKILL (its main process's PyTorch line names it, and says the signal where /proc
could not), and a real gloo timeout between two torchrun ranks when one is stopped."""

from __future__ import annotations

import os
import re
import signal
import subprocess

import pytest
from support.jobwatch import watch_job_until, watch_until_ended
from support.processes import free_port, start_logged, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _logged_target(spawn_target, tmp_path, *args: str):
    """dies_on_signal.py with its stdout and stderr in a file (the log gputop finds through /proc/PID/fd); its main
    process and its two workers' PIDs."""
    target = start_logged(spawn_target, tmp_path, "dies_on_signal.py", *args)
    log = tmp_path / "dies_on_signal.out"
    ready = wait_for(lambda: re.search(r"^ready (\d+) (\d+)$", log.read_text(), re.M), timeout=30)
    return target, [int(pid) for pid in ready.groups()], log


def _dies(spawn_target, tmp_path, kill, *args: str):
    """Watch the job, kill it with `kill(target, workers)` once gputop has seen it, and wait until the exited verdict
    says the log's last error."""
    target, workers, log = _logged_target(spawn_target, tmp_path, *args)
    watched = watch_until_ended(
        target.pid, tmp_path, lambda: kill(target, workers),
        ended=lambda view: any(line.startswith("the log's last error: ") for line in view.verdict.evidence))
    verdict = watched.document["verdict"]
    return watched, verdict, workers, log.read_text()


def test_an_uncaught_exception_is_said_in_the_jobs_own_words(spawn_target, tmp_path):
    _, verdict, _, log = _dies(spawn_target, tmp_path, lambda target, _: os.kill(target.pid, signal.SIGUSR2))
    assert "RuntimeError: the test asked this job to fail" in log
    assert "exited with status 1, as Python does on an uncaught exception" in verdict["evidence"][0]
    # Right after the headline: the traceback's last line, not one of its frames.
    assert verdict["evidence"][1] == "the log's last error: RuntimeError: the test asked this job to fail", \
        verdict["evidence"]


def test_a_worker_killed_with_sigkill_is_said_so_per_the_main_processs_log(spawn_target, tmp_path):
    """The worker is reaped by the DataLoader within milliseconds (multiprocessing polls it once the SIGCHLD handler
    raises), most often before a tick reads its zombie: then the main process's own line is what says the signal."""
    def kill_worker(_, workers):
        os.kill(workers[0], signal.SIGKILL)

    watched, verdict, workers, log = _dies(spawn_target, tmp_path, kill_worker, "--file-system-sharing")
    worker = workers[0]
    assert f"DataLoader worker (pid {worker}) is killed by signal: Killed." in log
    last = next(line for line in verdict["evidence"] if line.startswith("the log's last error: "))
    assert f"DataLoader worker (pid(s) {worker}) exited unexpectedly" in last or \
        f"DataLoader worker (pid {worker}) is killed by signal: Killed." in last, verdict["evidence"]
    said = [line for line in verdict["evidence"] if f"PID {worker} " in line and "killed by SIGKILL" in line]
    assert said, verdict["evidence"]
    read = {exit_.pid: exit_ for frame in watched.frames for exit_ in frame.exits}
    assert worker in read, "gputop saw the worker end"
    if read[worker].signal is None:  # reaped before gputop read how it ended: the log said it
        assert "killed by SIGKILL (per the main process's own log)" in said[0], said


def test_a_gloo_timeout_between_two_ranks_is_named_in_the_rank_exited_verdict(spawn_target, tmp_path):
    """Rank 1 is stopped (SIGSTOP): rank 0's next all_reduce waits for it, gloo times out after the process group's
    10 s and rank 0 raises, uncaught. torchrun's SIGTERM waits on the stopped rank, so the job shows rank 0 gone while
    rank 1 still runs: the verdict names rank 0's exit with its own timeout line."""
    log = tmp_path / "gloo.log"
    with log.open("w") as handle:
        target = spawn_target("gloo_timeout.py", "--launch", "--master-port", str(free_port()), stdout=handle,
                              stderr=subprocess.STDOUT, timeout=150,
                              ready=lambda _: len(re.findall(r"^rank \d pid \d+$", log.read_text(), re.M)) == 2)
    pids = {int(rank): int(pid) for rank, pid in re.findall(r"^rank (\d) pid (\d+)$", log.read_text(), re.M)}
    stopped = []
    try:
        def reached(job) -> bool:
            if not stopped:
                if {rank.rank for rank in job.ranks} == {0, 1}:
                    os.kill(pids[1], signal.SIGSTOP)
                    stopped.append(pids[1])
                return False
            return job.finding == "rank_exited" and any("Timed out waiting" in line for line in job.verdict.evidence)

        watched = watch_job_until(target.pid, tmp_path, reached, timeout=150)
    finally:
        if stopped:
            try:
                os.kill(stopped[0], signal.SIGCONT)
            except ProcessLookupError:
                pass
    text = log.read_text()
    assert re.search(r"^\[rank0\]: RuntimeError: \[\S+unbound_buffer\.cc:\d+\] Timed out waiting 10000ms for recv "
                     r"operation to complete$", text, re.M), text[-3000:]
    job = watched.jobs[-1]
    assert job.responsible_rank == 0, job
    evidence = job.verdict.evidence
    # How it ended is /proc's word where a tick read its zombie before torchrun reaped it (torchrun logs its own word
    # only once it has stopped rank 1, after the stop ends).
    assert evidence[0].startswith(f"rank 0 (PID {pids[0]}) has ended") and \
        "; rank 1 still runs: it waits for it at the next collective" in evidence[0], evidence
    assert re.fullmatch(r"rank 0's last error: RuntimeError: \[unbound_buffer\.cc:\d+\] Timed out waiting 10000ms for "
                        r"recv operation to complete — gloo: a collective waited past the process group's timeout for "
                        r"a peer", evidence[1]), evidence
