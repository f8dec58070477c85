"""Faults gputop must survive, each made real: py-spy killed mid-run, a target that turns unreadable or
runs a new program, a PID reused, a full disk under --record, a recording cut mid-line.

Each test waits for states (wait_for), never for a guessed time.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from support.paths import REPO, TARGETS
from support.pilot import RecordedEngine, capture_notes, frames_of, pilot_test, wait_until
from support.processes import wait_for

from probes.frame import Frame
from probes.monitoring.engine import Engine, EngineConfig
from probes.outputs.recording import load_recording, read_recording
from probes.sampling.pyspy_binary import find_pyspy
from tui.app import make_app

needs_pyspy = pytest.mark.skipif(find_pyspy() is None, reason="py-spy is not installed")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")

TEST_RATE_HZ = 20.0


def ready(proc) -> bool:
    return proc.stdout.readline().strip() == b"ready"


def gputop(*args: str, **kwargs) -> subprocess.Popen:
    """The gputop command in the background; stdout and stderr are files the test reads when it ends."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "tui", *args], env=env, cwd=REPO, **kwargs)


def functions(frame: Frame) -> set[str]:
    return {f.function for c in frame.stacks.counts for f in c.frames}


class Ticker:
    """Drives an Engine one tick per call, keeping every frame."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.frames: list[Frame] = []

    def tick(self) -> Frame:
        frame = self.engine.tick()
        self.frames.append(frame)
        return frame

    def until(self, predicate, timeout: float = 60.0) -> Frame:
        """Tick until predicate(frame) holds for the newest frame; return that frame."""

        def newest_if_it_holds() -> Frame | None:
            frame = self.tick()
            return frame if predicate(frame) else None

        return wait_for(newest_if_it_holds, timeout=timeout, interval=0.1)


@pytest.fixture
def engine_for():
    made: list[Engine] = []

    def make(pid: int) -> Ticker:
        engine = Engine(pid, EngineConfig(interval_s=0.25, read_gpu=False, stack_rate_hz=TEST_RATE_HZ))
        made.append(engine)
        return Ticker(engine)

    yield make
    for engine in made:
        engine.close()


def pyspy_children(mode: str) -> list[psutil.Process]:
    """This test process's running py-spy children doing ``mode`` (record or dump)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.name() == "py-spy" and child.cmdline()[1:2] == [mode] and child.status() != "zombie":
                found.append(child)
        except (psutil.NoSuchProcess, IndexError):
            pass
    return found


# --- 1. py-spy killed mid-run -----------------------------------------------------------------------


@pytest.mark.slow
@needs_pyspy
def test_pyspy_killed_mid_run_is_restarted_reported_and_sampling_resumes(spawn_target, engine_for):
    target = spawn_target("busy_loop.py", stdout=subprocess.PIPE, ready=ready)
    ticker = engine_for(target.pid)
    ticker.until(lambda f: "train_step_for_gputop" in functions(f))

    def kill_record_children_until_reported() -> Frame:
        def killed_and_reported(frame: Frame) -> bool:
            if any("killed by SIGKILL" in e for e in frame.stacks.errors):
                return True
            for child in pyspy_children("record"):  # again: the last one may have ended its window first
                child.kill()
            return False

        for child in pyspy_children("record"):
            child.kill()
        return ticker.until(killed_and_reported)

    first = kill_record_children_until_reported()
    message = next(e for e in first.stacks.errors if "killed by SIGKILL" in e)
    assert f"py-spy record of PID {target.pid} was killed by SIGKILL (not by gputop)" in message, message
    assert "once so far" in message and "restarting it in" in message and "\n" not in message, message
    killed_at = len(ticker.frames)
    ticker.until(lambda f: "train_step_for_gputop" in functions(f))  # samples resume

    second = kill_record_children_until_reported()
    assert any("times so far" in e for e in second.stacks.errors), second.stacks.errors  # the count goes on
    ticker.until(lambda f: "train_step_for_gputop" in functions(f))
    # A killed py-spy is not the target's fault: it never becomes the reason stacks are unavailable.
    reasons = [f.stacks.reason for f in ticker.frames[killed_at - 1:] if not f.stacks.available]
    assert not any("killed" in (r or "") for r in reasons), reasons


