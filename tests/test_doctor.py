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

import pynvml
import pytest
from support.fake_pynvml import FakeGpu, FakeNvml
from support.processes import wait_for

from probes import doctor
from probes.diagnosis.verdict import diagnose
from probes.doctor import Check, DoctorReport, check_nvml, ptrace_expectation
from probes.frame import CpuReading, Frame, ProcessSample, StacksReading, TargetInfo
from probes.sensors.nvml import nvml_capabilities
from tui.commands.doctor import exit_status, format_report
from tui.exitcodes import EXIT_CANNOT_SEE, EXIT_LIMITED, EXIT_OK

REPO = Path(__file__).resolve().parent.parent
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


@pytest.mark.parametrize("scope, capable, same_user, status", [
    ("0", False, True, "ok"),
    (None, False, True, "ok"),  # no Yama: the classic rules
    ("1", False, True, "cannot"),  # only a parent may trace
    ("1", True, False, "ok"),  # CAP_SYS_PTRACE lifts scope 1 and the user check
    ("0", False, False, "cannot"),  # another user's process
    ("2", False, True, "cannot"),  # admin only
    ("2", True, True, "ok"),
    ("3", True, True, "cannot"),  # nobody, not even root
])
def test_ptrace_expectation_follows_the_kernel_rules(scope, capable, same_user, status):
    found, finding, fix = ptrace_expectation(scope, capable, same_user)
    assert found == status, finding
    assert (fix is None) == (status == "ok")


def test_cap_sys_ptrace_is_bit_19_of_CapEff():
    assert doctor.has_cap_sys_ptrace("Name:\tx\nCapEff:\t000001ffffffffff\n") is True
    assert doctor.has_cap_sys_ptrace("CapEff:\t00000000a80425fb\n") is False  # Docker's default set: no bit 19
    assert doctor.has_cap_sys_ptrace("CapEff:\t0000000000080000\n") is True  # bit 19 alone
    assert doctor.has_cap_sys_ptrace("no such line\n") is None


@pytest.mark.parametrize("texts, build", [
    (["/usr/bin/python3.13t"], ("3.13", True)),  # the free-threaded build older py-spy cannot read
    (["/usr/local/bin/python3.11"], ("3.11", False)),
    (["/opt/conda/bin/python", "7f00-7f10 r-xp 0 08:01 1 /opt/conda/lib/libpython3.12.so.1.0\n"], ("3.12", False)),
    (["/usr/lib/x86_64-linux-gnu/libpython3.13t.so.1.0"], ("3.13", True)),
    (["/usr/bin/bash", "", "bash"], (None, False)),
])
def test_python_build_from_executable_or_maps(texts, build):
    assert doctor.python_build_in(texts) == build


def test_nvml_through_the_fake_reports_driver_names_gpm_and_clock_reasons():
    old = FakeGpu(name="NVIDIA A100-SXM4-80GB", gpm_supported=False,
                  errors={"nvmlDeviceGetCurrentClocksEventReasons": pynvml.NVML_ERROR_NOT_SUPPORTED,
                          "nvmlDeviceGetCurrentClocksThrottleReasons": pynvml.NVML_ERROR_NOT_SUPPORTED})
    fake = FakeNvml([FakeGpu(), old], driver_version="570.124.06")
    caps = nvml_capabilities(fake)
    assert caps.available and caps.driver_version == "570.124.06"
    assert [(g.name, g.gpm_supported, g.clock_event_reasons_supported) for g in caps.gpus] == [
        ("NVIDIA H200", True, True), ("NVIDIA A100-SXM4-80GB", False, False)]
    assert fake.init_count == 0  # shut down again
    checks = {c.name: c for c in check_nvml(caps)}
    assert checks["nvml"].status == "ok" and "NVIDIA H200" in checks["nvml"].finding
    assert checks["gpm"].status == "limited" and "GPU 1" in checks["gpm"].finding and checks["gpm"].fix
    assert checks["clock_events"].status == "limited" and "GPU 1" in checks["clock_events"].finding


