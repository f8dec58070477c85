"""What gputop can and cannot see here, and how to fix each: the checks behind `gputop doctor` and behind the
"cannot see" line of the attach TUI, the headless run and the snapshot.

Each check asks the module that owns its outside system (py-spy: probes/sampling/pyspy_binary.py, NVML:
probes/sensors/nvml.py, cgroups: probes/sensors/cgroup.py, a process's environment:
probes/sensors/process_facts.py, small /proc files: probes/sensors/textfiles.py) and turns the answer into a
:class:`Check`: ok / limited / cannot, one line of what it means and one of how to fix it. Nothing here runs py-spy
or touches pynvml itself, and nothing raises.

No NVIDIA GPU on the machine (no driver, no device) is a finding, not a failure: the check says so (its
``brief``) and counts in no report's status, since gputop watches a CPU job all the same. A GPU that is there but
unreadable (a permission, a driver updated without a reboot) has a fix and counts.

"Cannot see the process" (:attr:`DoctorReport.cannot_see_process`) means gputop cannot read the target's
stacks at all (ptrace denied, py-spy missing or unable to read that Python, the PID not visible from here):
the verdict would then be a guess, so the monitor says "cannot see" instead of one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import psutil

from probes.redact import redact_environ
from probes.sampling.pyspy_binary import DumpCheck, dump_once, find_pyspy, install_hint, ptrace_scope, pyspy_version
from probes.sensors.cgroup import CgroupCpuProbe
from probes.sensors.nvml import NO_GPU_SHORT_REASONS, NvmlCapabilities, nvml_capabilities
from probes.sensors.process_facts import (
    parse_environ,
    process_cmdline,
    process_executable,
    read_environ,
    short_command,
    torch_distributed_env,
)
from probes.sensors.proctree import child_pids
from probes.sensors.textfiles import read_text

CheckStatus = Literal["ok", "limited", "cannot"]
STATUS_ORDER: tuple[CheckStatus, ...] = ("ok", "limited", "cannot")

CAP_SYS_PTRACE_BIT = 19  # linux/capability.h
# The inode of the initial PID namespace (PROC_PID_INIT_INO in the kernel): any other means a container or an
# `unshare --pid`, where gputop sees only the processes of that namespace.
INITIAL_PID_NAMESPACE_INODE = 0xEFFFFFFC
# python3.13t / libpython3.13t.so: the free-threaded (no GIL) build.
_PYTHON_BUILD = re.compile(r"(?:^|/)(?:lib)?python(\d+\.\d+)(t?)(?:\.so|$|[^\w.])")
# Flight Recorder (torch 2.13 reads TORCH_FR_BUFFER_SIZE, falling back to TORCH_NCCL_TRACE_BUFFER_SIZE) and the
# NCCL settings worth knowing when a job hangs in a collective.
FLIGHT_RECORDER_VARIABLES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
_COLLECTIVE_VARIABLE_PREFIXES = ("TORCH_FR_", "TORCH_NCCL_", "NCCL_", "TORCH_DISTRIBUTED_DEBUG")
# Set by NVIDIA's CUDA container images to say which NCCL they ship (seen on an H100 machine: 2.28.3-1); NCCL
# does not read it, so it is not a setting of the job.
_NOT_SETTINGS = frozenset({"NCCL_VERSION"})


@dataclass(frozen=True)
class Check:
    """One thing gputop may or may not be able to see, with what it means and how to fix it."""

    name: str  # stable key: "ptrace", "stacks", "nvml", "gpm", "clock_events", "cgroup", "pid_namespace", ...
    status: CheckStatus
    finding: str  # one line: what was found and what it means for gputop
    fix: str | None = None  # one line: how to lift the limit; None when there is nothing to do
    sees_process: bool = False  # "cannot" here means gputop cannot see the process's stacks at all
    # One short line said instead of the finding and the fix where they would be noise on every run: no GPU on
    # this machine, nothing to fix. None: say the finding and the fix.
    brief: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def nothing_to_fix(self) -> bool:
        """What the machine is, not what fails (no GPU here: the one line `brief` says): in no report's status."""
        return self.brief is not None


