"""`gputop serve`: sample one target (--pid) or every training job on the node (--follow) without a screen and
serve /metrics for Prometheus until SIGTERM or Ctrl-C. The sampling loop behind /metrics is tui/serve.py's
Server; this module owns the options, their checks and the HTTP endpoint's start and stop.
"""

from __future__ import annotations

import argparse
import signal
import sys

from tui.commands.shared import (
    UsageError,
    add_follow_argument,
    add_monitoring_arguments,
    add_pid_argument,
    add_process_only_argument,
    add_sampling_arguments,
    add_slurm_job_argument,
    check_one_job_or_follow,
    comparison_inputs,
    engine_config,
    hang_after,
    node_name,
)
from tui.exitcodes import EXIT_OK
from tui.serve import DEFAULT_LISTEN_HOST, DEFAULT_PORT, ListenError, Server, parse_listen


class ServeCommand:
    name = "serve"
    help = "headless: serve /metrics for Prometheus while sampling one PID or every training job"
    description = ("Sample without a screen and serve the verdicts, pace and GPU readings at /metrics "
                   f"(Prometheus text; OpenMetrics when asked). Listens on {DEFAULT_LISTEN_HOST}:{DEFAULT_PORT} "
                   "unless --listen says otherwise.")

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        which = parser.add_mutually_exclusive_group()
        add_pid_argument(which)
        add_slurm_job_argument(which)
        add_follow_argument(which)
        parser.add_argument("--listen", default=f"{DEFAULT_LISTEN_HOST}:{DEFAULT_PORT}", metavar="HOST:PORT",
                            help=f"address for /metrics (default {DEFAULT_LISTEN_HOST}:{DEFAULT_PORT}, this machine "
                                 f"only; :{DEFAULT_PORT} or 0.0.0.0:{DEFAULT_PORT} for every interface)")
        add_sampling_arguments(parser)
        add_process_only_argument(parser)
        add_monitoring_arguments(parser)
        parser.add_argument("--mfu-floor", type=_ratio, default=None, metavar="RATIO",
                            help="export gputop_mfu_floor_ratio (0-1) beside gputop_mfu_ratio, for the shipped "
                                 "'MFU below floor' alert")
        # A server samples for hours: Python frames only, never pausing the target (no --native, --blocking).
        parser.set_defaults(native=False, blocking=False)

    def run(self, args: argparse.Namespace) -> int:
        check_one_job_or_follow(args, "serve")
        comparison = comparison_inputs(args)
        try:
            host, port = parse_listen(args.listen)
        except ListenError as exc:
            raise UsageError(str(exc)) from None
        server = Server(engine_config(args), pid=args.pid, follow=args.follow, hang_after_s=hang_after(args),
                        comparison=comparison, mfu_floor=args.mfu_floor)
        what = f"PID {args.pid}" if args.pid is not None else "this node's training jobs (--follow)"
        return _serve_metrics(server, host, port, what)


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a ratio between 0 and 1 (0.35 = 35%), got {text!r}") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"a ratio between 0 and 1 (0.35 = 35%), got {text}")
    return value


def _serve_metrics(server: Server, host: str, port: int, what: str) -> int:
    """Start the HTTP endpoint over the server's views and run the sampling loop until SIGTERM or Ctrl-C."""
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.process_collector import ProcessCollector

    from probes.outputs import GputopCollector

    registry = CollectorRegistry()
    registry.register(GputopCollector(server.views, host=node_name()))
    ProcessCollector(registry=registry)  # gputop's own CPU and memory: process_cpu_seconds_total, ...
    try:
        httpd, _ = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        server.close()
        raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror or exc}): choose another with "
                         f"--listen HOST:PORT") from None
    bound_port = httpd.server_address[1]
    shown_host = f"[{host}]" if ":" in host else host
    print(f"gputop: serving /metrics on http://{shown_host}:{bound_port}/metrics for {what}", file=sys.stderr,
          flush=True)
    previous = signal.signal(signal.SIGTERM, lambda *_: server.stop.set())
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        httpd.shutdown()
        httpd.server_close()
        server.close()
    return EXIT_OK
