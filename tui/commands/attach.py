"""`gputop --pid PID`, the default command: watch a training job live in the TUI, or headless for --duration
seconds writing a snapshot (--snapshot) and/or a recording (--record). Its options are gputop's own.

Textual is imported only when the TUI starts, so the headless path never loads it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from tui.commands.shared import (
    UsageError,
    add_monitoring_arguments,
    add_pid_argument,
    add_process_only_argument,
    add_sampling_arguments,
    add_slurm_job_argument,
    check_target,
    check_writable,
    comparison_inputs,
    engine_config,
    hang_after,
    positive_float,
    resolve_slurm_job,
)
from tui.exitcodes import EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_OK

DEFAULT_SNAPSHOT_DURATION_S = 10.0


class AttachCommand:
    name = None  # the default: `gputop --pid PID`, its options on gputop's own parser
    help = "Why is my training job slow, or is it hung? Attach to its PID and see, with evidence."
    description = None  # gputop's own --help describes it, with `help`

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        which = parser.add_mutually_exclusive_group()
        add_pid_argument(which)
        add_slurm_job_argument(which)
        add_process_only_argument(parser)
        add_sampling_arguments(parser)
        parser.add_argument("--native", action="store_true",
                            help="include native (C/C++) frames; pauses the target while sampling")
        parser.add_argument("--blocking", action="store_true",
                            help="pause the target for each stack sample (py-spy's default; can slow torch 5-15x)")
        add_monitoring_arguments(parser)
        parser.add_argument("--record", metavar="FILE.jsonl", help="append every frame to a recording")
        parser.add_argument("--snapshot", metavar="PATH",
                            help="headless: sample, write one JSON document ('-' = stdout) and exit")
        parser.add_argument("--duration", type=positive_float, default=None, metavar="S",
                            help=f"headless run length (default {DEFAULT_SNAPSHOT_DURATION_S:g} s with --snapshot)")

    def run(self, args: argparse.Namespace) -> int:
        resolve_slurm_job(args)
        if args.pid is None:
            raise UsageError("say which process to watch: gputop --pid PID, or --slurm-job JOBID (or try: gputop demo)")
        check_target(args.pid)
        check_writable(args.snapshot, "snapshot")
        check_writable(args.record, "recording")
        comparison = comparison_inputs(args)
        if args.duration is not None and args.snapshot is None and not args.record:
            # Sampling for S seconds and keeping nothing would print nothing and exit 0: say what is missing.
            raise UsageError("--duration needs --snapshot PATH ('-' for stdout) or --record FILE.jsonl: "
                             "it sets how long a headless run samples before writing them")
        if args.snapshot is not None or args.duration is not None:
            return run_headless(args, comparison)
        from probes.engine import Engine
        from tui.app import make_app

        recorder = open_recorder(args, comparison)
        engine = Engine(args.pid, engine_config(args))
        app = make_app(engine=engine, recorder=recorder, comparison=comparison, hang_after_s=hang_after(args))
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
        return Recorder(args.record, meta=recording_meta(args.pid, hang_after(args), comparison))
    except OSError as exc:
        raise UsageError(f"cannot write the recording {args.record}: {exc.strerror or exc}") from None


def run_headless(args: argparse.Namespace, comparison=None) -> int:
    """Sample for --duration seconds; write the snapshot and/or the recording. Ctrl-C still writes."""
    from probes.engine import Engine, run_ticks
    from probes.monitor import Monitor
    from probes.snapshot import write_json_atomic

    duration = args.duration or DEFAULT_SNAPSHOT_DURATION_S
    monitor = Monitor(hang_after_s=hang_after(args), comparison=comparison, recorder=open_recorder(args, comparison))
    engine = Engine(args.pid, engine_config(args))
    stop = threading.Event()
    interrupted = False
    stopped_by: list[str] = []  # the signal that ended the run before --duration, if one did

    def on_sigterm(*_) -> None:
        stopped_by.append("SIGTERM")
        stop.set()

    previous_handler = signal.signal(signal.SIGTERM, on_sigterm)
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
        stopped_by.append("SIGINT (Ctrl-C)")
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        engine.close()
        monitor.close()
    if monitor.view is None:
        print("gputop: no reading was taken before the run stopped", file=sys.stderr)
        return EXIT_INTERRUPTED if interrupted else EXIT_INCOMPLETE
    partial = None
    if stopped_by:
        watched = sum(frame.interval_s for frame in monitor.view.frames)
        partial = f"stopped by {stopped_by[0]} after {watched:.0f} s of the {duration:g} s asked"
    if args.snapshot is not None:
        write_json_atomic(monitor.snapshot(partial=partial), args.snapshot)
        where = "" if args.snapshot == "-" else f" written to {args.snapshot}"
        if partial is not None:  # said on stderr even for stdout: the reader of the JSON may not look at the field
            print(f"gputop: PARTIAL snapshot of PID {args.pid}{where} ({partial})", file=sys.stderr)
        elif where:
            print(f"gputop: snapshot of PID {args.pid}{where}", file=sys.stderr)
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_INCOMPLETE if monitor.record_problem else EXIT_OK
