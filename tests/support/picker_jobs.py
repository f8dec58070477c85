"""The job picker's real jobs: from a folder of a test's own, a torchrun 2-rank gloo job and a plain training loop
(tests/targets/job_torchrun.py, job_train.py, each with a DataLoader worker) and a Python process that never
imports torch; ready once both trainings printed 'ready', stopped with everything they started. The `jobs`
fixture in conftest.py starts them for a test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from support.paths import TARGETS
from support.processes import free_port, said_ready, stop_process_tree

START_TIMEOUT_S = 240.0  # torch's import in every rank and worker, and gloo's rendezvous, on a busy 2-core box


class Jobs:
    """The three targets of one test, started from `folder`; ready() once both trainings printed 'ready'."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        for name in ("job_train.py", "job_torchrun.py"):
            shutil.copy(TARGETS / name, folder / name)
        env = dict(os.environ, PYTHONUNBUFFERED="1", GLOO_SOCKET_IFNAME="lo")
        env.pop("RANK", None)
        self.plain_log = folder / "plain.log"
        self.torchrun_log = folder / "torchrun.log"
        self.started: list[subprocess.Popen] = []
        with open(self.plain_log, "w") as log:
            self.plain = self._start([str(folder / "job_train.py"), "--workers", "1"], log, env)
        with open(self.torchrun_log, "w") as log:
            self.torchrun = self._start([str(folder / "job_torchrun.py"), str(free_port()), "2", "0",
                                         "--workers", "1"], log, env)
        self.not_torch = self._start(["-c", "import time\nwhile True: time.sleep(0.05)", str(folder)],
                                     subprocess.DEVNULL, env)

    def _start(self, args: list[str], log, env) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, cwd=self.folder)
        self.started.append(proc)
        return proc

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for proc in self.started:
                assert proc.poll() is None, f"a target exited early: {proc.args}"
            if said_ready(self.plain_log.read_text()) and self.torchrun_log.read_text().count("ready ") >= 2:
                return
            time.sleep(0.2)
        raise AssertionError(f"targets not ready in {START_TIMEOUT_S} s:\n{self.torchrun_log.read_text()[-2000:]}")

    def stop(self) -> None:
        for proc in self.started:
            stop_process_tree(proc)
