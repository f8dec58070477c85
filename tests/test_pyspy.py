"""probes.pyspy against real processes with the real py-spy, plus its parsers on py-spy's real formats."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest
from conftest import TARGETS, wait_for

from probes.frame import StackCount, StackFrame
from probes.pyspy import StackSampler, explain_failure, find_pyspy
from probes.pyspy_output import dominant_position, parse_dump, parse_raw, samples_in
from probes.stacks import frame_matches, hot_frames

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


# --- parsers, on text copied from py-spy 0.4.3 --------------------------------------------------

TPY = "/usr/lib/python3.11/threading.py"
RAW = "\n".join([
    f"thread (4578): idle-2;Thread._bootstrap ({TPY}:1002);Condition.wait ({TPY}:327) 19",
    "thread (4535): MainThread;<module> (/app/loop.py:44);busy (/app/loop.py:22) 11",
    "thread (0x7F00AA): Thread-1 (_serve);Listener.accept (/usr/lib/python3.11/multiprocessing/connection.py:482) 2",
    "thread (4535): MainThread;0x7facd504524a (/usr/lib/x86_64-linux-gnu/libc.so.6);<module> (/app/loop.py:44);"
    "sock_connect (/tmp/build/Modules/socketmodule.c:3330);thread_run (/usr/lib/libpython3.11.so.1.0) 3",
    'process 77:"python train.py --x;y";thread (78): weird;name;main (/my dir (copy)/t.py:5) 1',
    "thread (79);<module> (<string>:1) 4",
]) + "\n"


def test_parse_raw_real_formats():
    counts = parse_raw(RAW, pid=4535, native=True)
    assert len(counts) == 6
    idle = counts[0]
    assert (idle.tid, idle.thread_name, idle.count, idle.idle) == (4578, "idle-2", 19, False)
    assert idle.frames[0].function == "Condition.wait" and idle.frames[0].line == 327  # innermost first
    assert idle.frames[-1].function == "Thread._bootstrap"
    assert [f.function for f in counts[1].frames] == ["busy", "<module>"]
    assert counts[2].tid == 0x7F00AA and counts[2].thread_name == "Thread-1 (_serve)"
    native = counts[3].frames
    assert [(f.function, f.line, f.native) for f in native] == [
        ("thread_run", 0, True),
        ("sock_connect", 3330, True),
        ("<module>", 44, False),
        ("0x7facd504524a", 0, True),
    ]
    assert native[0].file == "/usr/lib/libpython3.11.so.1.0"
    odd = counts[4]
    assert (odd.tid, odd.thread_name) == (78, "weird;name")
    assert (odd.frames[0].function, odd.frames[0].file, odd.frames[0].line) == ("main", "/my dir (copy)/t.py", 5)
    nameless = counts[5]
    assert (nameless.tid, nameless.thread_name, nameless.frames[0].file) == (79, None, "<string>")
    assert not nameless.frames[0].native
    assert not any(f.native for c in parse_raw(RAW, pid=1) for f in c.frames)  # only with --native
    assert samples_in(counts) == 19  # the thread seen most often (idle-2) was in every sample


def test_parse_dump_json():
    text = """[{"pid": 5, "thread_id": 140, "thread_name": "MainThread", "os_thread_id": 5, "active": false,
      "owns_gil": false, "frames": [{"name": "Condition.wait", "filename": "/t.py", "line": 327,
      "module": null, "short_filename": "t.py", "locals": null, "is_entry": false}], "process_info": null},
      {"pid": 5, "thread_id": 141, "thread_name": null, "os_thread_id": null, "active": true,
      "owns_gil": true, "frames": [], "process_info": null}]"""
    first, second = parse_dump(text, pid=5)
    assert (first.tid, first.name, first.idle, first.owns_gil) == (5, "MainThread", True, False)
    assert first.frames[0].function == "Condition.wait" and first.frames[0].line == 327
    assert (second.tid, second.idle, second.owns_gil) == (141, False, True)


def test_permission_failure_says_what_to_do():
    # The message py-spy 0.4.3 printed when run as nobody against a root-owned Python process.
    kind, reason = explain_failure(
        psutil.Process().pid, "Permission Denied: Try running again with elevated permissions by going 'sudo'"
    )
    assert kind == "permission"
    assert "as root" in reason and "SYS_PTRACE" in reason and "ptrace_scope" in reason


def test_missing_pyspy_is_unavailable_with_install_command(sampler_factory):
    sampler = sampler_factory(pyspy_path="/nonexistent/py-spy")
    sampler.set_targets([psutil.Process().pid])
    reading = sampler.collect()
    assert not reading.available
    assert "pip install py-spy" in reading.reason


# --- real processes ------------------------------------------------------------------------------


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
    assert busy[0].own_pct > 90
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
    assert threads["MainThread"].frames[0].function == "busy_spin_for_gputop"
    assert reading.sampler.startswith("py-spy ") and "nonblocking" in reading.sampler
    assert reading.rate_hz == TEST_RATE_HZ and 0 < reading.achieved_rate_hz <= TEST_RATE_HZ * 1.5
    assert sum(c.count for c in acc.counts if c.thread_name == "MainThread") > 0
    assert sampler.worker_pids() == set()
    assert sampler.sampler_cpu_seconds() > 0

    sampler.set_targets([])  # dropping a target stops its py-spy children
    wait_for(lambda: not _pyspy_children(), timeout=10)
    assert not sampler.collect().available


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

    def workers_seen_in_getitem():
        acc.collect()
        return all(
            any(frame_matches(f, "__getitem__", "dataloader_loop.py") for c in acc.counts if c.pid == pid
                for f in c.frames)
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
        burning = [c for c in main_thread if c.frames and c.frames[0].function == "burn_cpu_for_gputop"]
        assert any(not c.idle for c in burning)
    main_frames = {f.function for c in acc.counts if c.pid == target.pid for f in c.frames}
    assert "_worker_loop" not in main_frames and "main" in main_frames


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


def test_native_sampling_marks_native_frames(spawn_target, sampler_factory):
    target = spawn_target("loop_threads.py", "--threads", "1", stdout=subprocess.PIPE, text=True, ready=_ready)
    sampler = sampler_factory(native=True)
    sampler.set_targets([target.pid])
    acc = Accumulator(sampler)
    wait_for(lambda: acc.collect() and any(c.thread_name == "MainThread" for c in acc.counts), timeout=20)
    assert acc.latest.native and "native" in acc.latest.sampler
    frames = [f for c in acc.counts for f in c.frames]
    assert any(f.native and ".so" in f.file for f in frames)
    assert all(not f.native for f in frames if f.file.endswith(".py"))
    assert hot_frames(acc.counts, include_idle=False, by_line=False)[0].function == "busy_spin_for_gputop"


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


def test_dominant_position_skips_idle_waits():
    busy = StackCount(1, 1, "MainThread", False, (StackFrame("step", "/app/train.py", 9),), 3)
    waiting = StackCount(1, 2, "feeder", False, (StackFrame("Condition.wait", f"{TPY}", 327),), 50)
    assert dominant_position([busy, waiting]) == ("step", "/app/train.py")
    assert dominant_position([waiting]) is None


def test_rate_settles_while_the_picture_holds_still(spawn_target, sampler_factory):
    target = spawn_target("loop_threads.py", "--threads", "1", "--sleepers", "0", "--seconds", "60",
                          stdout=subprocess.PIPE, text=True, ready=_ready)
    sampler = sampler_factory(rate_hz=10, settled_rate_hz=2, first_window_s=1, max_window_s=1)
    sampler.set_targets([target.pid])

    def record_rates() -> set[str]:
        rates = set()
        for child in _pyspy_children():
            try:
                argv = child.cmdline()
            except psutil.NoSuchProcess:
                continue
            if "record" in argv:
                rates.add(argv[argv.index("--rate") + 1])
        return rates

    assert wait_for(lambda: "10" in record_rates(), timeout=10)  # looks closely first
    assert wait_for(lambda: "2" in record_rates(), timeout=30)  # then, the same busy function: gently
