"""The `gputop` command: argument parsing, input checks, and dispatch to the TUI or a headless job.

Bad input ends here with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from probes import __version__
from tui.argtypes import positive_float as _positive_float
from tui.argtypes import positive_int as _positive_int
from tui.exitcodes import EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

DEFAULT_SNAPSHOT_DURATION_S = 10.0


class UsageError(Exception):
    """A mistake in what the user asked for; the message is the one line they will see."""




def _interval(text: str) -> float:
    from probes.engine import MIN_INTERVAL_S

    value = _positive_float(text)
    if value < MIN_INTERVAL_S:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_INTERVAL_S} s, got {text}")
    return value


def _pid(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a PID is a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a PID is a positive number, got {text}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) so scripts get a readable stderr."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"gputop: {message} (see gputop --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gputop",
        description="Why is my training job slow, or is it hung? Attach to its PID and see, with evidence.",
        epilog="Examples: gputop demo | gputop --pid 1234 | gputop --pid 1234 --snapshot out.json --duration 10"
               " | gputop serve --pid 1234 | gputop replay run.jsonl | gputop probe --model gpt2"
               " | gputop mfu --model gpt2-xl ...",
    )
    parser.add_argument("--version", action="version", version=f"gputop {__version__}")
    add_attach_arguments(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    replay = sub.add_parser("replay", help="show a recording (--record FILE.jsonl) in the TUI, or snapshot it")
    replay.add_argument("recording", help="a .jsonl file written by --record")
    replay.add_argument("--snapshot", metavar="PATH", help="write the recording's snapshot JSON and exit")
    replay.add_argument("--hang-after", type=_positive_float, default=None, metavar="S")
    add_comparison_arguments(replay)
    replay.set_defaults(func=run_replay)

    demo = sub.add_parser("demo", help="start a bundled training process and watch it in the TUI")
    demo.add_argument("--interval", type=_interval, default=1.0, metavar="S")
    demo.set_defaults(func=run_demo)

    from tui.serve import add_serve_parser

    add_serve_parser(sub, pid_type=_pid, interval_type=_interval, positive_float=_positive_float,
                     add_comparison_arguments=add_comparison_arguments, run=run_serve)

    try:
        from tui.probe_commands import register
    except ImportError:  # pragma: no cover - the probe commands ship with gputop; keep the monitor usable
        pass
    else:
        register(sub)
    return parser


def add_comparison_arguments(parser: argparse.ArgumentParser) -> None:
    """What the job's pace is measured against: the same flags live, headless and in replay."""
    from probes.models import PRESETS

    parser.add_argument("--tokens-per-iter", type=_positive_int, default=None, metavar="N",
                        help="tokens per optimizer iteration, to turn s/iter into tokens/s")
    parser.add_argument("--baseline", metavar="PROBE.json",
                        help="a `gputop probe --json` result for the target's model and batch: show its "
                             "observed s/iter against the probe's reference step, and the corrected MFU")
    parser.add_argument("--model", choices=tuple(PRESETS), default=None,
                        help="the target's nanoGPT preset, for the MFU from --tokens-per-iter without --baseline")


def add_attach_arguments(parser: argparse.ArgumentParser) -> None:
    from probes.engine import DEFAULT_INTERVAL_S

    parser.add_argument("--pid", type=_pid, help="the training process to watch (its workers are found); a "
                        "launcher (torchrun, mp.spawn's parent, bash, uv run) or any rank: the whole job is watched")
    parser.add_argument("--process-only", action="store_true",
                        help="watch only this process and its workers, not the job around it")
    parser.add_argument("--interval", type=_interval, default=DEFAULT_INTERVAL_S, metavar="S",
                        help=f"seconds between readings (default {DEFAULT_INTERVAL_S}, at least 0.25)")
    parser.add_argument("--rate", type=_positive_float, default=None, metavar="HZ",
                        help="py-spy stack samples per second per process, fixed (default: 5, dropping to 1 "
                             "while the picture holds still; see README)")
    parser.add_argument("--native", action="store_true",
                        help="include native (C/C++) frames; pauses the target while sampling")
    parser.add_argument("--blocking", action="store_true",
                        help="pause the target for each stack sample (py-spy's default; can slow torch 5-15x)")
    parser.add_argument("--no-gpu", action="store_true", help="do not read NVML")
    parser.add_argument("--no-stacks", action="store_true", help="do not run py-spy")
    parser.add_argument("--log", metavar="PATH", help="the target's log, to read its own iteration rate "
                        "(default: its stdout/stderr when they are files)")
    add_comparison_arguments(parser)
    parser.add_argument("--hang-after", type=_positive_float, default=None, metavar="S",
                        help="call the target hung after this long with no progress (default 5)")
    parser.add_argument("--record", metavar="FILE.jsonl", help="append every frame to a recording")
    parser.add_argument("--snapshot", metavar="PATH",
                        help="headless: sample, write one JSON document ('-' = stdout) and exit")
    parser.add_argument("--duration", type=_positive_float, default=None, metavar="S",
                        help=f"headless run length (default {DEFAULT_SNAPSHOT_DURATION_S:g} s with --snapshot)")


