"""`gputop doctor` and the "cannot see" it feeds into the monitor: real targets, a real py-spy dump, gputop run
without CAP_SYS_PTRACE and as another user, inside `unshare --pid`, NVML through the fake and missing; the
verdict that says "cannot see" instead of guessing, in the snapshot, on stderr and in the TUI's header.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.processes import wait_for

from probes import doctor
from probes.sensors.nvml import NO_GPU_SHORT_REASONS
from tui.exitcodes import EXIT_CANNOT_SEE, EXIT_LIMITED, EXIT_OK

REPO = Path(__file__).resolve().parents[2]
# A uid and gid no account uses: gputop run as "a third user", neither root nor the target's (nobody).
OTHER_UID = 41_999

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to start a target that drops to nobody")
needs_setpriv = pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv (util-linux)")


def ready(proc) -> bool:
    return proc.stdout.readline().strip() == b"ready"


def gputop(*args: str, prefix: tuple[str, ...] = (), timeout: float = 90) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([*prefix, sys.executable, "-m", "tui", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=REPO, check=False)


WITHOUT_PTRACE_CAPABILITY = ("setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace")
AS_OTHER_USER = ("setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups")


def checks_by_name(document: dict) -> dict[str, dict]:
    return {c["check"]: c for c in document["checks"]}


# --- pure parts ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_no_such_pid_on_the_host_is_one_line_and_exit_2():
    if doctor.in_child_pid_namespace():
        pytest.skip("gputop runs in a container here: a missing PID may be one outside, which doctor explains")
    result = gputop("doctor", "--pid", "999999")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == ["gputop: no process with PID 999999 (check it with: ps -p 999999)"]


# --- real processes -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_doctor_on_our_own_process_is_ok_but_for_the_gpu(spawn_target):
    target = spawn_target("busy_loop.py", "--seconds", "300", stdout=subprocess.PIPE, ready=ready)
    result = gputop("doctor", "--pid", str(target.pid), "--json")
    document = json.loads(result.stdout)
    assert document["schema"] == "gputop.doctor/1" and document["pid"] == target.pid
    assert "busy_loop.py" in document["command"]
    checks = checks_by_name(document)
    assert list(checks)[:3] == ["ptrace", "stacks", "pid_namespace"]
    for check in document["checks"]:
        assert set(check) == {"check", "status", "finding", "fix", "details"}
        assert check["status"] in ("ok", "limited", "cannot") and check["finding"]
        assert (check["fix"] is None) == (check["status"] == "ok"), check
    # A real py-spy dump read it, and the Python version came from the process itself.
    assert checks["stacks"]["status"] == "ok" and "read 1 thread(s)" in checks["stacks"]["finding"]
    assert checks["stacks"]["details"]["python"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert checks["ptrace"]["status"] == "ok" and checks["pid_namespace"]["status"] == "ok"
    assert checks["job_environment"]["status"] == "ok"
    assert checks["cgroup"]["details"]["version"] in ("v1", "v2")
    not_ok = {name for name, c in checks.items() if c["status"] != "ok"}
    assert not_ok <= {"nvml", "gpm", "clock_events", "cgroup"}, not_ok  # what this machine lacks, not the process
    assert document["cannot_see_process"] is False
    # No GPU on this machine is a finding, not a failure: only what has a fix makes the status
    to_fix = {name for name in not_ok
              if not (name == "nvml" and checks[name]["details"]["reason"] in NO_GPU_SHORT_REASONS)}
    assert document["status"] == ("ok" if not to_fix else "limited" if "cannot" not in
                                  {checks[name]["status"] for name in to_fix} else "cannot")
    assert result.returncode == (EXIT_OK if not to_fix else EXIT_LIMITED), result.stderr
    text = gputop("doctor", "--pid", str(target.pid))
    assert text.returncode == result.returncode and "Traceback" not in text.stderr
    assert text.stdout.splitlines()[0].startswith(f"gputop doctor: PID {target.pid} (python")


@pytest.mark.slow
def test_doctor_on_a_process_that_is_not_python_cannot_see_its_stacks():
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        result = gputop("doctor", "--pid", str(sleeper.pid), "--json")
        assert result.returncode == EXIT_CANNOT_SEE, result.stderr
        stacks = checks_by_name(json.loads(result.stdout))["stacks"]
        assert stacks["status"] == "cannot" and "not a Python process" in stacks["finding"]
        assert "Python training process" in stacks["fix"]
    finally:
        sleeper.kill()
        sleeper.wait(timeout=10)


@pytest.mark.slow
def test_flight_recorder_variables_of_a_two_rank_job(spawn_target):
    ranks = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "NCCL_DEBUG": "WARN"}
    without = spawn_target("busy_loop.py", "--seconds", "300", stdout=subprocess.PIPE, ready=ready, env=ranks)
    with_recorder = spawn_target("busy_loop.py", "--seconds", "300", stdout=subprocess.PIPE, ready=ready,
                                 env={**ranks, "TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"})
    off = checks_by_name(json.loads(gputop("doctor", "--pid", str(without.pid), "--json").stdout))
    on = checks_by_name(json.loads(gputop("doctor", "--pid", str(with_recorder.pid), "--json").stdout))
    assert off["job_environment"]["status"] == "limited"
    assert "TORCH_FR_BUFFER_SIZE" in off["job_environment"]["fix"]
    assert off["job_environment"]["details"]["variables"] == {"NCCL_DEBUG": "WARN"}
    assert on["job_environment"]["status"] == "ok"
    assert on["job_environment"]["details"]["variables"]["TORCH_FR_BUFFER_SIZE"] == "2000"


@pytest.mark.slow
def test_flight_recorder_variables_are_read_from_the_rank_under_a_launcher():
    # bash as the launcher: it has no WORLD_SIZE, its Python child (the rank) has.
    script = Path(__file__).parents[1] / "targets" / "busy_loop.py"
    launcher = subprocess.Popen(
        ["bash", "-c", f"WORLD_SIZE=2 RANK=0 NCCL_DEBUG=INFO {sys.executable} {script} --seconds 300; true"],
        stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        import psutil

        rank = wait_for(lambda: next((p for p in psutil.Process(launcher.pid).children()
                                      if "busy_loop.py" in " ".join(p.cmdline())), None), timeout=30)
        checks = checks_by_name(json.loads(gputop("doctor", "--pid", str(launcher.pid), "--json").stdout))
        environment = checks["job_environment"]
        assert environment["status"] == "limited", environment  # 2 ranks, no Flight Recorder
        assert environment["details"]["read_from_pid"] == rank.pid
        assert environment["details"]["variables"] == {"NCCL_DEBUG": "INFO"}
        assert f"read from its rank process PID {rank.pid}" in environment["finding"]
    finally:
        from support.processes import stop_process_tree

        stop_process_tree(launcher)


@pytest.mark.slow
@needs_root
@needs_setpriv
@pytest.mark.parametrize("runner", [WITHOUT_PTRACE_CAPABILITY, AS_OTHER_USER], ids=["root-without-cap", "third-user"])
def test_doctor_on_a_process_it_may_not_trace(spawn_target, runner):
    target = spawn_target("drop_privileges.py", stdout=subprocess.PIPE, ready=ready)
    result = gputop("doctor", "--pid", str(target.pid), "--json", prefix=runner)
    assert result.returncode == EXIT_CANNOT_SEE, result.stderr
    assert "Traceback" not in result.stderr
    document = json.loads(result.stdout)
    assert document["cannot_see_process"] is True and document["status"] == "cannot"
    checks = checks_by_name(document)
    ptrace = checks["ptrace"]
    assert ptrace["status"] == "cannot" and ptrace["finding"].startswith("ptrace denied")
    assert ptrace["details"]["cap_sys_ptrace"] is False and ptrace["details"]["target_user"] == "nobody"
    assert "SYS_PTRACE" in ptrace["fix"]
    assert checks["stacks"]["status"] == "cannot"
    # Why its environment is unreadable, as it is (issue 38, item 14): whose process it is and who gputop runs as.
    # Root without the capability still reads it (environ is a read, not a trace).
    if runner is AS_OTHER_USER:
        environment = checks["job_environment"]
        assert f"another user's process: uid 65534, gputop runs as uid {OTHER_UID}" in environment["finding"]
    text = gputop("doctor", "--pid", str(target.pid), prefix=runner)
    assert text.returncode == EXIT_CANNOT_SEE
    assert "CANNOT   ptrace" in text.stdout and "fix: " in text.stdout
    assert text.stdout.rstrip().endswith("fix the CANNOT lines first")


@pytest.mark.slow
@needs_root
@needs_setpriv
@pytest.mark.parametrize("runner", [WITHOUT_PTRACE_CAPABILITY, AS_OTHER_USER], ids=["root-without-cap", "third-user"])
def test_headless_attach_without_ptrace_says_cannot_see_not_idle(spawn_target, runner, tmp_path):
    # A sleeping target: with no stacks, schedstat alone used to make it "idle".
    target = spawn_target("drop_privileges.py", "--sleep", stdout=subprocess.PIPE, ready=ready)
    record = tmp_path / "run.jsonl"
    # The other user may not write into tmp_path: only root without the capability records.
    record_args = ("--record", str(record)) if runner is WITHOUT_PTRACE_CAPABILITY else ()
    result = gputop("--pid", str(target.pid), "--snapshot", "-", "--duration", "3", *record_args, prefix=runner)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    snapshot = json.loads(result.stdout)
    verdict = snapshot["verdict"]
    assert verdict["bottleneck"] == "cannot_see", verdict
    assert verdict["evidence"][0].startswith("cannot see: ptrace denied (py-spy may not read PID")
    assert snapshot["stacks"]["available"] is False
    stacks = next(c for c in snapshot["cannot_see"] if c["check"] == "stacks")
    assert stacks["status"] == "cannot" and "ptrace denied" in stacks["finding"] and stacks["fix"]
    assert snapshot["processes"][0]["pid"] == target.pid  # the rest is still read
    told = [line for line in result.stderr.splitlines()
            if line.startswith("gputop: cannot see (stacks): ptrace denied")]
    assert len(told) == 1, result.stderr  # said on stderr, once
    if record_args:
        assert_header_says_cannot_see(record, target.pid)


def assert_header_says_cannot_see(record: Path, pid: int) -> None:
    """The recording, replayed into the TUI: the header's line says what hides the stacks."""
    import asyncio

    from probes.outputs.recording import read_recording
    from tui.app import JobNote, make_app

    async def check() -> str:
        app = make_app(replay_frames=list(read_recording(record)), clock=lambda: 0.0)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            note = app.query_one(JobNote)
            assert note.display
            return str(app.job_note_text())

    text = asyncio.run(check())
    assert f"cannot see PID {pid}'s stacks: ptrace denied" in text and f"gputop doctor --pid {pid}" in text