@dataclass(frozen=True)
class DoctorReport:
    pid: int | None
    command: str | None  # the target's command line, shortened
    checks: tuple[Check, ...]

    @property
    def status(self) -> CheckStatus:
        """The worst of the checks that have something to fix (a machine without a GPU is ok)."""
        return max((c.status for c in self.checks if not c.nothing_to_fix), key=STATUS_ORDER.index, default="ok")

    @property
    def cannot_see_process(self) -> bool:
        return any(c.sees_process and c.status == "cannot" for c in self.checks)

    @property
    def blind_spots(self) -> tuple[Check, ...]:
        """The checks that are not ok, worst first."""
        return tuple(sorted((c for c in self.checks if c.status != "ok"),
                            key=lambda c: -STATUS_ORDER.index(c.status)))

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": "gputop.doctor/1",
            "pid": self.pid,
            "command": self.command,
            "status": self.status,
            "cannot_see_process": self.cannot_see_process,
            "checks": [check_dict(c) for c in self.checks],
        }


def check_dict(check: Check) -> dict[str, Any]:
    return {"check": check.name, "status": check.status, "finding": check.finding, "fix": check.fix,
            "details": dict(check.details)}


def diagnose_access(pid: int | None = None, *, nvml: Any = None, dump: bool = True) -> DoctorReport:
    """Every check, for `pid` when given (else gputop's own side only). nvml: a pynvml-like module (tests pass
    a fake); dump: run a real py-spy dump of the target (the doctor does; a caller that samples anyway may not)."""
    checks: list[Check] = []
    command = None
    if pid is not None and not os.path.exists(f"/proc/{pid}"):
        checks.append(check_pid_namespace(pid))
        checks.extend(check_pyspy_binary())
    elif pid is not None:
        command = short_command(process_cmdline(pid)) or None
        dumped = dump_once(pid) if dump else None
        checks.append(check_ptrace(pid, dumped))
        checks.append(check_stacks(pid, dumped))
        checks.append(check_pid_namespace(pid))
    else:
        checks.append(check_ptrace(None, None))
        checks.extend(check_pyspy_binary())
        checks.append(check_pid_namespace(None))
    checks.extend(check_nvml(nvml_capabilities(nvml)))
    if pid is not None and os.path.exists(f"/proc/{pid}"):
        checks.append(check_cgroup(pid))
        checks.append(check_job_environment(pid))
    return DoctorReport(pid=pid, command=command, checks=tuple(checks))


# --- ptrace ------------------------------------------------------------------------------------------------


def has_cap_sys_ptrace(status_text: str | None = None) -> bool | None:
    """Whether CAP_SYS_PTRACE is in our effective capabilities (/proc/self/status CapEff); None if unreadable."""
    text = status_text if status_text is not None else read_text("/proc/self/status")
    match = re.search(r"^CapEff:\s*([0-9a-fA-F]+)", text or "", re.MULTILINE)
    if match is None:
        return None
    return bool(int(match.group(1), 16) >> CAP_SYS_PTRACE_BIT & 1)


