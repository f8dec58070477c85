"""`gputop --pid PID`, the default command: watch a training job live in the TUI, or headless for --duration
seconds writing a snapshot (--snapshot) and/or a recording (--record). Its options are gputop's own.

Without a PID it finds the job itself (probes/jobs/census.py): `--list` prints this machine's training jobs
(`--json` as JSON); in a terminal the job picker (tui/picker.py) opens, or the only job is attached at once
with a note; without a terminal the list is printed. No job: one line and EXIT_NO_JOB.

Textual is imported only when the TUI starts, so the headless path never loads it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from dataclasses import dataclass

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
    tell_recording,
    tell_verdict,
)
from tui.exitcodes import EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_NO_JOB, EXIT_OK

DEFAULT_SNAPSHOT_DURATION_S = 10.0


class AttachCommand:
    name = None  # the default: `gputop --pid PID`, its options on gputop's own parser
    help = "Why is my training job slow, or is it hung? Attach to its PID and see, with evidence."
    description = None  # gputop's own --help describes it, with `help`

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        which = parser.add_mutually_exclusive_group()
        add_pid_argument(which)
        add_slurm_job_argument(which)
        parser.add_argument("--list", action="store_true",
                            help="print this machine's training jobs (Python processes that import torch, grouped "
                                 "by launcher and rank) and exit; what `gputop` with no PID lets you pick from")
        parser.add_argument("--json", action="store_true", help="with --list: the jobs as JSON")
        add_process_only_argument(parser)
        add_sampling_arguments(parser)
        parser.add_argument("--native", action="store_true",
                            help="include native (C/C++) frames; pauses the target while sampling")
        parser.add_argument("--blocking", action="store_true",
                            help="pause the target for each stack sample (py-spy's default; can slow torch 5-15x)")
        add_monitoring_arguments(parser)
        parser.add_argument("--fr-dump", action="store_true",
                            help="ask each rank for a PyTorch Flight Recorder dump once, at start, where its job "
                                 "enabled one: write NCCL's debug-info pipe (TORCH_NCCL_DEBUG_INFO_PIPE_FILE) and "
                                 "read the dump it writes, or read its worker server (TORCH_WORKER_SERVER_SOCKET) "
                                 "at once; says what it asked of which rank, and what a rank without a trigger "
                                 "must set. Without it gputop only reads what the job exposes (in the TUI: f)")
        parser.add_argument("--record", metavar="FILE.jsonl", help="append every frame to a recording")
        parser.add_argument("--snapshot", metavar="PATH",
                            help="headless: sample for --duration S (without it, "
                                 f"{DEFAULT_SNAPSHOT_DURATION_S:g} s), write one JSON document ('-' = stdout), say "
                                 "the verdict on stderr and exit")
        parser.add_argument("--flamegraph", metavar="FILE.svg",
                            help="headless: also have py-spy draw the whole job's stacks over the run, a flame "
                                 "graph (.svg) or a speedscope file (.json); written 0600")
        parser.add_argument("--duration", type=positive_float, default=None, metavar="S",
                            help=f"headless run length in seconds (default {DEFAULT_SNAPSHOT_DURATION_S:g} with "
                                 "--snapshot or --flamegraph; --record without it records the TUI's session)")
        parser.add_argument("--across-nodes", action="store_true",
                            help="with --slurm-job: start a `gputop agent` on every node of the job (srun --overlap) "
                                 "and merge them, even when this node runs a task of it (the default where it "
                                 "runs none, as on a login node)")
        parser.add_argument("--hosts", metavar="A,B,...",
                            help="without Slurm: start `gputop agent --follow` on each host over ssh (your ssh "
                                 "config, BatchMode=yes) and merge their training jobs into one; "
                                 "$GPUTOP_SSH_COMMAND replaces `ssh` with a command and options of your own "
                                 "(\"ssh -i KEY -F CONFIG\"), as git's GIT_SSH_COMMAND")
        # Test-only: the agents' commands, one per node, instead of srun's (tests/e2e/test_cluster_e2e.py).
        parser.add_argument("--agent-command", action="append", default=None, help=argparse.SUPPRESS)

    def run(self, args: argparse.Namespace) -> int:
        across = args.slurm_job is not None and (args.across_nodes or not runs_here(args.slurm_job))
        if args.agent_command or args.hosts or across:
            if args.fr_dump:
                raise UsageError("--fr-dump asks the ranks of this node: run gputop --pid PID --fr-dump on the node "
                                 "where the ranks run")
            from tui.across_nodes import run_across_nodes

            return run_across_nodes(args)
        if args.across_nodes:
            raise UsageError("--across-nodes merges a Slurm job's nodes: use it with --slurm-job JOBID")
        resolve_slurm_job(args)
        if args.json and not args.list:
            raise UsageError("--json prints the job list: use it with --list (gputop --list --json)")
        if args.list and args.pid is not None:
            raise UsageError("--list finds the jobs itself: give --list or --pid, not both")
        attach_note = None
        if args.pid is None:
            if any(value is not None for value in (args.snapshot, args.duration, args.record, args.flamegraph)):
                raise UsageError("say which process to sample: gputop --pid PID (find it with: gputop --list)")
            chosen = choose_job(args)
            if not isinstance(chosen, ChosenJob):
                return chosen  # listed, or nothing to attach to: the exit status
            args.pid, attach_note = chosen.root_pid, chosen.note
            if attach_note:  # on the screen too; this copy stays in the terminal after the TUI closes
                print(f"gputop: {attach_note}", file=sys.stderr)
        check_target(args.pid)
        check_writable(args.snapshot, "snapshot")
        check_writable(args.record, "recording")
        if args.flamegraph == "-":
            raise UsageError("--flamegraph needs a file (py-spy writes it): --flamegraph out.svg, or out.json for "
                             "speedscope")
        check_writable(args.flamegraph, "flame graph")
        comparison = comparison_inputs(args)
        if args.duration is not None and args.snapshot is None and not args.record and args.flamegraph is None:
            # Sampling for S seconds and keeping nothing would print nothing and exit 0: say what is missing.
            raise UsageError("--duration needs --snapshot PATH ('-' for stdout), --record FILE.jsonl or --flamegraph "
                             "FILE: it sets how long a headless run samples before writing them")
        if attach_note is None and args.slurm_job is None and not args.process_only:
            check_a_job(args.pid, read_gpu=not args.no_gpu)
        if args.snapshot is not None or args.duration is not None or args.flamegraph is not None:
            return run_headless(args, comparison)
        from probes.monitoring import Engine
        from tui.app import exit_status, make_app

        startup_checks = attach_checks(args)
        recorder = open_recorder(args, comparison)
        engine = Engine(args.pid, engine_config(args))
        app = make_app(engine=engine, recorder=recorder, comparison=comparison, hang_after_s=hang_after(args),
                       startup_checks=startup_checks, start_notice=attach_note)
        try:
            app.run()
        finally:
            engine.close()
        tell_recording(recorder)  # the screen is gone: a problem it showed is said again here
        return exit_status(app)


def runs_here(step) -> bool:
    """Whether this node runs a task of the Slurm job (then --slurm-job watches it here); Slurm missing or no
    such job is a UsageError, said before anything starts."""
    from probes.monitoring import SlurmError, show_job, slurm_missing, step_root

    problem = slurm_missing() or show_job(step)
    if isinstance(problem, SlurmError):
        raise UsageError(f"--slurm-job {step}: {problem.reason}")
    return not isinstance(step_root(step), SlurmError)


def check_a_job(pid: int, *, read_gpu: bool) -> None:
    """A PID named by the user that is no training job (the machine's init, the shell gputop runs in: see
    census.not_a_training_job) is a UsageError, said in one line with the jobs `--list` finds, before anything
    starts."""
    from probes.monitoring import JobCensus, not_a_training_job
    from tui.joblist import not_a_job_line

    found = not_a_training_job(pid, lambda: JobCensus(read_gpu=read_gpu))
    if found is not None:
        raise UsageError(not_a_job_line(found))


@dataclass(frozen=True)
class ChosenJob:
    """The job to attach to when no PID was given: its root PID, and the note to show (the only job)."""

    root_pid: int
    note: str | None = None


def choose_job(args: argparse.Namespace) -> ChosenJob | int:
    """No PID given: print the list (--list, or no terminal) and return the exit status, or return the job to
    attach: the only one, or the one picked in the picker. No job: one line, EXIT_NO_JOB."""
    from probes.monitoring import JobCensus, list_jobs, sort_jobs
    from tui.joblist import NO_JOB_LINE, json_document, one_job_note, text_table

    interactive = not args.list and sys.stdin.isatty() and sys.stdout.isatty()
    # The first answer is one reading, shown at once: in a terminal from the census the picker goes on scanning (its
    # first refresh brings each job's CPU%), a list without CPU% (it would cost a second reading a window later).
    census = JobCensus(read_gpu=not args.no_gpu)
    try:
        reading = census.scan() if interactive else list_jobs(census)
        jobs = sort_jobs(reading.jobs, "cpu", now=reading.time)  # no CPU% yet: by root PID, as ps lists
        if not interactive:
            if args.json:
                print(json_document(reading, jobs))
            elif jobs:
                print(text_table(jobs, reading.time))
            if reading.gpu_note and not args.json:
                print(f"gputop: {reading.gpu_note}", file=sys.stderr)
        if not jobs:
            print(f"gputop: {NO_JOB_LINE}", file=sys.stderr)
            return EXIT_NO_JOB
        if not interactive:
            if not args.list:
                print("gputop: no PID given and no terminal to pick in: attach with gputop --pid PID",
                      file=sys.stderr)
            return EXIT_OK
        if len(jobs) == 1:
            return ChosenJob(jobs[0].root_pid, note=one_job_note(jobs[0]))
        from tui.picker import JobPicker

        chosen_pid = JobPicker(census.scan, initial=reading).run()
    finally:
        census.close()
    return EXIT_OK if chosen_pid is None else ChosenJob(chosen_pid)


def attach_checks(args: argparse.Namespace):
    """`gputop doctor`'s checks that the frames cannot show (PID namespace, GPM, the job's Flight Recorder
    variables), asked once on attach; the monitor carries what is not ok into the header and the snapshot."""
    from probes.doctor import startup_blind_spots

    return startup_blind_spots(args.pid, gpu=not args.no_gpu)


def tell_cannot_see(view, told: set[str]) -> None:
    """On stderr, once each: what gputop cannot see, with the fix (a headless run has no header to say it); in its
    one short line where it has one (no GPU on this machine: nothing to fix, said on every run)."""
    for check in view.cannot_see:
        if check.status == "cannot" and check.name not in told:
            told.add(check.name)
            if check.brief:
                print(f"gputop: {check.brief}", file=sys.stderr)
                continue
            fix = f"; fix: {check.fix}" if check.fix else ""
            print(f"gputop: cannot see ({check.name}): {check.finding}{fix}", file=sys.stderr)


def tell_flight_recorder_asks(frame) -> None:
    """On stderr, as it happens: what --fr-dump asked of which rank, and the dumps that came of it."""
    for ask in frame.collectives.asks if frame.collectives is not None else ():
        print(f"gputop: {ask.line}", file=sys.stderr)


def open_recorder(args: argparse.Namespace, comparison=None):
    """The Recorder for --record (None without it); a file that cannot be opened is a usage error."""
    from probes.monitoring import recording_meta
    from probes.outputs import Recorder

    if not args.record:
        return None
    try:
        return Recorder(args.record, meta=recording_meta(args.pid, hang_after(args), comparison))
    except OSError as exc:
        raise UsageError(f"cannot write the recording {args.record}: {exc.strerror or exc}") from None


def run_headless(args: argparse.Namespace, comparison=None) -> int:
    """Sample for --duration seconds; write the snapshot and/or the recording. Ctrl-C still writes."""
    from probes.monitoring import Engine, Monitor, run_ticks
    from probes.outputs import write_json_atomic

    duration = args.duration or DEFAULT_SNAPSHOT_DURATION_S
    recorder = open_recorder(args, comparison)
    monitor = Monitor(hang_after_s=hang_after(args), comparison=comparison, recorder=recorder,
                      startup_checks=attach_checks(args))
    engine = Engine(args.pid, engine_config(args))
    profile = None
    if args.flamegraph is not None:
        from probes.monitoring import ProfileRecording

        profile = ProfileRecording(engine.root_pid, args.flamegraph, native=args.native)
    stop = threading.Event()
    interrupted = False
    stopped_by: list[str] = []  # the signal that ended the run before --duration, if one did

    def on_sigterm(*_) -> None:
        stopped_by.append("SIGTERM")
        stop.set()

    previous_handler = signal.signal(signal.SIGTERM, on_sigterm)
    told_record_problem = False
    told_job_note = False
    told_cannot_see: set[str] = set()
    try:
        for frame in run_ticks(engine, stop, duration_s=duration):
            tell_cannot_see(monitor.ingest(frame), told_cannot_see)
            tell_flight_recorder_asks(frame)
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
        for line in engine.awaited_dumps():  # asked with --fr-dump, not come before --duration ended
            print(f"gputop: {line} when the run ended", file=sys.stderr)
        engine.close()
        monitor.close()
        profile_problem = profile.finish() if profile is not None else None
    if profile is not None:
        print(f"gputop: {profile_problem}" if profile_problem else
              f"gputop: {profile.format} of PID {engine.root_pid} and its children written to {args.flamegraph}",
              file=sys.stderr)
    tell_recording(recorder, problem_told=told_record_problem)
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
    tell_verdict(monitor.view)
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_INCOMPLETE if monitor.record_problem or profile_problem else EXIT_OK
