"""`gputop doctor` and the "cannot see" it feeds into the monitor: real targets, a real py-spy dump, gputop run
without CAP_SYS_PTRACE and as another user, inside `unshare --pid`, NVML through the fake and missing; the
verdict that says "cannot see" instead of guessing, in the snapshot, on stderr and in the TUI's header.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest
from support.fake_pynvml import FakeGpu, FakeNvml

from probes import doctor
from probes.diagnosis.verdict import diagnose
from probes.doctor import Check, DoctorReport, check_nvml, ptrace_expectation
from probes.frame import CpuReading, Frame, ProcessSample, StacksReading, TargetInfo
from probes.sensors.nvml import nvml_capabilities
from tui.commands.doctor import exit_status, format_report
from tui.exitcodes import EXIT_CANNOT_SEE, EXIT_LIMITED, EXIT_OK

REPO = Path(__file__).resolve().parents[2]
# A uid and gid no account uses: gputop run as "a third user", neither root nor the target's (nobody).
OTHER_UID = 41_999

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to start a target that drops to nobody")
needs_setpriv = pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv (util-linux)")


def gputop(*args: str, prefix: tuple[str, ...] = (), timeout: float = 90) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([*prefix, sys.executable, "-m", "tui", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=REPO, check=False)


WITHOUT_PTRACE_CAPABILITY = ("setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace")
AS_OTHER_USER = ("setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups")


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


def test_the_nccl_version_a_cuda_image_sets_is_not_shown_as_a_setting():
    """NVIDIA's CUDA images set NCCL_VERSION (seen on an H100 machine); NCCL never reads it."""
    from probes.doctor import collective_variables

    assert collective_variables({"NCCL_VERSION": "2.28.3-1", "NCCL_DEBUG": "WARN", "PATH": "/bin"}) == {
        "NCCL_DEBUG": "WARN"}


def test_an_unreadable_environment_says_why_and_not_another_user_to_root(monkeypatch):
    """Issue 38, item 14: `gputop --pid 1` as root in a container read "another user's process" for a container init
    the kernel refuses to root; the reason follows what was read: whose process, our user, our capability."""
    import probes.doctor as doctor

    status = {"text": "Name:\tprocess_api\nUid:\t0\t0\t0\t0\n"}
    monkeypatch.setattr(doctor, "read_text", lambda path: status["text"] if path.endswith("/status") else None)
    monkeypatch.setattr(doctor.os, "geteuid", lambda: 0)
    monkeypatch.setattr(doctor, "has_cap_sys_ptrace", lambda: True)
    check = doctor.check_job_environment(1)
    assert check.status == "limited" and "another user's" not in check.finding
    assert "the kernel refuses it even to root with CAP_SYS_PTRACE" in check.finding
    assert "inside its container" in check.fix
    monkeypatch.setattr(doctor, "has_cap_sys_ptrace", lambda: False)
    assert "gputop lacks CAP_SYS_PTRACE" in doctor.check_job_environment(1).finding
    monkeypatch.setattr(doctor.os, "geteuid", lambda: 1000)
    assert "another user's process: uid 0, gputop runs as uid 1000" in doctor.check_job_environment(1).finding
    status["text"] = None
    assert "the process is gone" in doctor.check_job_environment(1).finding