def _user_name(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (KeyError, ImportError):
        return str(uid)


def _target_uids(pid: int) -> tuple[int, ...] | None:
    try:
        return tuple(psutil.Process(pid).uids())  # from /proc/PID/status, readable by anyone
    except psutil.Error:
        return None


def ptrace_expectation(scope: str | None, capable: bool | None,
                       same_user: bool | None) -> tuple[CheckStatus, str, str | None]:
    """What the kernel's rules predict (status, why, fix) before anything is tried. Pure, for tests."""
    scope_text = "no Yama (ptrace_scope not set)" if scope is None else f"kernel.yama.ptrace_scope={scope}"
    if scope == "3":
        return ("cannot", f"{scope_text}: no process may be traced, not even by root",
                "ptrace_scope 3 cannot be lowered at run time: set kernel.yama.ptrace_scope=0 at boot and reboot")
    if capable:
        return "ok", f"{scope_text}; gputop has CAP_SYS_PTRACE, so it may trace any process", None
    if scope == "2":
        return ("cannot", f"{scope_text}: only CAP_SYS_PTRACE may trace, and gputop lacks it",
                "run gputop as root (in Docker: --cap-add SYS_PTRACE), or sysctl kernel.yama.ptrace_scope=0")
    if same_user is False:
        return ("cannot", f"the target runs as another user and gputop lacks CAP_SYS_PTRACE ({scope_text})",
                "run gputop as the target's user, or as root (in Docker: --cap-add SYS_PTRACE)")
    if scope == "1":
        return ("cannot", f"{scope_text}: only a parent may trace, and gputop is not the target's parent",
                "sysctl kernel.yama.ptrace_scope=0, or run gputop as root (in Docker: --cap-add SYS_PTRACE)")
    if same_user is None:  # no PID given: gputop's side only
        return ("limited", f"{scope_text}; without CAP_SYS_PTRACE gputop may trace only its own user's processes",
                "to watch other users' jobs run gputop as root (in Docker: --cap-add SYS_PTRACE)")
    return "ok", f"{scope_text}; the target runs as gputop's user", None


def check_ptrace(pid: int | None, dumped: DumpCheck | None) -> Check:
    scope = ptrace_scope()
    capable = has_cap_sys_ptrace()
    uids = _target_uids(pid) if pid is not None else None
    same_user = None if uids is None else set(uids) == {os.geteuid()}
    status, finding, fix = ptrace_expectation(scope, capable, same_user)
    details = {"ptrace_scope": scope, "cap_sys_ptrace": capable, "our_user": _user_name(os.geteuid()),
               "target_user": _user_name(uids[0]) if uids else None}
    if dumped is not None:  # what the kernel actually allowed outranks the prediction
        if dumped.kind == "permission":
            why = finding if status != "ok" else (
                f"the target is non-dumpable (it changed user, or called prctl PR_SET_DUMPABLE 0) or holds "
                f"capabilities gputop lacks ({finding})")
            status, finding = "cannot", f"ptrace denied: py-spy may not attach to PID {pid}; {why}"
            fix = fix or "run gputop as root with CAP_SYS_PTRACE (in Docker: --cap-add SYS_PTRACE)"
        elif dumped.ok and status != "ok":
            status, finding, fix = "ok", f"py-spy could attach although {finding}", None
    return Check("ptrace", status, finding, fix, sees_process=pid is not None, details=details)


# --- py-spy and the target's Python --------------------------------------------------------------------------


def python_build(pid: int) -> tuple[str | None, bool]:
    """(version "3.13", free-threaded) of the target's Python, from its executable, the libraries it mapped
    (readable with ptrace rights only) or its command line; (None, False) when none says."""
    cmdline = process_cmdline(pid)
    return python_build_in([process_executable(pid) or "", read_text(f"/proc/{pid}/maps") or "",
                            cmdline[0] if cmdline else ""])


def python_build_in(texts: list[str]) -> tuple[str | None, bool]:
    """(version, free-threaded) from the first of `texts` (an executable path, /proc/PID/maps, argv[0]) that
    names a Python: "/usr/bin/python3.13t" is ("3.13", True), "libpython3.11.so.1.0" ("3.11", False)."""
    for text in texts:
        match = _PYTHON_BUILD.search(text)
        if match:
            return match.group(1), match.group(2) == "t"
    return None, False


def check_pyspy_binary() -> list[Check]:
    path = find_pyspy()
    if path is None:
        return [Check("stacks", "cannot", "py-spy is not installed: no stacks, so no verdict on where time goes",
                      install_hint(), sees_process=True)]
    version = pyspy_version(path)
    return [Check("stacks", "ok", f"py-spy {version or '(version unknown)'} at {path}",
                  details={"pyspy": path, "pyspy_version": version})]


def check_stacks(pid: int, dumped: DumpCheck | None) -> Check:
    path = find_pyspy()
    version = pyspy_version(path) if path else None
    python, free_threaded = python_build(pid)
    build = (f"Python {python}{' free-threaded' if free_threaded else ''}" if python else "Python version unknown")
    details = {"pyspy": path, "pyspy_version": version, "python": python, "free_threaded": free_threaded}
    if path is None:
        return Check("stacks", "cannot", "py-spy is not installed: no stacks, so no verdict on where time goes",
                     install_hint(), sees_process=True, details=details)
    if dumped is None:
        status: CheckStatus = "limited" if free_threaded else "ok"
        return Check("stacks", status, f"py-spy {version}; target {build} (not tried)",
                     "free-threaded builds need a py-spy that supports them: pip install -U py-spy"
                     if free_threaded else None, details=details)
    if dumped.ok:
        return Check("stacks", "ok", f"py-spy {version} read {dumped.threads} thread(s) of PID {pid} ({build})",
                     details=details)
    if dumped.kind == "permission":
        return Check("stacks", "cannot", f"py-spy {version} may not read PID {pid}: ptrace denied (see ptrace)",
                     "see the ptrace line", sees_process=True, details=details)
    if free_threaded:
        return Check("stacks", "cannot", f"py-spy {version} cannot read {build}: {dumped.reason}",
                     "free-threaded builds (python3.13t) need a py-spy that supports them: pip install -U py-spy, "
                     "or run the job on the standard build", sees_process=True, details=details)
    if dumped.kind == "not_python":
        return Check("stacks", "cannot", f"py-spy {version}: {dumped.reason}",
                     "give gputop the PID of the Python training process or its launcher (ps -ef | grep python)",
                     sees_process=True, details=details)
    return Check("stacks", "cannot", f"py-spy {version}: {dumped.reason}",
                 "upgrade py-spy (pip install -U py-spy) if this Python is newer than it knows",
                 sees_process=True, details=details)


# --- NVML ----------------------------------------------------------------------------------------------------


def _nvml_fix(reason: str) -> str:
    lowered = reason.lower()
    if "nvidia-ml-py" in lowered:
        return "pip install nvidia-ml-py in gputop's environment"
    if "permission" in lowered:
        return "give gputop's user access to /dev/nvidia* (the video group, or the container's device list)"
    if "version" in lowered:
        return "reboot (or reload the nvidia kernel module) so the driver and NVML match"
    return ("run gputop where the GPUs and NVIDIA driver are; in a container pass them in "
            "(docker run --gpus all, NVIDIA Container Toolkit)")


def _no_gpu_brief(reason: str) -> str | None:
    """The one line for a machine where NVML finds no GPU to use (a laptop, a CPU node); None for the reasons
    that have a fix worth reading (a permission, a driver updated without a reboot, nvidia-ml-py missing)."""
    short = NO_GPU_SHORT_REASONS.get(reason)
    return None if short is None else f"no NVIDIA GPU here (NVML: {short}): GPU readings and GPU rules are off"


def check_nvml(caps: NvmlCapabilities) -> list[Check]:
    if not caps.available:
        reason = caps.reason or "NVML unavailable"
        return [Check("nvml", "cannot", f"{reason}: no GPU clocks, power, utilisation or memory",
                      _nvml_fix(reason), brief=_no_gpu_brief(reason), details={"reason": reason})]
    gpus = [{"index": g.index, "name": g.name, "gpm": g.gpm_supported,
             "clock_event_reasons": g.clock_event_reasons_supported} for g in caps.gpus]
    names = ", ".join(f"{g.index}: {g.name or '?'}" for g in caps.gpus)
    checks = [Check("nvml", "ok", f"driver {caps.driver_version or '?'}, {len(caps.gpus)} GPU(s) ({names})",
                    details={"driver_version": caps.driver_version, "gpus": gpus})]
    checks.append(_per_gpu_check(
        "gpm", [g.index for g in caps.gpus if not g.gpm_supported],
        ok="GPM on every GPU: SM active, occupancy, tensor and DRAM use measured",
        missing="GPM unsupported on GPU {gpus}: SM activity and tensor use are judged from clocks and power, not "
                "measured",
        fix="GPM needs a Hopper or newer GPU with MIG off; nothing to change on older GPUs"))
    checks.append(_per_gpu_check(
        "clock_events", [g.index for g in caps.gpus if not g.clock_event_reasons_supported],
        ok="clock event reasons readable: throttling comes with its cause",
        missing="clock event reasons unavailable on GPU {gpus}: a throttled GPU is told from its clocks alone, "
                "without the cause (power cap, thermal)",
        fix="a driver from 535 on reports them: update the NVIDIA driver and nvidia-ml-py"))
    return checks


def _per_gpu_check(name: str, lacking: list[int], *, ok: str, missing: str, fix: str) -> Check:
    """A capability every GPU should have: ok, or limited on the GPUs (by index) that lack it."""
    if not lacking:
        return Check(name, "ok", ok)
    return Check(name, "limited", missing.format(gpus=", ".join(str(i) for i in lacking)), fix)


# --- cgroup --------------------------------------------------------------------------------------------------


def check_cgroup(pid: int) -> Check:
    reading = CgroupCpuProbe(pid).read()
    details = {"version": reading.cgroup_version, "path": reading.cgroup_path, "quota_cpus": reading.quota_cpus,
               "throttling_stats": reading.nr_periods is not None,
               "pressure": reading.pressure_some_avg10 is not None, "reason": reading.reason}
    if reading.cgroup_version is None:
        return Check("cgroup", "cannot",
                     f"the target's cgroup could not be read ({reading.reason or 'no cgroup mount'}): "
                     "a CPU quota or its throttling would go unseen",
                     "mount /sys/fs/cgroup read-only into gputop's container, or run gputop on the host",
                     details=details)
    quota = "no CPU quota" if reading.quota_cpus is None else f"quota {reading.quota_cpus:g} CPUs"
    missing = []
    if reading.nr_periods is None:
        missing.append("throttling counters (cpu.stat)")
    if reading.pressure_some_avg10 is None:
        missing.append("CPU pressure (PSI)")
    where = f"cgroup {reading.cgroup_version} {reading.cgroup_path or '?'}: {quota}"
    if missing:
        return Check("cgroup", "limited", f"{where}; cannot read {' or '.join(missing)}",
                     "PSI needs a kernel with CONFIG_PSI and without psi=0 on its command line"
                     if len(missing) == 1 and "PSI" in missing[0]
                     else "mount the cgroup tree into gputop's container, or run gputop on the host",
                     details=details)
    return Check("cgroup", "ok", f"{where}; throttling counters and CPU pressure readable", details=details)


# --- PID namespace -------------------------------------------------------------------------------------------


def _namespace_inode(link: str | None) -> int | None:
    match = re.search(r"\[(\d+)\]", link or "")
    return int(match.group(1)) if match else None


def _readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _nspids(pid: int) -> tuple[int, ...]:
    match = re.search(r"^NSpid:\s*(.+)$", read_text(f"/proc/{pid}/status") or "", re.MULTILINE)
    return tuple(int(n) for n in match.group(1).split()) if match else ()


def in_child_pid_namespace() -> bool:
    """Whether gputop runs in a PID namespace below the host's (a container, `unshare --pid`)."""
    ours = _namespace_inode(_readlink("/proc/self/ns/pid"))
    return ours is not None and ours != INITIAL_PID_NAMESPACE_INODE


def check_pid_namespace(pid: int | None) -> Check:
    ours = _namespace_inode(_readlink("/proc/self/ns/pid"))
    in_child = in_child_pid_namespace()
    details: dict[str, Any] = {"our_namespace": ours, "in_child_namespace": in_child}
    outside = "run gputop on the host, or in the job's container (docker exec; nsenter --target PID --pid --mount)"
    if pid is not None and not os.path.exists(f"/proc/{pid}"):
        where = ("gputop runs in a child PID namespace (a container or unshare --pid) and sees only its processes"
                 if in_child else "no such process")
        return Check("pid_namespace", "cannot", f"PID {pid} is not visible here: {where}",
                     outside if in_child else "check the PID (gputop --list, ps -ef)", sees_process=True,
                     details=details)
    if pid is not None:
        theirs = _namespace_inode(_readlink(f"/proc/{pid}/ns/pid"))  # needs ptrace-read rights
        nspids = _nspids(pid)  # anyone may read it: more than one entry means a namespace below ours
        details.update(target_namespace=theirs, nspid=list(nspids))
        if (theirs is not None and theirs != ours) or len(nspids) > 1:
            inner = f" (PID {nspids[-1]} inside it)" if len(nspids) > 1 else ""
            return Check("pid_namespace", "ok",
                         f"the target runs in a PID namespace below ours{inner}; gputop sees it by its PID here",
                         details=details)
    if in_child:
        return Check("pid_namespace", "limited",
                     "gputop runs in a child PID namespace (a container): it sees only this namespace's processes, "
                     "and NVML's host PIDs map only to those",
                     outside, details=details)
    return Check("pid_namespace", "ok", "gputop and the target share the PID namespace" if pid is not None
                 else "gputop runs in the host's PID namespace", details=details)


# --- the job's environment -----------------------------------------------------------------------------------


def collective_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """The job's Flight Recorder and NCCL settings, redacted like every environment gputop shows."""
    wanted = {k: v for k, v in sorted(environ.items())
              if k.startswith(_COLLECTIVE_VARIABLE_PREFIXES) and k not in _NOT_SETTINGS}
    return redact_environ(wanted)


def _environment_unreadable_why(pid: int) -> tuple[str, str]:
    """Why /proc/PID/environ could not be read, and what to do: the process is gone; it is another user's; gputop
    lacks CAP_SYS_PTRACE, which reading a process that is not dumpable needs (one that changed its user); or the
    kernel refused even with it (a process holding capabilities gputop's lacks, or in another user namespace, as a
    container's init). "another user's process" said to root of PID 1 was a false cause."""
    status = read_text(f"/proc/{pid}/status")
    if status is None:
        return "the process is gone", "check the PID: gputop --list shows the training processes it finds"
    uid = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("Uid:")), None)
    me = os.geteuid()
    if uid is not None and me != 0 and uid != me:
        return (f"another user's process: uid {uid}, gputop runs as uid {me}",
                "run gputop as the job's user or as root")
    if has_cap_sys_ptrace() is False:
        return ("gputop lacks CAP_SYS_PTRACE, which reading a process that changed its user (not dumpable) needs",
                "give gputop CAP_SYS_PTRACE (docker run --cap-add SYS_PTRACE), or run it as the job's user")
    who = "root" if me == 0 else "its own user"
    return (f"the kernel refuses it even to {who} with CAP_SYS_PTRACE: the process holds capabilities gputop's "
            "lacks or runs in another user namespace, as a container's init does",
            "if it is the training job, run gputop where the job runs (inside its container); gputop --list shows "
            "the jobs it can see")


