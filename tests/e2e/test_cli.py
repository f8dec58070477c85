"""The gputop command end to end: bad input gets one line and exit 2; snapshots of real processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
from support.cli import assert_one_line_usage_error, gputop, ready
from support.paths import REPO
from support.processes import wait_for
from support.recorded import frames_so_far

pytestmark = pytest.mark.slow  # every test here runs the gputop command


def test_version():
    result = gputop("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("gputop ")


def test_no_such_pid_is_one_line_and_exit_2(tmp_path):
    result = gputop("--pid", "999999", "--snapshot", str(tmp_path / "x.json"))
    assert_one_line_usage_error(result, "999999")
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--pid", "1", "--duration", "0"], "--duration"),
        (["--pid", "1", "--duration", "-3"], "--duration"),
        (["--pid", "1", "--rate", "0"], "--rate"),
        (["--pid", "1", "--interval", "0.1"], "--interval"),
        (["--pid", "abc"], "--pid"),
        (["--frobnicate"], "unknown option --frobnicate"),
        (["--duration", "5"], "--pid"),  # sampling needs a PID; `gputop` alone lists jobs (test_job_picker.py)
    ],
)
def test_nonsense_flags_are_usage_errors(args, needle):
    assert_one_line_usage_error(gputop(*args), needle)


def test_snapshot_to_unwritable_folder_is_usage_error(spawn_target):
    target = spawn_target("busy_loop.py", stdout=subprocess.PIPE, ready=ready)
    result = gputop("--pid", str(target.pid), "--snapshot", "/no/such/folder/x.json", "--duration", "1")
    assert_one_line_usage_error(result, "/no/such/folder")


def test_replay_of_a_file_that_is_not_a_recording(tmp_path):
    bogus = tmp_path / "bogus.jsonl"
    bogus.write_text("hello\n")
    assert_one_line_usage_error(gputop("replay", str(bogus)), "not a gputop recording")
    assert_one_line_usage_error(gputop("replay", str(tmp_path / "missing.jsonl")), "cannot read")


def test_non_python_target_runs_with_stacks_unavailable(spawn_target):
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        result = gputop("--pid", str(sleeper.pid), "--snapshot", "-", "--duration", "2")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert result.returncode == 0, result.stderr
    snap = json.loads(result.stdout)
    assert snap["schema"] == "gputop.snapshot/2"
    assert snap["stacks"]["available"] is False
    assert "Python" in snap["stacks"]["reason"]
    assert snap["processes"][0]["pid"] == sleeper.pid
    assert snap["cpu"]["affinity_cpus"] >= 1
    assert snap["gpus"]["available"] is False and snap["gpus"]["reason"]


def test_target_that_exits_during_snapshot_is_written_as_exited(spawn_target, tmp_path):
    # The target ends when the test has seen it sampled, not after a fixed time: on a busy machine gputop
    # may take seconds just to start.
    target = spawn_target("busy_loop.py", "--seconds", "600", stdout=subprocess.PIPE, ready=ready)
    out, record = tmp_path / "snap.json", tmp_path / "run.jsonl"
    monitor = subprocess.Popen(
        [sys.executable, "-m", "tui", "--pid", str(target.pid), "--snapshot", str(out), "--duration", "120",
         "--record", str(record)],
        env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        wait_for(lambda: any(f.target.alive and f.stacks.samples for f in frames_so_far(record)), timeout=60)
        target.kill()
        target.wait(timeout=10)
        wait_for(lambda: any(not f.target.alive for f in frames_so_far(record)), timeout=30)
    finally:
        monitor.send_signal(signal.SIGTERM)  # headless: stop now and write the snapshot
        _, stderr = monitor.communicate(timeout=60)
    assert monitor.returncode == 0, stderr
    snap = json.loads(out.read_text())
    assert snap["target"]["alive"] is False
    assert snap["verdict"]["liveness"] == "exited"
    # the last readings taken while it lived are kept
    assert snap["processes"] and snap["processes"][0]["pid"] == target.pid
    assert snap["stacks"]["samples"] > 0


def test_snapshot_and_recording_keep_secrets_out(spawn_target, tmp_path):
    secrets = ["hf_SUPERSECRETTOKEN", "sk-APIKEYVALUE", "hunter2pass", "AWSSECRETVALUE", "wandbKEYVALUE"]
    target = spawn_target(
        "busy_loop.py", "--api-key=sk-APIKEYVALUE", "--password", "hunter2pass", "--lr", "3e-4",
        env={"HF_TOKEN": "hf_SUPERSECRETTOKEN", "AWS_SECRET_ACCESS_KEY": "AWSSECRETVALUE",
             "WANDB_API_KEY": "wandbKEYVALUE", "OMP_NUM_THREADS": "3"},
        stdout=subprocess.PIPE, ready=ready,
    )
    record = tmp_path / "run.jsonl"
    result = gputop("--pid", str(target.pid), "--snapshot", "-", "--duration", "2", "--record", str(record))
    assert result.returncode == 0, result.stderr
    written = result.stdout + record.read_text()
    for secret in secrets:
        assert secret not in written
    snap = json.loads(result.stdout)
    cmdline = snap["target"]["cmdline"]
    assert "--api-key=<redacted>" in cmdline and "3e-4" in cmdline
    assert cmdline[cmdline.index("--password") + 1] == "<redacted>"
    env = snap["target"]["environment"]
    assert env["OMP_NUM_THREADS"] == "3"
    assert env["HF_TOKEN"] == "<redacted>"


def test_record_then_replay_snapshot(spawn_target, tmp_path):
    target = spawn_target("busy_loop.py", stdout=subprocess.PIPE, ready=ready)
    record = tmp_path / "run.jsonl"
    assert gputop("--pid", str(target.pid), "--record", str(record), "--duration", "4").returncode == 0
    lines = record.read_text().splitlines()
    assert json.loads(lines[0])["schema"] == "gputop.recording/1"
    assert len(lines) >= 3
    result = gputop("replay", str(record), "--snapshot", "-")
    assert result.returncode == 0, result.stderr
    snap = json.loads(result.stdout)
    assert snap["target"]["pid"] == target.pid
    assert any(h["function"] == "train_step_for_gputop" for h in snap["stacks"]["hot_frames"])


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root (to start a target that drops to another user) and setpriv")
def test_untraceable_target_runs_and_says_how_to_fix(spawn_target):
    target = spawn_target("drop_privileges.py", stdout=subprocess.PIPE, ready=ready)
    # gputop as root but without CAP_SYS_PTRACE: like an ordinary user facing another user's process.
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run(
        ["setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace", sys.executable, "-m", "tui",
         "--pid", str(target.pid), "--snapshot", "-", "--duration", "2"],
        capture_output=True, text=True, timeout=60, env=env, cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    snap = json.loads(result.stdout)
    stacks = snap["stacks"]
    assert stacks["available"] is False
    assert "root" in stacks["reason"] and "SYS_PTRACE" in stacks["reason"]
    assert snap["processes"][0]["pid"] == target.pid  # CPU data still there


def test_snapshot_of_dataloader_lists_workers_and_their_hot_frames(spawn_target):
    target = spawn_target("dataloader_loop.py", "--num-workers", "2", "--item-ms", "20", "--step-ms", "5",
                          stdout=subprocess.PIPE, ready=ready, timeout=60)
    result = gputop("--pid", str(target.pid), "--snapshot", "-", "--duration", "4")
    assert result.returncode == 0, result.stderr
    snap = json.loads(result.stdout)
    workers = [p["pid"] for p in snap["processes"] if p["role"] == "dataloader_worker"]
    assert len(workers) == 2
    by_pid = {p["pid"]: p for p in snap["stacks"]["by_process"]}
    for pid in workers:
        functions = [h["function"] for h in by_pid[pid]["hot_frames"]]
        # The worker's own work: the dataset's __getitem__ or the function it burns CPU in (innermost, so
        # it ranks first by own samples; __getitem__ can rank below the worker loop's frames).
        assert any(f.endswith("__getitem__") or f == "burn_cpu_for_gputop" for f in functions), functions
