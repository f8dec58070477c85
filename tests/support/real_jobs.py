"""Real jobs (tests/targets/job_*.py: torchrun with gloo ranks, mp.spawn, a shell script) started in their own
session and watched by an in-process Engine tick by tick until the job looks as a test wants (`watching`,
`Watch.until`, `whole_job`), then killed with everything they started (`kill_job`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from probes.frame import ROLE_DATALOADER_WORKER, ROLE_RANK, Frame, ProcessSample
from probes.monitoring.engine import Engine, EngineConfig
from probes.sensors.process_facts import parse_environ
from probes.sensors.textfiles import read_text
from support.paths import REPO, TARGETS

TICK_S = 0.5
START_TIMEOUT_S = 180.0  # torch imports in every rank and worker; a busy 2-core machine takes its time


def children_with(parent: int, **wanted: str) -> list[int]:
    """The children of `parent` whose environment holds these variables."""
    found = []
    for child in psutil.Process(parent).children():
        environ = parse_environ(read_text(f"/proc/{child.pid}/environ"))
        if all(environ.get(k) == v for k, v in wanted.items()):
            found.append(child.pid)
    return found


def kill_job(proc: subprocess.Popen) -> None:
    """Every process the job started (torchrun gives each rank its own session), then its process group."""
    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    for p in family:
        with contextlib.suppress(psutil.Error):
            p.kill()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    # Orphans are reaped by whoever adopts them: a zombie counts as gone.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_lives(p) for p in family):
        time.sleep(0.05)


def _lives(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def start_job(script: str, *args: str, log: Path) -> subprocess.Popen:
    """The target in its own session, its output (and its ranks') into `log`: a pipe nobody reads could fill."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, str(TARGETS / script), *args], env=env, start_new_session=True,
                                stdout=out, stderr=subprocess.STDOUT)


@dataclass
class Watch:
    """Frames of one engine, and which PIDs' stacks have arrived in them so far."""

    engine: Engine
    frame: Frame | None = None
    sampled: set[int] = field(default_factory=set)
    seen: list[Frame] = field(default_factory=list)

    def until(self, predicate, timeout: float = START_TIMEOUT_S) -> Frame:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.frame = self.engine.tick()
            self.seen.append(self.frame)
            self.sampled |= {c.pid for c in self.frame.stacks.counts}
            if predicate(self.frame):
                return self.frame
            time.sleep(TICK_S)
        pytest.fail(f"not reached within {timeout}s; last job {self.frame.job if self.frame else None}, "
                    f"roles {[(p.pid, p.role, p.rank) for p in self.frame.processes] if self.frame else None}")


@contextlib.contextmanager
def watching(pid: int, **config):
    engine = Engine(pid, EngineConfig(interval_s=TICK_S, read_gpu=False, **config))
    try:
        yield Watch(engine)
    finally:
        engine.close()


def ranks_of(frame: Frame) -> list[ProcessSample]:
    return sorted((p for p in frame.processes if p.role == ROLE_RANK and p.alive), key=lambda p: p.rank)


def workers_of(frame: Frame, owner: int) -> list[ProcessSample]:
    return [p for p in frame.processes if p.role == ROLE_DATALOADER_WORKER and p.owner_pid == owner and p.alive]


def whole_job(watch: Watch, ranks: int = 2, workers: int = 1, restart_count: int | None = None):
    """A predicate: the job shows `ranks` live ranks, each with its workers, and every rank's stacks arrived."""
    def ready(frame: Frame) -> bool:
        found = ranks_of(frame)
        return (frame.job is not None and len(frame.job.rank_pids) == ranks and len(found) == ranks
                and all(len(workers_of(frame, r.pid)) == workers for r in found)
                and (restart_count is None or all(r.restart_count == restart_count for r in found))
                and {r.pid for r in found} <= watch.sampled)
    return ready


def start_nanogpt_like(folder: Path, settings: Sequence[str]) -> tuple[subprocess.Popen, Path]:
    """tests/targets/nanogpt_config_train.py run as nanoGPT's own train.py from `folder` (a configurator.py beside
    it is what marks nanoGPT's train.py), with `settings` as its --key=value overrides, unbuffered into train.log.
    Returns the process (stop it with stop_process_tree) and its log."""
    shutil.copy(TARGETS / "nanogpt_config_train.py", folder / "train.py")
    (folder / "configurator.py").write_text("", encoding="utf-8")
    log = folder / "train.log"
    with log.open("w") as stdout:
        job = subprocess.Popen([sys.executable, "train.py", *settings], cwd=folder, stdout=stdout,
                               stderr=subprocess.STDOUT, start_new_session=True,
                               env=dict(os.environ, PYTHONUNBUFFERED="1"))
    return job, log
