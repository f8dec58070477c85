"""The sampling loop behind `gputop serve`'s /metrics: one target (--pid) or every training job on the node
(--follow), and the --listen address it serves on. The command itself (options, checks, the HTTP endpoint)
is tui/commands/serve.py.

One sampling thread ticks every watched target's Engine once per interval, folds the frame into that
target's Monitor and publishes the views as one immutable tuple; the HTTP server (prometheus_client's, on
its own thread) reads only that tuple on a scrape, so a scrape never samples and never waits for a tick.
Listens on 127.0.0.1:9407 unless told otherwise: nothing beyond this machine can read it until the user
asks (`--listen 0.0.0.0:9407` or `--listen :9407`).
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass

DEFAULT_LISTEN_HOST = "127.0.0.1"
DEFAULT_PORT = 9407  # near dcgm-exporter's 9400, not on it: both run on one GPU node
DEFAULT_FOLLOW_SCAN_S = 2.0  # how often --follow looks for new jobs


class ListenError(ValueError):
    """A --listen value that is not HOST:PORT; the message is one line."""


def parse_listen(text: str) -> tuple[str, int]:
    """'127.0.0.1:9407', ':9407' (every interface, as dcgm-exporter spells it), '9407' (loopback),
    '[::1]:9407'."""
    text = text.strip()
    host, port_text = DEFAULT_LISTEN_HOST, text
    if text.startswith("["):
        close = text.find("]")
        if close < 0 or not text[close + 1:].startswith(":"):
            raise ListenError(f"--listen wants [IPV6]:PORT, got {text!r}")
        host, port_text = text[1:close], text[close + 2:]
    elif ":" in text:
        host, port_text = text.rsplit(":", 1)
        host = host or "0.0.0.0"
    try:
        port = int(port_text)
    except ValueError:
        raise ListenError(f"--listen wants HOST:PORT (e.g. 127.0.0.1:{DEFAULT_PORT}), got {text!r}") from None
    if not 0 <= port <= 65535:
        raise ListenError(f"--listen: port {port} is not between 0 and 65535")
    return host, port


@dataclass
class _Watched:
    """One watched target: its engine and the monitor that folds its frames."""

    engine: object
    monitor: object
    why: str


class Server:
    """The sampling loop behind /metrics: ticks each watched target, publishes the views, follows jobs."""

    def __init__(self, config, *, pid: int | None, follow: bool, hang_after_s: float, comparison=None,
                 mfu_floor: float | None = None, scan_interval_s: float = DEFAULT_FOLLOW_SCAN_S,
                 log=lambda line: print(f"gputop: {line}", file=sys.stderr, flush=True), gpu=None) -> None:
        """gpu: the shared GPU reader (probes.nvml.SharedGpuReading; tests pass one over a fake NVML)."""
        from probes.exporter import WatchedView

        self._config = config
        self._follow = follow
        self._hang_after_s = hang_after_s
        self._comparison = comparison
        self._mfu_floor = mfu_floor
        self._scan_interval_s = scan_interval_s
        self._log = log
        self._watched: dict[int, _Watched] = {}
        self._published: tuple[WatchedView, ...] = ()
        self._last_scan: float | None = None
        # One NVML read per tick, shared by every watched target and by the scan for new jobs.
        self._gpu = gpu
        if gpu is None and config.read_gpu:
            from probes.nvml import SharedGpuReading

            self._gpu = SharedGpuReading()
        self.stop = threading.Event()
        if pid is not None:
            self._watch(pid, f"PID {pid}")

    def views(self):
        """What a scrape reads: the views of the last tick (an immutable tuple, swapped whole)."""
        return self._published

    def run(self) -> None:
        """Tick until stop is set; each tick's views replace the published ones."""
        interval = self._config.interval_s
        next_tick = time.monotonic()
        while not self.stop.is_set():
            self.step()
            next_tick += interval
            if next_tick < time.monotonic():  # fell behind: start afresh rather than firing a burst
                next_tick = time.monotonic() + interval
            self.stop.wait(max(0.0, next_tick - time.monotonic()))

    def step(self) -> None:
        """One tick: read the GPUs once, look for new jobs when it is time, read every watched target."""
        if self._gpu is not None:
            self._gpu.refresh()
        if self._follow and self._scan_due():
            self._scan()
        self._tick()

    def close(self) -> None:
        for watched in self._watched.values():
            watched.engine.close()
            watched.monitor.close()
        self._watched.clear()
        if self._gpu is not None:
            self._gpu.close()

    # --- inside ----------------------------------------------------------------------------------------

    def _watch(self, pid: int, why: str) -> bool:
        """Watch `pid`'s job; False (and nothing started) when its root is watched already."""
        from probes.engine import Engine
        from probes.jobs.root import resolve_root_safely
        from probes.monitor import Monitor

        # The job's root, as gputop --pid finds it: asked first, so a job watched already costs no Engine.
        root = pid if self._config.process_only else resolve_root_safely(pid).root_pid
        if root in self._watched:
            return False
        engine = Engine(pid, self._config, gpu=self._gpu)
        root = engine.root_pid
        if root in self._watched:  # the tree changed between the two looks
            engine.close()
            return False
        self._watched[root] = _Watched(engine, Monitor(hang_after_s=self._hang_after_s, comparison=self._comparison),
                                       why)
        return True

    def _tick(self) -> None:
        from probes.exporter import WatchedView

        published = []
        for pid, watched in list(self._watched.items()):
            try:
                view = watched.monitor.ingest(watched.engine.tick())
            except Exception as exc:  # a bug in one target's reading must not stop the others' metrics
                self._log(f"reading PID {pid} failed ({type(exc).__name__}: {exc}); still serving the others")
                continue
            if self._follow and not view.latest.target.alive:
                self._log(f"stopped following PID {pid} ({watched.why}): it has ended")
                watched.engine.close()
                watched.monitor.close()
                del self._watched[pid]
                continue
            published.append(WatchedView(view, self._mfu_floor))
        self._published = tuple(published)

    def _scan_due(self) -> bool:
        return self._last_scan is None or time.monotonic() - self._last_scan >= self._scan_interval_s

    def _scan(self) -> None:
        from probes.jobs.follow import find_training_jobs

        self._last_scan = time.monotonic()
        for job in find_training_jobs(gpu_pids=self._gpu_pids()):
            if job.root_pid not in self._watched and self._watch(job.root_pid, job.why):
                self._log(f"following PID {job.root_pid} ({job.why})")

    def _gpu_pids(self) -> list[int]:
        """Processes holding a GPU context, in our PID namespace."""
        if self._gpu is None:
            return []
        return [p.local_pid or p.pid for device in self._gpu.latest.devices for p in device.processes]