# --- 2. the target turns unreadable midway ----------------------------------------------------------


def recorded_frames(path: Path) -> list[Frame]:
    """The whole frames written so far (a recording being written may end mid-line)."""
    if not path.exists() or not path.read_text():
        return []
    return list(read_recording(path))


@pytest.mark.slow
@needs_pyspy
@needs_root
@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv, to run gputop without CAP_SYS_PTRACE")
def test_target_turning_non_dumpable_midway_is_explained_and_cpu_data_goes_on(spawn_target, tmp_path):
    target = spawn_target("becomes_undumpable.py", stdout=subprocess.PIPE, ready=ready)
    record, snapshot, stderr = tmp_path / "run.jsonl", tmp_path / "snap.json", tmp_path / "stderr.txt"
    # gputop as root without CAP_SYS_PTRACE: it may read a same-user target only while that is dumpable.
    with stderr.open("w") as err:
        monitor = subprocess.Popen(
            ["setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace", sys.executable, "-m", "tui",
             "--pid", str(target.pid), "--record", str(record), "--snapshot", str(snapshot),
             "--duration", "600", "--interval", "0.25", "--rate", "20", "--no-gpu"],
            env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO, stderr=err, stdout=subprocess.DEVNULL,
        )
    try:
        wait_for(lambda: any("spin_until_undumpable_for_gputop" in functions(f) for f in recorded_frames(record)),
                 timeout=60)
        os.kill(target.pid, signal.SIGUSR1)
        assert target.stdout.readline().strip() == b"undumpable"
        denied = wait_for(lambda: next((f for f in recorded_frames(record)
                                        if not f.stacks.available and "permission denied" in f.stacks.reason), None),
                          timeout=60)
        # CPU data goes on after the denial.
        wait_for(lambda: any(f.seq > denied.seq and f.processes and f.processes[0].cpu_pct is not None
                             for f in recorded_frames(record)), timeout=30)
    finally:
        monitor.send_signal(signal.SIGTERM)  # headless: stop, write the snapshot
        monitor.wait(timeout=60)
    errors = stderr.read_text()
    assert monitor.returncode == 0, errors
    assert "Traceback" not in errors
    reason = denied.stacks.reason
    assert "\n" not in reason
    assert f"py-spy may not read PID {target.pid}: permission denied" in reason
    assert "non-dumpable" in reason and "CAP_SYS_PTRACE" in reason  # what happened, and the fix
    snap = json.loads(snapshot.read_text())
    assert "non-dumpable" in snap["stacks"]["reason"]  # "available" stays true: it was sampled before
    main = snap["processes"][0]
    assert main["pid"] == target.pid and main["cpu_pct"] is not None


# --- 3. the target runs a new program (exec) --------------------------------------------------------


@pytest.mark.slow
@needs_pyspy
def test_target_exec_into_a_non_python_program(spawn_target, engine_for):
    sleep = shutil.which("sleep")
    target = spawn_target("exec_on_signal.py", sleep, "600", stdout=subprocess.PIPE, ready=ready)
    ticker = engine_for(target.pid)
    before = ticker.until(lambda f: "loop_before_exec_for_gputop" in functions(f))
    assert "exec_on_signal.py" in " ".join(before.target.cmdline) and before.target.python_version
    os.kill(target.pid, signal.SIGUSR1)
    noticed = ticker.until(lambda f: f.target.cmdline == (sleep, "600"))
    assert any(f"PID {target.pid} now runs sleep 600" in e for e in noticed.stacks.errors)
    unavailable = ticker.until(lambda f: not f.stacks.available)
    assert unavailable.stacks.reason == f"PID {target.pid} is not a Python process (py-spy found no interpreter)"
    for frame in ticker.frames[ticker.frames.index(noticed):]:
        assert frame.target.alive and frame.target.cmdline == (sleep, "600")
        assert frame.target.python_version is None and "python" not in frame.target.exe
        assert frame.processes[0].name == "sleep" and frame.processes[0].cpu_seconds is not None


