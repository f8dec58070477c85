"""The GPU check's preflight (issue 41): what the check needs that the machine may lack, one line each, and what it
installed. torch does not bring psutil or an NVML binding, and without them every case would be "skipped: no GPU"
or gputop would not import; py-spy is how gputop sees the job's stacks.

- the NVML binding (nvidia-ml-py's ``pynvml``), psutil and py-spy: missing ones are installed into ``--site``
  (/tmp/site) from PyPI where pypi.org answers within a few seconds, else from the wheels carried in ``.whl/``
  (benchmarks/fetch_wheels.sh); the site is then put on sys.path, PYTHONPATH and PATH for the check and its children;
- nanoGPT's three files (vendored in benchmarks/nanogpt/);
- GPU 0's free memory, as NVML reads it: the GPT-2 XL cases need most of an 80 GB GPU.

The dry run (--cpu) lists and installs nothing unless asked (``install=True``): CI has what it needs, and no network.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# (what it is, how Python imports it or the command's name, its PyPI name)
PACKAGES = (("NVML binding", "pynvml", "nvidia-ml-py"), ("psutil", "psutil", "psutil"),
            ("py-spy", "py-spy", "py-spy"))
PYPI = ("pypi.org", 443)
PYPI_WAIT_S = 3.0
PIP_TIMEOUT_S = 120.0
FREE_GPU_FRACTION = 0.9  # GPU 0 at least this free: the XL cases fill most of an 80 GB GPU


def present(module_or_command: str) -> str | None:
    """Where a package is (its module's file, or the command's path), or None."""
    if module_or_command == "py-spy":  # where gputop looks (pyspy_binary.find_pyspy, which needs psutil)
        beside = Path(sys.executable).parent / "py-spy"
        return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else shutil.which("py-spy")
    importlib.invalidate_caches()
    spec = importlib.util.find_spec(module_or_command)
    return spec.origin if spec is not None else None


def pypi_reachable(address: tuple[str, int] = PYPI, wait_s: float = PYPI_WAIT_S) -> bool:
    try:
        with socket.create_connection(address, timeout=wait_s):
            return True
    except OSError:
        return False


def carried_wheels(folder: Path, project: str) -> list[Path]:
    """The wheels of `project` in the carried folder (a wheel's name starts with its project's, - as _)."""
    prefix = project.replace("-", "_").lower() + "-"
    return sorted(path for path in folder.glob("*.whl") if path.name.lower().startswith(prefix))


def use_site(site: Path) -> None:
    """The check and every process it starts find what was installed into `site`."""
    if str(site) not in sys.path:
        sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(site), os.environ.get("PYTHONPATH"))))
    os.environ["PATH"] = os.pathsep.join((str(site / "bin"), os.environ.get("PATH", "")))


def pip_install(arguments: list[str], site: Path) -> str | None:
    """pip install into `site`: None, or why it failed (its last line)."""
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--no-cache-dir",
               "--disable-pip-version-check", "--upgrade", "--target", str(site), *arguments]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"pip: {error}"
    if done.returncode != 0:
        return "pip: " + ((done.stderr or done.stdout).strip().splitlines() or ["failed"])[-1]
    return None


def free_gpu_line(nvml: Any = None) -> tuple[str, bool]:
    """GPU 0's free memory as NVML reads it (probes/sensors/nvml.py), and whether it is enough."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from probes.sensors.nvml import read_once

    reading = read_once(nvml=nvml)
    if not reading.available or not reading.devices:
        return f"free GPU memory: no GPU read ({reading.reason or 'no device'})", False
    device = reading.devices[0]
    total, used = device.mem_total_bytes, device.mem_used_bytes
    if total is None or used is None:
        return "free GPU memory: NVML gave no memory for GPU 0", False
    free = total - used
    enough = free >= FREE_GPU_FRACTION * total
    holders = ", ".join(str(process.pid) for process in device.processes) or "none"
    return (f"free GPU memory: {free / 2**30:.0f} of {total / 2**30:.0f} GiB on GPU 0 (processes on it: {holders})"
            + ("" if enough else f": under {FREE_GPU_FRACTION:.0%}, the XL cases may run out of memory"), enough)


def preflight(*, cpu: bool, nanogpt: Path, nanogpt_files: tuple[str, ...], site: Path, wheels: Path,
              install: bool, reachable: Callable[[], bool] = pypi_reachable,
              installer: Callable[[list[str], Path], str | None] = pip_install,
              gpu_line: Callable[[], tuple[str, bool]] = free_gpu_line) -> list[str]:
    """One line per thing the check needs: there, installed (from where), or missing (and why). Installs what is
    missing where `install`, from PyPI when `reachable()`, else from the carried wheels."""
    lines: list[str] = []
    missing = [(label, name, project) for label, name, project in PACKAGES if present(name) is None]
    lines += [f"{label}: there ({present(name)})" for label, name, project in PACKAGES
              if (label, name, project) not in missing]
    if missing and install:
        site.mkdir(parents=True, exist_ok=True)
        use_site(site)
        online = reachable()
        for label, name, project in missing:
            if online:
                why = installer([project], site)
                where = "PyPI"
            else:
                carried = carried_wheels(wheels, project)
                why = installer([str(path) for path in carried], site) if carried else \
                    f"PyPI not reachable and no {project} wheel in {wheels} (bash benchmarks/fetch_wheels.sh)"
                where = f"the carried {carried[0].name}" if carried else ""
            if why is None and present(name) is not None:
                lines.append(f"{label}: missing, installed from {where} into {site}")
            else:
                lines.append(f"{label}: MISSING: {why or 'installed, still not found'}")
    else:
        lines += [f"{label}: MISSING ({project} not installed{'' if install else '; the dry run installs nothing'})"
                  for label, _, project in missing]
    absent = [name for name in nanogpt_files if not (nanogpt / name).is_file()]
    lines.append(f"nanoGPT: {'there' if not absent else 'MISSING ' + ', '.join(absent)} in {nanogpt}"
                 + ("" if not absent else " (benchmarks/fetch_nanogpt.sh GIT_DIR writes them)"))
    if cpu:
        lines.append("free GPU memory: not read (the dry run runs on the CPU)")
    else:
        line, enough = gpu_line()
        lines.append(line if enough else line.replace("free GPU memory: ", "free GPU memory: LOW: ", 1))
    return lines

