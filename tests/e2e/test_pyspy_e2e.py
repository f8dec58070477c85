"""probes.sampling.pyspy against real processes with the real py-spy, plus its parsers on py-spy's real formats."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import psutil
import pytest
from support.paths import TARGETS
from support.processes import wait_for

from probes.sampling.pyspy import StackSampler
from probes.sampling.pyspy_binary import find_pyspy
from probes.sampling.sampling_policy import LOOK_AGAIN_RATE_FACTOR
from probes.sampling.stacks import frame_matches, hot_frames

pytestmark = pytest.mark.skipif(find_pyspy() is None, reason="py-spy is not installed")

TEST_RATE_HZ = 20  # well above the default so short tests see enough samples


def _pyspy_children() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.name() == "py-spy":
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def _ready(proc: subprocess.Popen) -> bool:
    return proc.stdout.readline().strip() == "ready"


@pytest.fixture
def sampler_factory():
    made: list[StackSampler] = []

    def make(**kwargs) -> StackSampler:
        sampler = StackSampler(**{"rate_hz": TEST_RATE_HZ, **kwargs})
        made.append(sampler)
        return sampler

    yield make
    for sampler in made:
        sampler.close()


class Accumulator:
    """Collects repeatedly, keeping every count and the latest reading (counts arrive per window)."""

    def __init__(self, sampler: StackSampler) -> None:
        self.sampler = sampler
        self.counts = []
        self.errors = []
        self.latest = None

    def collect(self):
        self.latest = self.sampler.collect()
        self.counts.extend(self.latest.counts)
        self.errors.extend(self.latest.errors)
        return self.latest


@pytest.mark.slow
def test_missing_pyspy_is_unavailable_with_install_command(sampler_factory):
    sampler = sampler_factory(pyspy_path="/nonexistent/py-spy")
    sampler.set_targets([psutil.Process().pid])
    reading = sampler.collect()
    assert not reading.available
    assert "pip install py-spy" in reading.reason


# --- real processes ------------------------------------------------------------------------------


@pytest.mark.slow
def test_busy_function_tops_hot_frames_and_idle_threads_are_marked(spawn_target, sampler_factory):
    target = spawn_target("loop_threads.py", "--threads", "6", "--sleepers", "2", stdout=subprocess.PIPE,
                          text=True, ready=_ready)
    sampler = sampler_factory()
    sampler.set_targets([target.pid])
    acc = Accumulator(sampler)

    def main_thread_sampled_and_idle_known():
        reading = acc.collect()
        assert reading.available, reading.reason
        return reading.threads and any(c.thread_name == "MainThread" for c in acc.counts)

    wait_for(main_thread_sampled_and_idle_known, timeout=20, interval=0.25)
    reading = acc.latest

    busy = hot_frames(acc.counts, include_idle=False, by_line=False)
    assert busy[0].function == "busy_spin_for_gputop", [(c.thread_name, c.idle, c.frames[0]) for c in acc.counts]
    assert busy[0].own_pct > 90, [(c.thread_name, c.idle, c.count, c.frames[0].function) for c in acc.counts]
    idle_counts = [c for c in acc.counts if (c.thread_name or "").startswith("idle-")]
    assert idle_counts and all(c.idle for c in idle_counts)
    assert {c.tid for c in idle_counts} == {t.tid for t in reading.threads if t.name.startswith("idle-")}
    assert not any(c.idle for c in acc.counts if c.thread_name == "MainThread")
    assert all(any(frame_matches(f, "Condition.wait") for f in c.frames) for c in idle_counts)
    # time.sleep is C code: only the dumps can tell that the line calling it is idle
    sleeping = [c for c in acc.counts if (c.thread_name or "").startswith("sleeper-")]
    assert sleeping and all(c.idle and c.frames[0].function == "sleep_loop_for_gputop" for c in sleeping)

    threads = {t.name: t for t in reading.threads}
    assert len(threads) == 9 and threads["MainThread"].tid == target.pid
    assert not threads["MainThread"].idle and threads["idle-0"].idle
    # each dump says when it was taken, so "now" can show its age: here, within the wait above
    assert all(t.dumped_at is not None and 0 <= time.time() - t.dumped_at < 60 for t in threads.values())
    assert threads["MainThread"].frames[0].function == "busy_spin_for_gputop"
    assert reading.sampler.startswith("py-spy ") and "nonblocking" in reading.sampler
    assert reading.rate_hz == TEST_RATE_HZ and 0 < reading.achieved_rate_hz <= TEST_RATE_HZ * 1.5
    assert sum(c.count for c in acc.counts if c.thread_name == "MainThread") > 0
    assert sampler.worker_pids() == set()
    assert sampler.sampler_cpu_seconds() > 0

    sampler.set_targets([])  # dropping a target stops its py-spy children
    wait_for(lambda: not _pyspy_children(), timeout=10)
    assert not sampler.collect().available


@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork", "forkserver"])
def test_dataloader_workers_found_by_their_stacks(spawn_target, sampler_factory, context):
    target = spawn_target("dataloader_loop.py", "--num-workers", "2", "--context", context,
                          stdout=subprocess.PIPE, text=True, ready=_ready, timeout=60)
    tree = psutil.Process(target.pid).children(recursive=True)
    workers = {p.pid for p in tree if p.name() == "pt_data_worker"}
    assert len(workers) == 2
    sampler = sampler_factory()
    sampler.set_targets([target.pid, *(p.pid for p in tree)])
    acc = Accumulator(sampler)

    def burning_on_cpu(pid: int) -> bool:
        return any(not c.idle and c.frames and c.frames[0].function == "burn_cpu_for_gputop"
                   for c in acc.counts if c.pid == pid and c.thread_name == "MainThread")

    def workers_seen_in_getitem():
        acc.collect()
        # Each worker also caught on its CPU while burning: on a loaded machine the first windows can catch a
        # busy worker only while it waits for a core, which reads as idle.
        return all(
            any(frame_matches(f, "__getitem__", "dataloader_loop.py") for c in acc.counts if c.pid == pid
                for f in c.frames) and burning_on_cpu(pid)
            for pid in workers
        ) and sampler.worker_pids() >= workers and any(c.pid == target.pid for c in acc.counts)

    wait_for(workers_seen_in_getitem, timeout=20, interval=0.25)
    assert sampler.worker_pids() == workers  # not the main process, forkserver or resource tracker
    for pid in workers:
        worker_stacks = [c for c in acc.counts if c.pid == pid]
        main_thread = [c for c in worker_stacks if c.thread_name == "MainThread"]
        in_loop = [c for c in main_thread
                   if any(frame_matches(f, "_worker_loop", "torch/utils/data/_utils/worker.py") for f in c.frames)]
        # nonblocking reads can tear a stack now and then; nearly all must sit under _worker_loop
        assert sum(c.count for c in in_loop) >= 0.9 * sum(c.count for c in main_thread), [
            [f.function for f in c.frames] for c in main_thread if c not in in_loop]
        getitem = hot_frames(worker_stacks, by_line=False)
        assert any(h.function == "BurnDataset.__getitem__" and h.total > 0 for h in getitem)
    main_frames = {f.function for c in acc.counts if c.pid == target.pid for f in c.frames}
    assert "_worker_loop" not in main_frames and "main" in main_frames


@pytest.mark.slow
def test_non_python_process_is_unavailable_with_reason(sampler_factory):
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        sampler = sampler_factory()
        sampler.set_targets([sleeper.pid])

        def unavailable():
            reading = sampler.collect()
            return None if reading.available else reading

        reading = wait_for(unavailable, timeout=10)
        assert reading.reason == f"PID {sleeper.pid} is not a Python process (py-spy found no interpreter)"
        assert reading.errors == (reading.reason,)
        assert reading.counts == () and reading.threads == ()
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.slow
def test_target_exiting_mid_sampling_is_reported_and_leaves_no_children(spawn_target):
    target = spawn_target("loop_threads.py", "--threads", "2", "--seconds", "2.5", stdout=subprocess.PIPE,
                          text=True, ready=_ready)
    sampler = StackSampler(rate_hz=TEST_RATE_HZ)
    try:
        sampler.set_targets([target.pid])
        acc = Accumulator(sampler)
        wait_for(lambda: acc.collect() and any("exited" in e for e in acc.errors), timeout=15, interval=0.25)
        assert f"PID {target.pid} exited" in acc.errors
        assert acc.counts, "the windows before the exit were still delivered"
        reading = acc.collect()
        assert not reading.available and reading.reason == f"PID {target.pid} exited"
        assert reading.threads == ()
    finally:
        sampler.close()
    assert not _pyspy_children()


@pytest.mark.slow
def test_native_sampling_marks_native_frames(spawn_target, sampler_factory):
    target = spawn_target("loop_threads.py", "--threads", "1", stdout=subprocess.PIPE, text=True, ready=_ready)
    sampler = sampler_factory(native=True)
    sampler.set_targets([target.pid])
    acc = Accumulator(sampler)
    # Wait for a running sample, not just any: on a loaded machine the spinning thread can be caught off its CPU
    # (idle) in the first windows.
    hot = wait_for(lambda: acc.collect() and hot_frames(acc.counts, include_idle=False, by_line=False), timeout=20)
    assert acc.latest.native and "native" in acc.latest.sampler
    frames = [f for c in acc.counts for f in c.frames]
    assert any(f.native and ".so" in f.file for f in frames)
    assert all(not f.native for f in frames if f.file.endswith(".py"))
    assert hot[0].function == "busy_spin_for_gputop"


@pytest.mark.slow
def test_failing_sampler_is_retried_until_the_process_becomes_python(sampler_factory):
    # The same pid is a shell first, then Python: py-spy fails, backs off, and succeeds later.
    script = f"sleep 1.5; exec {sys.executable} {TARGETS / 'loop_threads.py'} --threads 1 --seconds 30"
    proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.DEVNULL)
    try:
        sampler = sampler_factory()
        sampler.set_targets([proc.pid])
        acc = Accumulator(sampler)
        wait_for(lambda: not acc.collect().available, timeout=10)
        assert "is not a Python process" in acc.latest.reason
        wait_for(lambda: acc.collect().available and acc.counts, timeout=20, interval=0.25)
        assert any(frame_matches(f, "busy_spin_for_gputop") for c in acc.counts for f in c.frames)
    finally:
        proc.kill()
        proc.wait()


def _record_rates() -> set[str]:
    """The --rate of every py-spy record child running now."""
    rates = set()
    for child in _pyspy_children():
        try:
            argv = child.cmdline()
        except psutil.NoSuchProcess:
            continue
        if "record" in argv:
            rates.add(argv[argv.index("--rate") + 1])
    return rates


@pytest.mark.slow
def test_rate_settles_while_the_picture_holds_still(spawn_target, sampler_factory):
    target = spawn_target("loop_threads.py", "--threads", "1", "--sleepers", "0", "--seconds", "60",
                          stdout=subprocess.PIPE, text=True, ready=_ready)
    sampler = sampler_factory(rate_hz=10, settled_rate_hz=2, first_window_s=1, max_window_s=1)
    sampler.set_targets([target.pid])

    assert wait_for(lambda: "10" in _record_rates(), timeout=10)  # looks closely first
    assert wait_for(lambda: "2" in _record_rates(), timeout=30)  # then, the same busy function: gently


@pytest.mark.slow
def test_wake_ends_a_settled_window_and_samples_come_again(spawn_target, sampler_factory):
    # py-spy 0.4 writes what it sampled when it gets SIGINT ("Stopped sampling because Control-C pressed"),
    # but only at its next sample: whether the ended window's samples make the mark's wait depends on how fast
    # py-spy runs here, so this checks the mechanism (a marked reading, then samples of the busy function
    # from the ended window or the fresh fast one), not the clock. tests/e2e/test_sampler_wake.py checks the
    # wiring with a stand-in py-spy.
    target = spawn_target("loop_threads.py", "--threads", "1", "--sleepers", "0", "--seconds", "60",
                          stdout=subprocess.PIPE, text=True, ready=_ready)
    # Settled at 5 Hz: py-spy writes at its next sample after SIGINT, well within the mark's wait (0.8 s).
    sampler = sampler_factory(rate_hz=10, settled_rate_hz=5, first_window_s=1, max_window_s=1)
    sampler.set_targets([target.pid])

    def settled_window_age() -> float | None:
        for child in _pyspy_children():
            try:
                argv, started = child.cmdline(), child.create_time()
            except psutil.NoSuchProcess:
                continue
            if "record" in argv and argv[argv.index("--rate") + 1] == "5":
                return time.time() - started
        return None

    assert wait_for(lambda: (settled_window_age() or 0.0) >= 2.0, timeout=40)
    sampler.collect()  # what the fast windows took

    # The look-again window (10 samples at a boosted rate) lasts about a second and may be over by the
    # time the busy function shows, so the rates of py-spy's children are watched from the wake on.
    rates_seen: set[str] = set()
    watching = threading.Event()
    watching.set()

    def watch_rates() -> None:
        while watching.is_set():
            rates_seen.update(_record_rates())
            time.sleep(0.02)

    watcher = threading.Thread(target=watch_rates, daemon=True)
    watcher.start()
    try:
        sampler.wake("test: the picture may have moved")
        reading = wait_for(lambda: (r := sampler.collect()).phase_change and r, timeout=15, interval=0.05)
        assert not reading.errors
        counts = list(reading.counts)

        def busy_function_sampled() -> bool:
            counts.extend(sampler.collect().counts)
            return any(frame_matches(f, "busy_spin_for_gputop") for c in counts for f in c.frames)

        wait_for(busy_function_sampled, timeout=15, interval=0.1)
        # and it looked again fast: a window at LOOK_AGAIN_RATE_FACTOR x the fast rate
        assert wait_for(lambda: f"{10 * LOOK_AGAIN_RATE_FACTOR:g}" in rates_seen, timeout=5)
    finally:
        watching.clear()
        watcher.join()
