"""The log of the training process, whatever gputop is attached to: the real engine attached to a shell wrapper
(``bash -c 'python train.py > train.log; true'``: the shell's own stdout is not the log) and to torchrun whose two
ranks each write their own stdout file (``--redirects 1 --log-dir``). It must read the training process's file and
say whose it is: the python under the shell, rank 0 of the job. Each test waits for the state (a reading from that
file), never for a guessed time, and stops every process it started."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from support.paths import REPO, TARGETS
from support.processes import stop_process_tree, wait_for

from probes.monitoring.engine import Engine, EngineConfig

pytestmark = pytest.mark.slow

TIMEOUT_S = 60.0
HEADLESS = EngineConfig(sample_stacks=False, read_gpu=False)


def start(command: list[str], **popen_kwargs) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO))
    return subprocess.Popen(command, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, **popen_kwargs)


def watch_until(pid: int, reached):
    """Tick a real engine attached to ``pid`` until its frame's progress satisfies ``reached``; return it."""
    engine = Engine(pid, HEADLESS)
    try:
        return wait_for(lambda: (progress := engine.tick().progress) is not None and reached(progress) and progress,
                        timeout=TIMEOUT_S, interval=0.5)
    finally:
        engine.close()


def test_a_shell_wrappers_python_child_log_is_read(tmp_path):
    log = tmp_path / "train.log"
    script = f"{sys.executable} {TARGETS / 'nanogpt_like.py'} --interval 0.3 > {log}; true"
    shell = start(["bash", "-c", script])
    try:
        progress = watch_until(shell.pid, lambda p: p.source == str(log) and (p.iteration or 0) >= 3)
    finally:
        stop_process_tree(shell)
    assert progress.format == "nanogpt"
    assert progress.log_of is not None and progress.log_of.startswith("python")  # "python3 (PID n)": not bash's


def test_rank_zeros_own_log_is_read_under_torchrun(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    logs = tmp_path / "logs"
    agent = start([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
                   "127.0.0.1", "--master_port", str(port), "--redirects", "1", "--log-dir", str(logs),
                   str(TARGETS / "nanogpt_like.py"), "--interval", "0.3"])
    try:
        progress = watch_until(agent.pid, lambda p: p.source is not None and (p.iteration or 0) >= 3)
    finally:
        stop_process_tree(agent)
    assert progress.source.startswith(str(logs)) and progress.source.endswith("/0/stdout.log"), progress.source
    assert progress.log_of is not None and progress.log_of.startswith("rank 0 (PID ")