def check_job_environment(pid: int) -> Check:
    raw = read_text(f"/proc/{pid}/environ")
    if raw is None:
        why, fix = _environment_unreadable_why(pid)
        return Check("job_environment", "limited",
                     f"the target's environment is unreadable ({why}): its launcher, rank and Flight Recorder "
                     "settings are unknown", fix)
    environ = parse_environ(raw)
    world = torch_distributed_env(environ).world_size
    read_from = pid
    if world is None:  # a launcher (torchrun's agent, bash, srun): its ranks carry the job's variables
        rank = _first_rank_below(pid)
        if rank is not None:
            read_from, environ = rank
            world = torch_distributed_env(environ).world_size
    variables = collective_variables(environ)
    details = {"variables": variables, "world_size": world, "read_from_pid": read_from}
    shown = ", ".join(f"{k}={v}" for k, v in variables.items()) or "no TORCH_NCCL_*/NCCL_*/TORCH_FR_* variables"
    if read_from != pid:
        shown += f"; read from its rank process PID {read_from}"
    recorder = next((environ[k] for k in FLIGHT_RECORDER_VARIABLES if environ.get(k)), None)
    if world is None or world <= 1:
        return Check("job_environment", "ok", f"not a distributed job (no WORLD_SIZE above 1); {shown}",
                     details=details)
    if recorder is None or recorder.strip() == "0":
        return Check("job_environment", "limited",
                     f"{world}-rank job without the Flight Recorder: on a collective timeout nothing records "
                     f"which rank did not join ({shown})",
                     "launch with TORCH_FR_BUFFER_SIZE=2000 (older torch reads TORCH_NCCL_TRACE_BUFFER_SIZE) and "
                     "TORCH_NCCL_DUMP_ON_TIMEOUT=1", details=details)
    return Check("job_environment", "ok", f"{world}-rank job with the Flight Recorder on ({shown})", details=details)


