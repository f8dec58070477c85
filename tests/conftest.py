"""Shared fixtures: start real target processes (tests/targets/*.py) and always clean them up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

TARGETS = Path(__file__).parent / "targets"
REPO = Path(__file__).resolve().parent.parent


def kill_tree(pid: int) -> None:
    """SIGKILL pid and every process under it, and wait (a zombie counts as gone)."""
    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    procs = parent.children(recursive=True) + [parent]
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    # Only our direct child is ours to reap; orphaned grandchildren become zombies that wait_procs would
    # wait on until its timeout when pid 1 does not reap them, so a zombie counts as gone.
    deadline = time.monotonic() + 5
    for proc in procs:
        while time.monotonic() < deadline:
            try:
                if proc.status() == psutil.STATUS_ZOMBIE and proc.pid != pid:
                    break
            except psutil.NoSuchProcess:
                break
            if proc.pid == pid:
                break  # reaped by the fixture's Popen.wait()
            time.sleep(0.02)


BUSY_LOOP = "while True: pass"


def pytest_addoption(parser):
    parser.addoption(
        "--busy", type=int, default=int(os.environ.get("GPUTOP_TEST_BUSY", "0") or 0), metavar="N",
        help="run the tests beside N processes that each keep a core busy, as on a training node "
             "(default: $GPUTOP_TEST_BUSY or 0)",
    )


@pytest.fixture(scope="session", autouse=True)
def busy_neighbours(request):
    """With --busy N (or GPUTOP_TEST_BUSY=N): N CPU-burning processes run beside the whole session."""
    count = request.config.getoption("--busy")
    procs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP], start_new_session=True) for _ in range(count)]
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait(timeout=5)


def pytest_report_header(config):
    count = config.getoption("--busy")
    return f"busy neighbours: {count} CPU-burning process{'es' if count != 1 else ''}" if count else None


@pytest.fixture
def spawn_target():
    """spawn_target("name.py", *args, ready=lambda proc: bool, env={...}) -> subprocess.Popen.

    Starts ``python tests/targets/name.py args`` in its own session; every process it started
    (DataLoader workers included) is killed when the test ends.
    """
    started: list[subprocess.Popen] = []

    def start(script: str, *args: str, ready=None, timeout: float = 30.0, env=None, **popen_kwargs):
        full_env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO))
        full_env.update(env or {})
        proc = subprocess.Popen(
            [sys.executable, str(TARGETS / script), *args],
            env=full_env,
            start_new_session=True,
            **popen_kwargs,
        )
        started.append(proc)
        if ready is not None:
            deadline = time.monotonic() + timeout
            while not ready(proc):
                if proc.poll() is not None:
                    raise RuntimeError(f"target {script} exited early with {proc.returncode}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"target {script} not ready after {timeout}s")
                time.sleep(0.1)
        return proc

    yield start
    for proc in started:
        stop_process_tree(proc, wait_s=5)


def stop_process_tree(proc: subprocess.Popen, wait_s: float = 10.0) -> None:
    """Kill a target started with start_new_session, everything under it and its process group; reap it."""
    kill_tree(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=wait_s)


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.1):
    """Poll predicate() until it returns something truthy; return it, or fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"condition not met within {timeout}s: {predicate}")


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A real one-node Slurm cluster (tests/slurm_cluster.py) for the whole session, stopped at its end, failed
    tests or not; the tests that use it skip with the reason when it cannot start here."""
    from slurm_cluster import ClusterUnavailable, start_cluster

    try:
        cluster = start_cluster(tmp_path_factory.mktemp("slurm"))
    except ClusterUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def slurm_two_nodes(tmp_path_factory):
    """A real two-node Slurm cluster (tests/slurm_cluster.py's start_namespaced_cluster): slurmctld here, a
    slurmd in each of two namespaced nodes n1, n2 (tests/ns_nodes.py), up once sinfo shows both idle; for one
    test module, torn down at its end (nodes, bridge and daemons). Skips with the reason where it cannot run."""
    from slurm_cluster import ClusterUnavailable, start_namespaced_cluster

    try:
        cluster = start_namespaced_cluster(tmp_path_factory.mktemp("slurm2"))
    except ClusterUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()