@pytest.mark.parametrize("error, words", [
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML library not found"),
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver not loaded"),
    (pynvml.NVML_ERROR_NO_PERMISSION, "no permission"),
])
def test_nvml_missing_is_cannot_with_its_own_fix(error, words):
    checks = check_nvml(nvml_capabilities(FakeNvml([FakeGpu()], init_error=error)))
    assert [c.name for c in checks] == ["nvml"]  # no GPM or clock lines about GPUs nobody saw
    assert checks[0].status == "cannot" and words in checks[0].finding
    assert checks[0].fix and not checks[0].sees_process  # no GPU is not "cannot see the process"


@pytest.mark.slow
def test_no_such_pid_on_the_host_is_one_line_and_exit_2():
    if doctor.in_child_pid_namespace():
        pytest.skip("gputop runs in a container here: a missing PID may be one outside, which doctor explains")
    result = gputop("doctor", "--pid", "999999")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == ["gputop: no process with PID 999999 (check it with: ps -p 999999)"]


def test_exit_status_tells_ok_limited_and_cannot_see_the_process_apart():
    ok = Check("ptrace", "ok", "fine")
    no_gpu = Check("nvml", "cannot", "NVML library not found", "install the driver")
    denied = Check("stacks", "cannot", "ptrace denied", "run as root", sees_process=True)
    assert exit_status(DoctorReport(1, None, (ok,))) == EXIT_OK == 0
    assert exit_status(DoctorReport(1, None, (ok, no_gpu))) == EXIT_LIMITED == 3
    assert exit_status(DoctorReport(1, None, (ok, no_gpu, denied))) == EXIT_CANNOT_SEE == 4
    lines = format_report(DoctorReport(1, "python train.py", (ok, no_gpu, denied)))
    assert "PID 1 (python train.py)" in lines[0]
    assert any(line.split()[:2] == ["CANNOT", "stacks"] for line in lines)
    assert sum("fix:" in line for line in lines) == 2  # a fix under each line that is not ok


# --- the verdict says "cannot see" -----------------------------------------------------------------------


def blocked_frame(i: int, cpu_pct: float) -> Frame:
    return Frame(
        seq=i + 1, time=1000.0 + i, interval_s=1.0, target=TargetInfo(pid=4242, alive=True),
        processes=(ProcessSample(pid=4242, ppid=1, role="main", name="python", cpu_pct=cpu_pct,
                                 cpu_seconds=0.01 * i * cpu_pct),),
        cpu=CpuReading(effective_cpus=8.0, affinity_cpus=8),
        stacks=StacksReading(available=False, blocked="ptrace denied",
                             reason="py-spy may not read PID 4242: permission denied. Run gputop as root"),
    )


@pytest.mark.parametrize("cpu_pct", [0.0, 100.0])
def test_blocked_stacks_give_cannot_see_not_a_guess(cpu_pct):
    frames = [blocked_frame(i, cpu_pct) for i in range(8)]
    verdict = diagnose(frames)
    assert verdict.bottleneck == "cannot_see"
    assert verdict.evidence[0].startswith("cannot see: ptrace denied (py-spy may not read PID 4242")
    assert "root" in verdict.advice[0]
    spots = doctor.frame_blind_spots(frames[-1])
    assert [(s.name, s.status, s.sees_process) for s in spots] == [("stacks", "cannot", True)]


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
    assert result.returncode == (EXIT_OK if not not_ok else EXIT_LIMITED), result.stderr
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
    script = Path(__file__).parent / "targets" / "busy_loop.py"
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
    script = Path(__file__).parent / "targets" / "busy_loop.py"
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


def test_the_nccl_version_a_cuda_image_sets_is_not_shown_as_a_setting():
    """NVIDIA's CUDA images set NCCL_VERSION (seen on an H100 machine); NCCL never reads it."""
    from probes.doctor import collective_variables

    assert collective_variables({"NCCL_VERSION": "2.28.3-1", "NCCL_DEBUG": "WARN", "PATH": "/bin"}) == {
        "NCCL_DEBUG": "WARN"}
