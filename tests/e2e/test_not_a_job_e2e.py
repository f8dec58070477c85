"""`gputop --pid PID` where PID is no training job (issue 37: `gputop --pid 1` watched someone else's
`python -m pytest` as "the job under the container init"): one line that says so and names the jobs gputop finds
(as `gputop --list` does), exit status 2, no traceback, nothing started.

What is no job (probes/jobs/census.py, not_a_training_job): a process that is not Python and no launcher's whose tree
holds gputop itself (this machine's init, the shell gputop was typed in), or a container's init whose tree holds no
training job (or several). A container's init that started one job is still that job's launcher, as before.

Real processes: a sleeping Python process with RANK=0 (a job to the census, tests/support/rank_sleeper.py), a real
`python -m pytest` waiting in its test, PID namespaces made with unshare (root only) for a container's init that
gputop does not run under.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import psutil
import pytest
from support.cli import gputop
from support.paths import REPO
from support.processes import stop_process_tree, wait_for
from support.rank_sleeper import clean_env, rank_sleeper_argv, start_rank_sleeper, waiting_pytest_argv

from tui.exitcodes import EXIT_OK, EXIT_USAGE

NEEDS_UNSHARE = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                   reason="needs root and unshare for a PID namespace (a container's init)")


@pytest.fixture
def rank_job(tmp_path):
    """A training job to the census, running beside the test: its process."""
    started = tmp_path / "rank-started"
    proc = start_rank_sleeper(started)
    try:
        wait_for(started.exists, timeout=60)
        yield proc
    finally:
        stop_process_tree(proc)


@pytest.fixture
def someone_elses_pytest(tmp_path):
    """`python -m pytest` run by someone else on this machine, waiting inside its test."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    started = tmp_path / "pytest-started"
    proc = subprocess.Popen(waiting_pytest_argv(folder, started), cwd=folder, env=clean_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(started.exists, timeout=120)
        yield proc
    finally:
        stop_process_tree(proc)


def the_one_line(result: subprocess.CompletedProcess) -> str:
    """What a PID that is no job gives: exit 2, one line on stderr, nothing on stdout, no traceback."""
    assert result.returncode == EXIT_USAGE, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert result.stdout == ""
    return lines[0]


def names_job(line: str, pid: int) -> bool:
    """Whether the line names the job with this root PID, or says it named the first five of more (a busy machine)."""
    return f"PID {pid} python " in line or re.search(r" and \d+ more \(gputop --list\); attach to one with gputop "
                                                     r"--pid PID$", line) is not None


@pytest.mark.parametrize("args", [["--snapshot", "-", "--duration", "5"], []], ids=["headless", "tui"])
def test_pid_1_is_not_a_training_job_and_the_line_names_the_jobs_found_here(rank_job, someone_elses_pytest, args):
    # gputop runs under PID 1 here (as on any machine outside a `docker exec`): its tree is everything, a pytest
    # and a job among it, and is never watched as one job.
    line = the_one_line(gputop("--pid", "1", *args, timeout=120))
    assert line.startswith(f"gputop: PID 1 ({psutil.Process(1).name()}) is not a training job: it is ")
    assert names_job(line, rank_job.pid), line  # the job --list finds, with what to type
    assert f"PID {someone_elses_pytest.pid} " not in line  # a pytest that imports no torch is no job


@NEEDS_UNSHARE
def test_in_a_container_pid_1_with_someone_elses_pytest_under_it_names_the_one_job(tmp_path):
    # The case of issue 37, in a PID namespace of its own (nothing else of this machine in sight): its init (bash)
    # started someone's `python -m pytest` and a training job; gputop --pid 1, run inside, says PID 1 is no job and
    # names the one job there.
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    pytest_started, rank_started = tmp_path / "pytest-started", tmp_path / "rank-started"
    pytest_argv = " ".join(f"'{arg}'" for arg in waiting_pytest_argv(folder, pytest_started))
    rank_argv = " ".join(f"'{arg}'" for arg in rank_sleeper_argv(rank_started))
    script = (f"(cd '{folder}' && exec {pytest_argv}) >/dev/null 2>&1 & RANK=0 {rank_argv} & "
              f"while [ ! -e '{pytest_started}' ] || [ ! -e '{rank_started}' ]; do sleep 0.05; done; "
              f"{sys.executable} -m tui --pid 1 --snapshot - --duration 5; echo \"exit=$?\" >&2; kill %1 %2")
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "bash", "-c", script], capture_output=True,
                          text=True, timeout=240, cwd=REPO, env=dict(clean_env(), PYTHONPATH=str(REPO)), check=False)
    said, status = done.stderr.strip().rsplit("\n", 1)
    assert status == f"exit={EXIT_USAGE}" and done.stdout == "", done.stderr
    assert re.fullmatch(r"gputop: PID 1 \(bash\) is not a training job: it is this system's init, and this gputop "
                        r"runs under it; the training jobs here: PID \d+ python \(python -c import pathlib, sys, "
                        r"time.*\); attach to one with gputop --pid PID", said), said


