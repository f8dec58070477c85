"""`gputop replay FILE.jsonl`: show a recording written by --record in the TUI, or fold it into a snapshot
(--snapshot) without a screen.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tui.commands.shared import (
    UsageError,
    add_comparison_arguments,
    add_hang_after_argument,
    check_writable,
    comparison_inputs,
    hang_after,
    tell_verdict,
)
from tui.exitcodes import EXIT_OK


class ReplayCommand:
    name = "replay"
    help = "show a recording (--record FILE.jsonl) in the TUI, or snapshot it"
    description = None

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("recording", help="a .jsonl file written by --record")
        parser.add_argument("--snapshot", metavar="PATH", help="write the recording's snapshot JSON and exit")
        parser.add_argument("--speedscope", metavar="FILE.json",
                            help="write the recording's stack samples as a speedscope file (0600) and exit")
        add_hang_after_argument(parser)
        add_comparison_arguments(parser)

    def run(self, args: argparse.Namespace) -> int:
        if args.speedscope is not None:
            return _replay_to_speedscope(args)
        if args.snapshot is not None:
            return _replay_to_snapshot(args)
        from probes.outputs import RecordingError, load_recording

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
        from tui.app import exit_status, make_app

        app = make_app(replay_frames=frames, replay_notice=notice, comparison=_comparison(args),
                       hang_after_s=hang_after(args))
        app.run()
        return exit_status(app)


def _comparison(args: argparse.Namespace):
    """What the replayed pace is measured with: what the recording's header carries (the model, tokens per iteration,
    peak and baseline resolved live, from files this machine may not have) under the options given now."""
    from probes.outputs import read_header
    from probes.reference import recorded_inputs

    return comparison_inputs(args, recorded=recorded_inputs(read_header(args.recording)))


def _replay_to_snapshot(args: argparse.Namespace) -> int:
    """`gputop replay REC --snapshot OUT`: fold the recording as it is read, holding only the Monitor's window."""
    from probes.monitoring import Monitor
    from probes.outputs import RecordingError, read_recording, skipped_notice, write_json_atomic
    from probes.view import MonitorProtocol

    comparison = _comparison(args)
    check_writable(args.snapshot, "snapshot")
    monitor: MonitorProtocol | None = None
    skipped: list = []
    whole = 0
    try:
        for frame in read_recording(args.recording, skipped):
            if monitor is None:  # frames that carry their node (agents' streams) are merged node by node
                from probes.monitoring import ClusterMonitor

                kind = ClusterMonitor if frame.node is not None else Monitor
                monitor = kind(hang_after_s=hang_after(args), comparison=comparison, replay=True)
            monitor.ingest(frame)
            whole += 1
            last = frame
    except RecordingError as exc:
        raise UsageError(str(exc)) from None
    notice = skipped_notice(args.recording, skipped, whole)
    if not whole or monitor is None:  # the monitor comes with the first frame
        raise UsageError(notice or f"{args.recording} holds no frames")
    if notice:
        print(f"gputop: {notice}", file=sys.stderr)
    monitor.settle(now=last.time)  # across nodes: the last round, whichever node sent last
    write_json_atomic(monitor.snapshot(), args.snapshot)
    if monitor.view is not None:  # the last line, as a headless live run ends: the answer on the terminal
        tell_verdict(monitor.view)
    return EXIT_OK


def _replay_to_speedscope(args: argparse.Namespace) -> int:
    """`gputop replay REC --speedscope OUT`: every stack sample the recording kept, for speedscope.app."""
    from probes import __version__
    from probes.outputs import RecordingError, load_recording, speedscope_document, write_json_atomic

    check_writable(args.speedscope, "speedscope file")
    try:
        recording = load_recording(args.recording)
    except RecordingError as exc:
        raise UsageError(str(exc)) from None
    notice = recording.notice()
    if notice:
        print(f"gputop: {notice}", file=sys.stderr)
    document = speedscope_document(recording.frames, name=Path(args.recording).name,
                                   exporter=f"gputop {__version__}")
    samples = sum(sum(profile["weights"]) for profile in document["profiles"])
    if not samples:
        raise UsageError(f"{args.recording} holds no stack samples (recorded with --no-stacks, or py-spy could not "
                         "read the target): nothing to draw")
    write_json_atomic(document, args.speedscope)  # a temporary file renamed into place: 0600
    print(f"gputop: {samples} stack samples of {len(document['profiles'])} threads written to {args.speedscope} "
          "(open it at https://www.speedscope.app)", file=sys.stderr)
    return EXIT_OK