def _first_rank_below(pid: int, limit: int = 256) -> tuple[int, dict[str, str]] | None:
    """(PID, environment) of the first descendant of `pid`, breadth first, that has WORLD_SIZE; None if none
    among the first `limit` processes."""
    queue, seen = list(child_pids(pid)), 0
    while queue and seen < limit:
        child = queue.pop(0)
        seen += 1
        environ = read_environ(child)
        if torch_distributed_env(environ).world_size is not None:
            return child, environ
        queue.extend(child_pids(child))
    return None


# --- what the monitor says it cannot see -----------------------------------------------------------------------

# The doctor's checks that a running monitor cannot learn from its own frames, asked once when it attaches. The
# rest (stacks, NVML, cgroup) come from each frame (frame_blind_spots), so they follow what really happens and
# are the same in a replay.
STARTUP_CHECKS = ("pid_namespace", "gpm", "clock_events", "job_environment")


def startup_blind_spots(pid: int, *, gpu: bool = True, nvml: Any = None) -> tuple[Check, ...]:
    """The not-ok STARTUP_CHECKS for `pid`, for the monitor to carry beside what its frames show. gpu=False
    (--no-gpu) leaves NVML alone."""
    checks = [check_pid_namespace(pid), check_job_environment(pid)]
    if gpu:
        checks.extend(c for c in check_nvml(nvml_capabilities(nvml)) if c.name in STARTUP_CHECKS)
    return tuple(c for c in checks if c.status != "ok")


