"""Shared fixtures: start real target processes (tests/targets/*.py) and always clean them up. And the line between
the two layers, drawn by the folder: tests/unit/ runs in this interpreter alone, and a test there that starts a
process fails, saying which; tests/e2e/ starts real processes, and every test in it is marked slow (so
`-m "not slow"` still selects the fast layer)."""

from __future__ import annotations

import inspect
import os
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from support.paths import REPO, TARGETS
from support.picker_jobs import Jobs
from support.processes import busy_neighbours, processes_started, stop_process_tree

BUSY_LOOP = "while True: pass"


def pytest_addoption(parser):
    parser.addoption(
        "--busy", type=int, default=int(os.environ.get("GPUTOP_TEST_BUSY", "0") or 0), metavar="N",
        help="run the tests beside N processes that each keep a core busy, as on a training node "
             "(default: $GPUTOP_TEST_BUSY or 0)",
    )


# Workers per core for `-n auto` (pyproject's addopts). The end-to-end tests mostly wait (sampling windows, start-up),
# so more workers than cores shorten the run; each was made to hold beside busy processes. Measured on the 2-core
# CI machine: docs/benchmarks.md, "The test loop": with 4 workers (2 a core) all 4 ran a test in every minute but the
# last while the CPU stood 71% busy, so the workers were the limit; 5 took the main run from 13.4 to 12.1 min.
# PYTEST_XDIST_AUTO_NUM_WORKERS overrides it.
WORKERS_PER_CPU = 2.5
MAX_WORKERS = 16


def pytest_xdist_auto_num_workers(config):
    cpus = len(os.sched_getaffinity(0))
    return max(2, min(MAX_WORKERS, int(WORKERS_PER_CPU * cpus)))


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session):
    """With --busy N (or GPUTOP_TEST_BUSY=N): N CPU-burning processes run beside the whole run (started here, outside
    any test, so that no test counts them as its own)."""
    # Under xdist the controller's loop wraps every worker's: the neighbours are started there, once.
    count = 0 if hasattr(session.config, "workerinput") else session.config.getoption("--busy")
    with busy_neighbours(count, (sys.executable, "-c", BUSY_LOOP)):
        return (yield)


E2E = REPO / "tests" / "e2e"

# GPUTOP_TEST_CPU_LOG=FILE: each test's wall time and the CPU seconds it cost (this process and the children it
# reaped: targets, the gputop command, py-spy), when it started (Unix time) and on which xdist worker, one
# tab-separated line a test, appended. Where a run's time goes when the machine's cores are the limit, and what ran
# alone at its end (scripts/test_cpu.py); daemons a test leaves to init (Slurm's, sshd) are not counted.
CPU_LOG = os.environ.get("GPUTOP_TEST_CPU_LOG")


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not CPU_LOG:
        return (yield)
    started, wall, cpu = time.time(), time.monotonic(), _cpu_seconds()
    try:
        return (yield)
    finally:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(CPU_LOG, "a", encoding="utf-8") as log:
            log.write(f"{item.nodeid}\t{time.monotonic() - wall:.2f}\t{_cpu_seconds() - cpu:.2f}\t{started:.2f}\t"
                      f"{worker}\n")



def pytest_collection_modifyitems(config, items):
    """The folder decides the layer: a test in tests/e2e/ is slow whether or not it says so, and one marked slow
    anywhere else is in the wrong folder. The fast layer runs first, so that a break there shows in the first
    minutes of a full run."""
    misplaced = []
    in_e2e = {item: E2E in Path(str(item.fspath)).resolve().parents for item in items}
    for item in items:
        if in_e2e[item]:
            item.add_marker(pytest.mark.slow)
        elif item.get_closest_marker("slow") is not None:
            misplaced.append(item.nodeid)
    # The fast layer first, each layer in its own order, but for the end-to-end tests marked starts_first: those
    # take minutes (the tree-sampling test: 88 s alone, 243 s in a loaded run), and one of them started late ended
    # a run alone, two minutes after the rest. Handing out all the longest first (by a recorded --durations=0) was
    # tried: it started the heaviest together and the run took 19.9 min against 16.3. xdist hands them to one
    # worker, one after the other, so those that wait on the clock go before one that takes a core
    # (starts_first(cpu_bound=True)): put first, the GPU check's dry run held the tree-sampling test back 150 s.
    def order(item):
        first = item.get_closest_marker("starts_first")
        return in_e2e[item], first is None, first is not None and first.kwargs.get("cpu_bound", False)

    items.sort(key=order)
    if misplaced:
        raise pytest.UsageError(f"{len(misplaced)} test(s) marked slow outside tests/e2e/, first {misplaced[0]}: "
                                "a test that starts a process belongs in tests/e2e/")