def engine_config(args: argparse.Namespace):
    from probes.engine import EngineConfig

    native = bool(args.native)
    return EngineConfig(
        interval_s=args.interval,
        stack_rate_hz=args.rate,
        native=native,
        nonblocking=not (args.blocking or native),
        sample_stacks=not args.no_stacks,
        read_gpu=not args.no_gpu,
        log_path=args.log,
        tokens_per_iter=args.tokens_per_iter,
        process_only=bool(getattr(args, "process_only", False)),
    )


def _hang_after(args: argparse.Namespace) -> float:
    from probes.diagnosis.verdict import DEFAULT_HANG_AFTER_S

    return DEFAULT_HANG_AFTER_S if args.hang_after is None else args.hang_after


def comparison_inputs(args: argparse.Namespace):
    """What the target's progress is compared with (--baseline, --model, --tokens-per-iter), or None."""
    from probes.baseline import BaselineError, load_comparison_inputs

    try:
        return load_comparison_inputs(args.baseline, args.model, args.tokens_per_iter)
    except BaselineError as exc:
        raise UsageError(str(exc)) from None


def check_target(pid: int) -> None:
    from probes.proctree import target_exists

    if not target_exists(pid):
        raise UsageError(f"no process with PID {pid} (check it with: ps -p {pid})")


def check_writable(path: str | None, what: str) -> None:
    import os

    if path in (None, "-"):
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"cannot write the {what} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"cannot write the {what} {path}: no write permission in {folder}")


def run_attach(args: argparse.Namespace) -> int:
    if args.pid is None:
        raise UsageError("say which process to watch: gputop --pid PID (or try: gputop demo)")
    check_target(args.pid)
    check_writable(args.snapshot, "snapshot")
    check_writable(args.record, "recording")
    comparison = comparison_inputs(args)
    if args.snapshot is not None or args.duration is not None:
        return run_headless(args, comparison)
    from probes.engine import Engine
    from tui.app import make_app

    recorder = open_recorder(args, comparison)
    engine = Engine(args.pid, engine_config(args))
    app = make_app(engine=engine, recorder=recorder, comparison=comparison, hang_after_s=_hang_after(args))
    try:
        app.run()
    finally:
        engine.close()
    return EXIT_OK


def open_recorder(args: argparse.Namespace, comparison=None):
    """The Recorder for --record (None without it); a file that cannot be opened is a usage error."""
    from probes.monitor import recording_meta
    from probes.recording import Recorder

    if not args.record:
        return None
    try:
        return Recorder(args.record, meta=recording_meta(args.pid, _hang_after(args), comparison))
    except OSError as exc:
        raise UsageError(f"cannot write the recording {args.record}: {exc.strerror or exc}") from None


