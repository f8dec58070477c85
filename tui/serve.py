"""The sampling loop behind `gputop serve`'s /metrics: one target (--pid) or every training job on the node
(--follow), and the --listen address it serves on. The command itself (options, checks, the HTTP endpoint)
is tui/commands/serve.py.

One sampling thread ticks every watched target's Engine once per interval (probes/monitoring/node_watch.py, which
`gputop agent` shares), folds the frame into that target's Monitor and publishes the views as one immutable
tuple; the HTTP server (prometheus_client's, on its own thread) reads only that tuple on a scrape, so a
scrape never samples and never waits for a tick.
Listens on 127.0.0.1:9407 unless told otherwise: nothing beyond this machine can read it until the user
asks (`--listen 0.0.0.0:9407` or `--listen :9407`).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING

from probes.monitoring import DEFAULT_FOLLOW_SCAN_S, NodeWatch

if TYPE_CHECKING:  # imported where first used, as the other heavy parts
    from probes.monitoring import Monitor

DEFAULT_LISTEN_HOST = "127.0.0.1"
DEFAULT_PORT = 9407  # near dcgm-exporter's 9400, not on it: both run on one GPU node


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


class Server:
    """The sampling loop behind /metrics: ticks the node's watched targets (probes.monitoring.node_watch), folds each
    frame
    into its target's Monitor, publishes the views."""

    def __init__(self, config, *, pid: int | None, follow: bool, hang_after_s: float, comparison=None,
                 mfu_floor: float | None = None, scan_interval_s: float = DEFAULT_FOLLOW_SCAN_S,
                 log=lambda line: print(f"gputop: {line}", file=sys.stderr, flush=True), gpu=None) -> None:
        """gpu: the shared GPU reader (probes.sensors.nvml.SharedGpuReading; tests pass one over a fake NVML)."""
        from probes.outputs import WatchedView

        self._hang_after_s = hang_after_s
        self._comparison = comparison
        self._mfu_floor = mfu_floor
        self._log = log
        self.node = NodeWatch(config, pid=pid, follow=follow, scan_interval_s=scan_interval_s, log=log, gpu=gpu)
        self._interval_s = config.interval_s
        self._monitors: dict[int, Monitor] = {}  # by the target's root PID
        self._published: tuple[WatchedView, ...] = ()
        self.stop = threading.Event()

    def views(self):
        """What a scrape reads: the views of the last tick (an immutable tuple, swapped whole)."""
        return self._published

    def run(self) -> None:
        """Tick until stop is set; each tick's views replace the published ones."""
        interval = self._interval_s
        next_tick = time.monotonic()
        while not self.stop.is_set():
            self.step()
            next_tick += interval
            if next_tick < time.monotonic():  # fell behind: start afresh rather than firing a burst
                next_tick = time.monotonic() + interval
            self.stop.wait(max(0.0, next_tick - time.monotonic()))

    def step(self) -> None:
        """One tick of every watched target, each frame folded into its monitor; the views published whole."""
        from probes.monitoring import Monitor
        from probes.outputs import WatchedView

        published = []
        for each in self.node.tick():
            monitor = self._monitors.get(each.root_pid)
            if monitor is None:
                monitor = self._monitors[each.root_pid] = Monitor(hang_after_s=self._hang_after_s,
                                                                  comparison=self._comparison)
            try:
                view = monitor.ingest(each.frame)
            except Exception as exc:  # a bug in one target's diagnosis must not stop the others' metrics
                self._log(f"reading PID {each.root_pid} failed ({type(exc).__name__}: {exc}); still serving the "
                          "others")
                continue
            if each.ended:
                self._monitors.pop(each.root_pid).close()
                continue
            published.append(WatchedView(view, self._mfu_floor))
        self._published = tuple(published)

    def close(self) -> None:
        self.node.close()
        for monitor in self._monitors.values():
            monitor.close()
        self._monitors.clear()