@pytest.mark.slow
@needs_root
def test_doctor_inside_a_pid_namespace_cannot_see_a_target_outside(spawn_target):
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"unshare --pid --mount-proc does not work here: {probe.stderr.decode().strip()}")
    target = spawn_target("busy_loop.py", "--seconds", "300", stdout=subprocess.PIPE, ready=ready)
    inside = ("unshare", "--pid", "--fork", "--mount-proc")
    result = gputop("doctor", "--pid", str(target.pid), "--json", prefix=inside)
    assert result.returncode == EXIT_CANNOT_SEE, result.stderr
    namespace = checks_by_name(json.loads(result.stdout))["pid_namespace"]
    assert namespace["status"] == "cannot" and "child PID namespace" in namespace["finding"]
    assert namespace["details"]["in_child_namespace"] is True and "nsenter" in namespace["fix"]
    # Without a PID: what gputop itself can see from in there.
    alone = gputop("doctor", "--json", prefix=inside)
    assert checks_by_name(json.loads(alone.stdout))["pid_namespace"]["status"] == "limited"
    assert alone.returncode in (EXIT_LIMITED,)


@pytest.mark.slow
@needs_root
def test_doctor_outside_sees_a_target_in_a_child_namespace(spawn_target, tmp_path):
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"unshare --pid --mount-proc does not work here: {probe.stderr.decode().strip()}")
    script = Path(__file__).parents[1] / "targets" / "busy_loop.py"
    inner = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(script),
                              "--seconds", "300"], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert ready(inner)
        import psutil

        python = wait_for(lambda: next((p for p in psutil.Process(inner.pid).children(recursive=True)
                                        if "busy_loop.py" in " ".join(p.cmdline())), None), timeout=30)
        document = json.loads(gputop("doctor", "--pid", str(python.pid), "--json").stdout)
        namespace = checks_by_name(document)["pid_namespace"]
        assert namespace["status"] == "ok" and "PID namespace below ours (PID 1 inside it)" in namespace["finding"]
        assert checks_by_name(document)["stacks"]["status"] == "ok"  # py-spy reads it across the namespace
    finally:
        from support.processes import stop_process_tree

        stop_process_tree(inner)
