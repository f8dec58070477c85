"""Real processes in tests: waiting on a condition, killing a process tree for good, starting a target whose output
goes to a file, a free port for a job's rendezvous, and noting every process a test starts (conftest.py fails a test
not marked slow that starts one)."""

from __future__ import annotations

import _posixsubprocess
import contextlib
import functools
import os
import random
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import psutil
import pytest


def kill_tree(pid: int) -> None:
    """SIGKILL pid and every process under it, and wait (a zombie counts as gone)."""
    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    procs = parent.children(recursive=True) + [parent]
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    # Only our direct child is ours to reap; orphaned grandchildren become zombies that wait_procs would
    # wait on until its timeout when pid 1 does not reap them, so a zombie counts as gone.
    deadline = time.monotonic() + 5
    for proc in procs:
        while time.monotonic() < deadline:
            try:
                if proc.status() == psutil.STATUS_ZOMBIE and proc.pid != pid:
                    break
            except psutil.NoSuchProcess:
                break
            if proc.pid == pid:
                break  # reaped by the fixture's Popen.wait()
            time.sleep(0.02)


def stop_process_tree(proc: subprocess.Popen, wait_s: float = 10.0) -> None:
    """Kill a target started with start_new_session, everything under it and its process group; reap it."""
    kill_tree(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=wait_s)


# "ready" as a word of a line: a target's own "ready" (or "rank 1 ready PID 42"), never the "already" of an error a
# dying target printed ("address already in use"), which once passed a Slurm job's readiness check with its rank 0
# dead.
_READY = re.compile(r"\bready\b")


def said_ready(text: str) -> bool:
    """Whether a target's output holds its ready line."""
    return _READY.search(text) is not None


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.1):
    """Poll predicate() until it returns something truthy; return it, or fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"condition not met within {timeout}s: {predicate}")


def start_logged(spawn_target, tmp_path: Path, script: str, *args: str, timeout: float = 90.0):
    """Start a target (with the spawn_target fixture) whose stdout goes to a file; wait for its 'ready' line."""
    out = tmp_path / f"{Path(script).stem}.out"
    handle = out.open("w")
    try:
        return spawn_target(script, *args, stdout=handle, stderr=subprocess.STDOUT, timeout=timeout,
                            ready=lambda proc: said_ready(out.read_text()))
    finally:
        handle.close()


# Ports free_port() picks from: below the kernel's ephemeral range, which a bind to port 0 draws from and so does
# every outgoing connection on the machine. A rendezvous port from that range was taken by some connection in the
# seconds before the job's rank 0 bound it (a Slurm job's TCPStore: EADDRINUSE, in a loaded CI run). Skipped: the
# ports jobs take by default here (torch's 29500, NCCL RAS's 28028).
FREE_PORT_FLOOR = 20000
RESERVED_PORTS = frozenset({28028, 29500})


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for a job's rendezvous, from below the ephemeral range (see above)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as handle:
            ephemeral_from = int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_from = 32768
    for _ in range(200):
        port = random.randrange(FREE_PORT_FLOOR, max(FREE_PORT_FLOOR + 1, ephemeral_from))
        if port in RESERVED_PORTS:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # the range is crowded: any free port rather than none
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Every way this interpreter starts a process: subprocess (which binds fork_exec at import, so both names), the
# multiprocessing start methods (fork_exec again for spawn and forkserver, os.fork for fork), pty and posix_spawn.
_STARTERS = (
    (subprocess, "_fork_exec"),
    (_posixsubprocess, "fork_exec"),
    (os, "fork"),
    (os, "forkpty"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
)


def _command_of(name: str, args: tuple) -> str:
    if name in ("fork", "forkpty"):
        return f"os.{name}()"
    argv = args[1] if name.startswith("posix_spawn") else args[0]
    return " ".join(os.fsdecode(part) for part in argv)


@contextlib.contextmanager
def processes_started() -> Iterator[list[str]]:
    """Within: the command line of every process this interpreter starts, from any thread, in the list yielded."""
    started: list[str] = []
    replaced = []
    for owner, name in _STARTERS:
        original = getattr(owner, name, None)
        if original is None:
            continue

        @functools.wraps(original)
        def noting(*args, _original=original, _name=name, **kwargs):
            started.append(_command_of(_name, args))
            return _original(*args, **kwargs)

        setattr(owner, name, noting)
        replaced.append((owner, name, original))
    try:
        yield started
    finally:
        for owner, name, original in reversed(replaced):
            setattr(owner, name, original)


@contextlib.contextmanager
def busy_neighbours(count: int, command: Sequence[str] = ("yes",)) -> Iterator[None]:
    """Within: `count` CPU-burning processes (`yes` by default) beside the test, each in its own session so that no
    tree gputop watches holds them; killed and reaped on the way out."""
    neighbours = [subprocess.Popen(list(command), stdout=subprocess.DEVNULL, start_new_session=True)
                  for _ in range(count)]
    try:
        yield
    finally:
        for neighbour in neighbours:
            neighbour.kill()
            neighbour.wait(timeout=10)