@pytest.mark.slow
@needs_pyspy
def test_target_exec_into_another_python_program(spawn_target, engine_for):
    script = str(TARGETS / "busy_loop.py")
    target = spawn_target("exec_on_signal.py", sys.executable, script, stdout=subprocess.PIPE, ready=ready)
    ticker = engine_for(target.pid)
    ticker.until(lambda f: "loop_before_exec_for_gputop" in functions(f))
    os.kill(target.pid, signal.SIGUSR1)
    noticed = ticker.until(lambda f: f.target.cmdline == (sys.executable, script))
    ticker.until(lambda f: "train_step_for_gputop" in functions(f))
    after = ticker.frames[ticker.frames.index(noticed) + 1:]
    # Sampled afresh: no stack of the old program after the change was seen.
    assert not any("loop_before_exec_for_gputop" in functions(f) for f in after)
    assert all(f.target.cmdline == (sys.executable, script) for f in after)
    assert any(f"PID {target.pid} now runs python" in e for e in noticed.stacks.errors)


# --- 4. the PID reused after the target exits -------------------------------------------------------


@pytest.mark.slow
@needs_root
@pytest.mark.skipif(not shutil.which("unshare"), reason="needs unshare, for a PID namespace")
def test_reused_pid_is_never_shown_under_the_old_name():
    # In a new PID namespace nothing else takes PIDs, and root may choose the next one: a real reuse.
    result = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(TARGETS / "pid_reuse.py")],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    if result.returncode != 0 and result.stderr.startswith("unshare:"):
        pytest.skip(f"no PID namespace here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert "error" not in seen, seen
    assert seen["second_pid"] == seen["pid"] and seen["second_cmdline"] == ["sleep", "600"]
    assert seen["before"]["alive"] and seen["before"]["cmdline"][-1].endswith("busy_loop.py")
    after = seen["after"]
    assert not after["alive"]
    assert after["exit_reason"] == "process ended (its PID now belongs to another process)"
    assert after["cmdline"] == seen["before"]["cmdline"]  # the old program's, marked ended, not sleep's
    assert all(not p["alive"] and p["name"] != "sleep" and "sleep" not in p["cmdline"] for p in seen["processes"])


# --- 5. the recording's disk fills ------------------------------------------------------------------


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs with about one page left: a recording fills it within a frame or two."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                              capture_output=True, text=True, timeout=30)
    except OSError as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        (mount / "filler").write_bytes(b"\0" * (60 * 1024))
        assert os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize <= 8192
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=30)


@pytest.mark.slow
@needs_pyspy
def test_headless_record_to_a_full_disk_says_so_and_the_snapshot_goes_on(spawn_target, full_disk, tmp_path):
    target = spawn_target("busy_loop.py", stdout=subprocess.PIPE, ready=ready)
    record, snapshot = full_disk / "run.jsonl", tmp_path / "snap.json"
    monitor = gputop("--pid", str(target.pid), "--record", str(record), "--snapshot", str(snapshot),
                     "--duration", "5", "--interval", "0.25", "--no-gpu",
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, errors = monitor.communicate(timeout=90)
    assert monitor.returncode == 1, errors  # ran, but the recording asked for is incomplete
    assert "Traceback" not in errors
    lines = errors.strip().splitlines()
    assert len(lines) == 3, errors
    stopped = lines[0]
    assert stopped.startswith(f"gputop: recording to {record} stopped after ")
    assert "No space left on device" in stopped and "--record" in stopped
    assert lines[1] == f"gputop: snapshot of PID {target.pid} written to {snapshot}"
    assert lines[2].startswith("gputop: verdict: ")  # a headless run ends with its verdict
    recorded = load_recording(record)
    snap = json.loads(snapshot.read_text())
    # Sampling went on after the disk filled: the snapshot holds more frames than the recording could.
    assert snap["frames"] > len(recorded.frames) + 1
    assert snap["processes"][0]["pid"] == target.pid


@pytest.mark.slow
@pilot_test
async def test_tui_record_to_a_full_disk_warns_and_keeps_running(full_disk):
    engine = RecordedEngine(frames_of("data_bound"), interval_s=0.1)
    app = make_app(engine=engine, record_path=full_disk / "run.jsonl")
    notes = capture_notes(app)  # before the app runs: the first frames may arrive while it starts
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: any("No space left on device" in n for n in notes), timeout_s=60)
        assert "recording stopped" in app.status_text().plain
        note = next(n for n in notes if "No space left on device" in n)
        assert "recording to" in note and "--record" in note and "\n" not in note
        ticks = engine.ticks
        await wait_until(pilot, lambda: engine.ticks >= ticks + 3 and len(app.view.frames) >= ticks + 3,
                         timeout_s=60)
        assert "recording stopped" in app.status_text().plain
        assert sum("No space left on device" in n for n in notes) == 1  # said once, not every tick