def run_headless(args: argparse.Namespace, comparison=None) -> int:
    """Sample for --duration seconds; write the snapshot and/or the recording. Ctrl-C still writes."""
    from probes.engine import Engine, run_ticks
    from probes.monitor import Monitor
    from probes.snapshot import write_json_atomic

    duration = args.duration or DEFAULT_SNAPSHOT_DURATION_S
    monitor = Monitor(hang_after_s=_hang_after(args), comparison=comparison, recorder=open_recorder(args, comparison))
    engine = Engine(args.pid, engine_config(args))
    stop = threading.Event()
    interrupted = False
    previous_handler = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    told_record_problem = False
    told_job_note = False
    try:
        for frame in run_ticks(engine, stop, duration_s=duration):
            monitor.ingest(frame)
            if frame.job is not None and frame.job.note and not told_job_note:  # what is watched, once
                print(f"gputop: {frame.job.note}", file=sys.stderr)
                told_job_note = True
            if monitor.record_problem and not told_record_problem:  # a full disk: say so once, sample on
                print(f"gputop: {monitor.record_problem}", file=sys.stderr)
                told_record_problem = True
    except KeyboardInterrupt:
        interrupted = True
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        engine.close()
        monitor.close()
    if monitor.view is None:
        print("gputop: no reading was taken before the run stopped", file=sys.stderr)
        return EXIT_INTERRUPTED if interrupted else EXIT_INCOMPLETE
    if args.snapshot is not None:
        write_json_atomic(monitor.snapshot(), args.snapshot)
        if args.snapshot != "-":
            print(f"gputop: snapshot of PID {args.pid} written to {args.snapshot}", file=sys.stderr)
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_INCOMPLETE if monitor.record_problem else EXIT_OK


def run_replay(args: argparse.Namespace) -> int:
    if args.snapshot is not None:
        return _replay_to_snapshot(args)
    from probes.recording import RecordingError, load_recording

    try:
        recording = load_recording(args.recording)
    except RecordingError as exc:
        raise UsageError(str(exc)) from None
    frames = list(recording.frames)  # the TUI moves back and forth through them: all of them are held
    notice = recording.notice()
    if not frames:
        raise UsageError(notice or f"{args.recording} holds no frames")
    if notice:  # a recording cut mid-line (its writer was killed) or damaged: replay what is whole
        print(f"gputop: {notice}", file=sys.stderr)
    from tui.app import make_app

    make_app(replay_frames=frames, replay_notice=notice, comparison=comparison_inputs(args),
             hang_after_s=_hang_after(args)).run()
    return EXIT_OK


def _replay_to_snapshot(args: argparse.Namespace) -> int:
    """`gputop replay REC --snapshot OUT`: fold the recording as it is read, holding only the Monitor's window."""
    from probes.monitor import Monitor
    from probes.recording import RecordingError, read_recording, skipped_notice
    from probes.snapshot import write_json_atomic

    comparison = comparison_inputs(args)
    check_writable(args.snapshot, "snapshot")
    monitor = Monitor(hang_after_s=_hang_after(args), comparison=comparison, replay=True)
    skipped: list = []
    whole = 0
    try:
        for frame in read_recording(args.recording, skipped):
            monitor.ingest(frame)
            whole += 1
    except RecordingError as exc:
        raise UsageError(str(exc)) from None
    notice = skipped_notice(args.recording, skipped, whole)
    if not whole:
        raise UsageError(notice or f"{args.recording} holds no frames")
    if notice:
        print(f"gputop: {notice}", file=sys.stderr)
    write_json_atomic(monitor.snapshot(), args.snapshot)
    return EXIT_OK


def run_serve(args: argparse.Namespace) -> int:
    """`gputop serve`: /metrics for Prometheus, one PID or every training job on the node (tui/serve.py)."""
    from probes.engine import EngineConfig
    from tui.serve import serve

    if args.pid is None and not args.follow:
        raise UsageError("say what to serve: gputop serve --pid PID, or gputop serve --follow for every job")
    if args.pid is not None:
        check_target(args.pid)
    elif args.log is not None:
        raise UsageError("--log names one target's log: use it with --pid, not --follow")
    if args.process_only and args.pid is None:
        raise UsageError("--process-only narrows one target: use it with --pid, not --follow")
    config = EngineConfig(interval_s=args.interval, stack_rate_hz=args.rate, sample_stacks=not args.no_stacks,
                          read_gpu=not args.no_gpu, log_path=args.log, tokens_per_iter=args.tokens_per_iter,
                          process_only=args.process_only)
    return serve(args, config=config, hang_after_s=_hang_after(args), comparison=comparison_inputs(args),
                 usage_error=UsageError)


def run_demo(args: argparse.Namespace) -> int:
    from tui.demo import run_demo as start_demo

    return start_demo(interval_s=args.interval)


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None) or run_attach
    try:
        code = func(args)
    except UsageError as exc:
        print(f"gputop: {exc}", file=sys.stderr)
        code = EXIT_USAGE
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    sys.exit(code)