def test_the_shell_gputop_was_typed_in_is_not_a_training_job(rank_job):
    shell = subprocess.run(["bash", "-c", f'exec 2>&1; {sys.executable} -m tui --pid "$$" --snapshot - --duration 5; '
                            'echo "exit=$?"'], capture_output=True, text=True, timeout=120,
                           env=dict(clean_env(), PYTHONPATH=str(REPO)), cwd=REPO, check=False)
    said, status = shell.stdout.strip().rsplit("\n", 1)
    assert status == f"exit={EXIT_USAGE}", shell.stdout
    assert said.startswith("gputop: PID ") and "(bash) is not a training job: this gputop runs under it" in said
    assert names_job(said, rank_job.pid) and "Traceback" not in said, said


def container(tmp_path, inside: str) -> tuple[subprocess.Popen, int]:
    """A PID namespace whose init is bash running `inside` in the background and waiting for it (bash stays PID 1
    inside); returns the unshare process and the init's PID as this machine sees it."""
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "bash", "-c", f"{inside} & wait"],
                            env=clean_env(), cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    init = wait_for(lambda: next((child.pid for child in psutil.Process(proc.pid).children()
                                  if child.name() == "bash"), None), timeout=30)
    return proc, init


@NEEDS_UNSHARE
def test_a_containers_init_with_only_someone_elses_pytest_under_it_is_not_a_training_job(tmp_path, rank_job):
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    started = tmp_path / "pytest-started"
    inside = " ".join(f"'{arg}'" for arg in waiting_pytest_argv(folder, started))
    proc, init = container(tmp_path, f"cd '{folder}' && {inside}")
    try:
        wait_for(started.exists, timeout=120)
        line = the_one_line(gputop("--pid", str(init), "--snapshot", "-", "--duration", "5", timeout=120))
    finally:
        stop_process_tree(proc)
    assert line.startswith(f"gputop: PID {init} (bash) is not a training job: it is a container's init (PID 1 "
                           "inside it), with no training job under it; the training jobs here: "), line
    assert names_job(line, rank_job.pid), line


@NEEDS_UNSHARE
def test_a_containers_init_that_started_one_job_is_still_watched_as_its_launcher(tmp_path):
    started = tmp_path / "started"
    rank = " ".join(f"'{arg}'" for arg in rank_sleeper_argv(started))
    proc, init = container(tmp_path, f"RANK=0 {rank}")
    try:
        wait_for(started.exists, timeout=60)
        result = gputop("--pid", str(init), "--snapshot", "-", "--duration", "3", timeout=120)
    finally:
        stop_process_tree(proc)
    assert result.returncode == EXIT_OK, result.stderr
    assert f"gputop: attached to bash (PID {init}): watching python -c " in result.stderr
    snapshot = json.loads(result.stdout)
    assert snapshot["job"]["kind"] == "launched" and snapshot["job"]["launcher_pid"] == init