# --- 6. a recording cut mid-line, or damaged --------------------------------------------------------


@pytest.fixture(scope="module")
def real_recording(tmp_path_factory):
    """A real recording of a real target, made once for the replay tests."""
    folder = tmp_path_factory.mktemp("recording")
    path = folder / "run.jsonl"
    target = subprocess.Popen([sys.executable, str(TARGETS / "busy_loop.py")], stdout=subprocess.PIPE,
                              env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        assert ready(target)
        done = subprocess.run([sys.executable, "-m", "tui", "--pid", str(target.pid), "--record", str(path),
                               "--duration", "2", "--interval", "0.25", "--no-gpu", "--no-stacks"],
                              capture_output=True, text=True, timeout=60, cwd=REPO,
                              env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert done.returncode == 0, done.stderr
    finally:
        target.kill()
        target.wait()
    lines = path.read_text().splitlines(keepends=True)
    assert len(lines) >= 4, "a header and at least three frames"
    return lines


def replay(path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tui", "replay", str(path), *args], capture_output=True,
                          text=True, timeout=60, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))


@pytest.mark.slow
def test_replay_of_a_recording_cut_mid_line_shows_what_is_whole(real_recording, tmp_path):
    cut = tmp_path / "cut.jsonl"
    last = real_recording[-1]
    cut.write_text("".join(real_recording[:-1]) + last[: len(last) // 2])  # the writer killed mid-line
    result = replay(cut, "--snapshot", "-")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    notice, verdict = result.stderr.strip().splitlines()
    assert verdict.startswith("gputop: verdict: ")  # last, as a headless run ends
    whole = len(real_recording) - 2
    assert notice == (f"gputop: {cut}: skipped 1 line that is not a whole frame (line {len(real_recording)}: "
                      "cut short, the recording ends mid-line (its writer stopped while writing)); "
                      f"showing the {whole} whole frames")
    assert json.loads(result.stdout)["frames"] == whole


@pytest.mark.slow
def test_replay_of_a_recording_with_a_damaged_line_skips_it(real_recording, tmp_path):
    damaged = tmp_path / "damaged.jsonl"
    lines = list(real_recording)
    lines.insert(2, '{"seq": 3, "time": 17\x00\x00garbage\n')
    lines.insert(3, b"\xff\xfe not text at all\n".decode("latin-1"))
    damaged.write_text("".join(lines), encoding="latin-1")
    result = replay(damaged, "--snapshot", "-")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    notice = result.stderr.strip().splitlines()
    assert len(notice) == 2 and notice[1].startswith("gputop: verdict: ")  # the notice, then the verdict
    assert "skipped 2 lines that are not whole frames (line 3: not JSON; line 4: not JSON)" in notice[0]
    assert json.loads(result.stdout)["frames"] == len(real_recording) - 1

    recording = load_recording(damaged)
    assert [s.number for s in recording.skipped] == [3, 4]
    assert len(recording.frames) == len(real_recording) - 1
