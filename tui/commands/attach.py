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
        parser.add_argument("--flamegraph", metavar="FILE.svg",
                            help="headless: also have py-spy draw the whole job's stacks over the run, a flame "
                                 "graph (.svg) or a speedscope file (.json); written 0600")
        parser.add_argument("--duration", type=positive_float, default=None, metavar="S",
                            help=f"headless run length (default {DEFAULT_SNAPSHOT_DURATION_S:g} s with --snapshot)")

    def run(self, args: argparse.Namespace) -> int:
        resolve_slurm_job(args)
        if args.pid is None:
            raise UsageError("say which process to watch: gputop --pid PID, or --slurm-job JOBID (or try: gputop demo)")
        check_target(args.pid)
        check_writable(args.snapshot, "snapshot")
        check_writable(args.record, "recording")
        if args.flamegraph == "-":
            raise UsageError("--flamegraph needs a file (py-spy writes it): --flamegraph out.svg, or out.json for "
                             "speedscope")
        check_writable(args.flamegraph, "flame graph")
        comparison = comparison_inputs(args)
        if args.snapshot is not None or args.duration is not None or args.flamegraph is not None:
            return run_headless(args, comparison)
        from probes.engine import Engine
        from tui.app import make_app

        startup_checks = attach_checks(args)
        recorder = open_recorder(args, comparison)
        engine = Engine(args.pid, engine_config(args))
        app = make_app(engine=engine, recorder=recorder, comparison=comparison, hang_after_s=hang_after(args),
                       startup_checks=startup_checks)
        try:
            app.run()
        finally:
            engine.close()
        return EXIT_OK


def attach_checks(args: argparse.Namespace):
    """`gputop doctor`'s checks that the frames cannot show (PID namespace, GPM, the job's Flight Recorder
    variables), asked once on attach; the monitor carries what is not ok into the header and the snapshot."""
    from probes.doctor import startup_blind_spots

    return startup_blind_spots(args.pid, gpu=not args.no_gpu)


def tell_cannot_see(view, told: set[str]) -> None:
    """On stderr, once each: what gputop cannot see, with the fix (a headless run has no header to say it)."""
    for check in view.cannot_see:
        if check.status == "cannot" and check.name not in told:
            told.add(check.name)
            fix = f"; fix: {check.fix}" if check.fix else ""
            print(f"gputop: cannot see ({check.name}): {check.finding}{fix}", file=sys.stderr)


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
    monitor = Monitor(hang_after_s=hang_after(args), comparison=comparison, recorder=open_recorder(args, comparison),
                      startup_checks=attach_checks(args))
    engine = Engine(args.pid, engine_config(args))
    profile = None
    if args.flamegraph is not None:
        from probes.pyspy import ProfileRecording

        profile = ProfileRecording(engine.root_pid, args.flamegraph, native=args.native)
    stop = threading.Event()
    interrupted = False
    previous_handler = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    told_record_problem = False
    told_job_note = False
    told_cannot_see: set[str] = set()
    try:
        for frame in run_ticks(engine, stop, duration_s=duration):
            tell_cannot_see(monitor.ingest(frame), told_cannot_see)
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
        profile_problem = profile.finish() if profile is not None else None
    if profile is not None:
        print(f"gputop: {profile_problem}" if profile_problem else
              f"gputop: {profile.format} of PID {engine.root_pid} and its children written to {args.flamegraph}",
              file=sys.stderr)
    if monitor.view is None:
        print("gputop: no reading was taken before the run stopped", file=sys.stderr)
        return EXIT_INTERRUPTED if interrupted else EXIT_INCOMPLETE
    if args.snapshot is not None:
        write_json_atomic(monitor.snapshot(), args.snapshot)
        if args.snapshot != "-":
            print(f"gputop: snapshot of PID {args.pid} written to {args.snapshot}", file=sys.stderr)
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_INCOMPLETE if monitor.record_problem or profile_problem else EXIT_OK
