"""The exits and files a newcomer hit (issue 20): `--duration` alone is a usage error; Ctrl-C in a headless run
writes a snapshot marked partial and says so; every file gputop writes with stacks or command lines is 0600
whatever the umask; `gputop mfu | head -1` ends quietly. Real gputop processes on real targets."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import assert_one_line_usage_error, gputop, ready
from support.paths import REPO
from support.processes import wait_for
from support.recorded import frames_so_far


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.slow
def test_duration_without_snapshot_or_record_is_one_line_and_exit_2():
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        result = gputop("--pid", str(sleeper.pid), "--duration", "1")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert_one_line_usage_error(result, "--duration needs --snapshot")
    assert result.stdout == ""


def _as_from_a_terminal() -> None:
    """The child's start as a shell in a terminal gives it: umask 022, as on most machines (the files must
    still come out 0600), and Ctrl-C not ignored. A test run started in the background of a script (CI's
    runner may be one) inherits SIGINT ignored, and Python then never turns it into KeyboardInterrupt."""
    os.umask(0o022)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _headless(target_pid: int, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tui", "--pid", str(target_pid), *args],
                            env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_as_from_a_terminal)


@pytest.mark.slow
def test_ctrl_c_writes_a_snapshot_marked_partial_and_files_are_0600(spawn_target, tmp_path):
    target = spawn_target("busy_loop.py", "--seconds", "600", stdout=subprocess.PIPE, ready=ready)
    out, record = tmp_path / "snap.json", tmp_path / "run.jsonl"
    monitor = _headless(target.pid, "--snapshot", str(out), "--duration", "300", "--record", str(record))
    try:
        wait_for(lambda: len(frames_so_far(record)) >= 2, timeout=90)
        monitor.send_signal(signal.SIGINT)  # Ctrl-C long before the 300 s asked
        _, stderr = monitor.communicate(timeout=60)
    finally:
        if monitor.poll() is None:
            monitor.kill()
            monitor.wait()
    assert monitor.returncode == 130, stderr
    assert "Traceback" not in stderr
    snap = json.loads(out.read_text())
    assert snap["partial"] is True
    assert "SIGINT" in snap["partial_reason"] and "of the 300 s asked" in snap["partial_reason"]
    assert snap["duration_s"] < 300
    assert "PARTIAL snapshot" in stderr and str(out) in stderr
    assert _mode(out) == 0o600
    assert _mode(record) == 0o600


@pytest.mark.slow
def test_a_full_run_is_not_partial_and_an_existing_recording_becomes_0600(spawn_target, tmp_path):
    target = spawn_target("busy_loop.py", "--seconds", "600", stdout=subprocess.PIPE, ready=ready)
    out, record = tmp_path / "snap.json", tmp_path / "run.jsonl"
    record.write_text("")
    os.chmod(record, 0o644)
    monitor = _headless(target.pid, "--snapshot", str(out), "--duration", "2", "--record", str(record))
    _, stderr = monitor.communicate(timeout=120)
    assert monitor.returncode == 0, stderr
    snap = json.loads(out.read_text())
    assert snap["partial"] is False and snap["partial_reason"] is None
    assert "PARTIAL" not in stderr and "snapshot of PID" in stderr
    assert _mode(out) == 0o600
    assert _mode(record) == 0o600


@pytest.mark.slow
def test_mfu_into_a_closed_pipe_exits_quietly():
    # `gputop mfu ... | head -1`: the reader is gone before gputop writes (its end of the pipe closed before the
    # start, so the write fails every time, not only when head wins the race).
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "tui", "mfu", "--model", "gpt2-xl", "--tokens-per-iter",
                               "1048576", "--iter-time", "21", "--gpu", "H200"], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60, cwd=REPO,
                              env=dict(os.environ, PYTHONPATH=str(REPO)))
    finally:
        os.close(write_end)
    assert done.stderr == "", done.stderr  # no BrokenPipeError traceback, no "Exception ignored" line
    assert done.returncode == 1  # EXIT_INCOMPLETE: not all of it was written, and not a crash


@pytest.mark.slow
def test_mfu_piped_into_head_prints_one_line_and_nothing_else():
    shell = (f"{sys.executable} -m tui mfu --model gpt2-xl --tokens-per-iter 1048576 --iter-time 21 --gpu H200 "
             "| head -1")
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.stderr == "", done.stderr
    assert len(done.stdout.splitlines()) == 1