STARTED_IN_SETUP = pytest.StashKey[list[str]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    """Note the processes a fast test's fixtures start (a module-scoped one included, set up for its first test)."""
    if item.get_closest_marker("slow") is not None:
        return (yield)
    with processes_started() as started:
        try:
            return (yield)
        finally:
            item.stash[STARTED_IN_SETUP] = started


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A test not marked slow that started a process fails: it belongs to the end-to-end layer."""
    if item.get_closest_marker("slow") is not None:
        return (yield)
    with processes_started() as started:
        result = yield
    started = item.stash.get(STARTED_IN_SETUP, []) + started
    if started:
        pytest.fail(f"this test started {len(started)} process(es), first `{started[0][:200]}`: a test that starts "
                    f"a process is end to end; mark it @pytest.mark.slow (the fast layer is -m 'not slow')",
                    pytrace=False)
    return result


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


@pytest.fixture
def tiny_cpu_quota():
    """A real cgroup of 0.2 CPU (tests/support/cpu_quota.py); yields a function that moves a PID into it; removed
    afterwards. Skips where this machine cannot make one."""
    from support.cgroups import group_name, tiny_cpu_quota
    try:
        quota = tiny_cpu_quota(group_name())
        enter = quota.__enter__()
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup with a CPU quota here: {exc}")
    try:
        yield enter
    finally:
        quota.__exit__(None, None, None)


@pytest.fixture
def memory_group():
    """memory_group(limit_bytes, swap=False) -> a real memory cgroup, without swap unless asked
    (tests/support/cgroups.py MemoryGroup); each one made is removed when the test ends."""
    from support.cgroups import MemoryGroup, groups_made

    yield from groups_made(lambda number, limit_bytes, swap=False: MemoryGroup(
        f"gputop_memory_{os.getpid()}_{number}", limit_bytes, swap))


@pytest.fixture
def jobs(tmp_path):
    """The job picker's real jobs (tests/support/picker_jobs.py), started from a folder no other test uses and
    ready; stopped when the test ends."""
    folder = tmp_path / f"picker-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    started = Jobs(folder)
    try:
        started.wait_ready()
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A real one-node Slurm cluster (tests/support/slurm_cluster.py) for the whole session, stopped at its end,
    failed tests or not; the tests that use it skip with the reason when it cannot start here."""
    from support.slurm_cluster import ClusterUnavailable, start_cluster

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
    """A real two-node Slurm cluster (tests/support/slurm_cluster.py's start_namespaced_cluster): slurmctld here,
    a slurmd in each of two namespaced nodes n1, n2 (tests/support/ns_nodes.py), up once sinfo shows both idle; for
    one test module, torn down at its end (nodes, bridge and daemons). Skips with the reason where it cannot run."""
    from support.slurm_cluster import ClusterUnavailable, start_namespaced_cluster

    try:
        cluster = start_namespaced_cluster(tmp_path_factory.mktemp("slurm2"))
    except ClusterUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def snap_compare(snap_compare):
    """pytest-textual-snapshot's snap_compare, taken once the screen has settled: after the keys are pressed, the
    screen is exported until two exports 50 ms apart agree. Its own pauses wait for the message queues, not for a
    refresh, and a pane's overflow (its scrollbar, "more below") is drawn only after the refresh that lays its text
    out: Python 3.12 took the 80x24 verdict before it, 3.11 after it."""
    def compare(app, *args, press=(), run_before=None, **kwargs):
        async def settled(pilot):
            if run_before is not None:
                result = run_before(pilot)
                if inspect.isawaitable(result):
                    await result
            await pilot.press(*press)
            previous = None
            for _ in range(200):  # a bound, not a wait: it ends as soon as the screen holds still
                await pilot.pause(0.05)
                shown = pilot.app.export_screenshot()
                if shown == previous:
                    return
                previous = shown
        return snap_compare(app, *args, run_before=settled, **kwargs)
    return compare