def frame_blind_spots(frame: Any) -> tuple[Check, ...]:
    """What one Frame (probes.frame) shows gputop could not read: the stacks (ptrace denied, py-spy missing),
    the GPUs (NVML unavailable; not when turned off with --no-gpu) and the cgroup."""
    spots = []
    stacks = frame.stacks
    if stacks.blocked is not None:
        spots.append(Check("stacks", "cannot", f"{stacks.blocked}: {stacks.reason or 'no stack could be read'}",
                           f"gputop doctor --pid {frame.target.pid} says what fails and how to fix it",
                           sees_process=True))
    gpu = frame.gpu
    if not gpu.available and gpu.reason and "--no-gpu" not in gpu.reason and gpu.reason != "not read":
        spots.append(Check("nvml", "cannot", gpu.reason, _nvml_fix(gpu.reason), brief=_no_gpu_brief(gpu.reason)))
    if frame.cpu.cgroup_version is None and frame.cpu.reason:
        spots.append(Check("cgroup", "cannot", f"the target's cgroup could not be read ({frame.cpu.reason})",
                           "mount /sys/fs/cgroup read-only into gputop's container, or run gputop on the host"))
    return tuple(spots)


def blind_spots(frame: Any, startup: tuple[Check, ...] = ()) -> tuple[Check, ...]:
    """What the monitor cannot see now, worst first: the frame's own, then the startup checks it does not
    cover."""
    live = frame_blind_spots(frame)
    names = {c.name for c in live}
    merged = live + tuple(c for c in startup if c.name not in names)
    return tuple(sorted(merged, key=lambda c: -STATUS_ORDER.index(c.status)))
