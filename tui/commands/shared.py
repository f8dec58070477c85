"""What gputop's commands share: the argument types, the options more than one command takes (each declared
here once, so its flag, default and help read the same everywhere), the checks of what the user named, and
the one `engine_config(args)` that turns the monitoring options into an EngineConfig.

A command raises UsageError for bad input; tui/cli.py turns it into one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Callable

from probes.models import DTYPES as PEAK_DTYPES
from probes.models import PRESETS
from probes.monitoring import DEFAULT_HANG_AFTER_S, DEFAULT_INTERVAL_S, MIN_INTERVAL_S, EngineConfig


class UsageError(Exception):
    """A mistake in what the user asked for; the message is the one line they will see."""


def node_name() -> str:
    """The name this node goes by in its job: Slurm's (the one squeue and scontrol show), else the hostname. The
    agent marks its frames with it and `serve` its series (the host label)."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


# --- argument types: each mistake reads the same in every command ----------------------------------------


def positive(convert: Callable[[str], float], kind: str) -> Callable[[str], float]:
    """An argparse type: `convert` the text, and insist the value is greater than 0 (NaN is not)."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
        return value

    return parse


positive_float = positive(float, "a number")
positive_int = positive(int, "a whole number")


def interval(text: str) -> float:
    """Seconds between readings: positive, and no shorter than the engine can keep up with."""
    value = positive_float(text)
    if value < MIN_INTERVAL_S:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_INTERVAL_S} s, got {text}")
    return value


def pid(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a PID is a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a PID is a positive number, got {text}")
    return value


def slurm_job(text: str):
    from probes.monitoring import parse_step_id

    step = parse_step_id(text)
    if step is None:
        raise argparse.ArgumentTypeError(f"a Slurm job is JOBID or JOBID.STEP (12, 12.0, 12.batch), got {text!r}")
    return step


# --- options more than one command takes ------------------------------------------------------------------
# One function per run of options that the commands list in the same order, so each command's --help keeps
# its own order while every shared option is declared only here.


def add_pid_argument(parser_or_group: argparse._ActionsContainer) -> None:
    """--pid, on a parser or on a mutually exclusive group (serve's --pid or --follow)."""
    parser_or_group.add_argument("--pid", type=pid, help="the training process to watch (its workers are found); a "
                        "launcher (torchrun, mp.spawn's parent, bash, uv run) or any rank: the whole job is watched")


def add_slurm_job_argument(group: argparse._MutuallyExclusiveGroup) -> None:
    """--slurm-job, in the group that holds --pid: another way of naming the job to watch."""
    group.add_argument("--slurm-job", type=slurm_job, metavar="JOBID[.STEP]",
                       help="instead of --pid: the Slurm job (or step) whose tasks on this node to watch, ranks "
                            "from SLURM_PROCID (default step: the job's newest one here)")


def add_follow_argument(group: argparse._MutuallyExclusiveGroup) -> None:
    """--follow, in the group that holds --pid: every training job on this node instead of one."""
    group.add_argument("--follow", action="store_true",
                       help="watch every training job on this node: torchrun launchers, processes with RANK "
                            "set, Python processes holding a GPU; new ones are picked up, ended ones dropped")


def add_process_only_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--process-only", action="store_true",
                        help="watch only the --pid process and its workers, not the job around it")


def add_interval_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--interval", type=interval, default=DEFAULT_INTERVAL_S, metavar="S",
                        help=f"seconds between readings (default {DEFAULT_INTERVAL_S}, at least {MIN_INTERVAL_S})")


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    """How often a live target is read: --interval, --rate."""
    add_interval_argument(parser)
    parser.add_argument("--rate", type=positive_float, default=None, metavar="HZ",
                        help="py-spy stack samples per second per process, fixed (default: 5, dropping to 1 "
                             "while the picture holds still; see docs/benchmarks.md)")


def add_monitoring_arguments(parser: argparse.ArgumentParser) -> None:
    """What is read from a live target and what it is judged against: --no-gpu, --no-stacks, --log, the
    comparison options, --hang-after."""
    parser.add_argument("--no-gpu", action="store_true", help="do not read NVML")
    parser.add_argument("--no-stacks", action="store_true", help="do not run py-spy")
    parser.add_argument("--log", metavar="PATH", help="the target's log, to read its own iteration rate "
                        "(default: its stdout/stderr when they are files)")
    add_comparison_arguments(parser)
    add_hang_after_argument(parser)


def add_comparison_arguments(parser: argparse.ArgumentParser) -> None:
    """What the job's pace is measured against: the same flags live, headless, served and in replay."""
    parser.add_argument("--tokens-per-iter", type=positive_int, default=None, metavar="N",
                        help="tokens per optimizer iteration, to turn s/iter into tokens/s")
    parser.add_argument("--baseline", metavar="PROBE.json",
                        help="a `gputop probe --json` result for the target's model and batch: show its "
                             "observed s/iter against the probe's reference step, and the corrected MFU")
    parser.add_argument("--model", default=None, metavar="PRESET|config.json",
                        help=f"the target's model, a preset ({', '.join(PRESETS)}) or a Hugging Face config.json, "
                             "for the MFU from --tokens-per-iter without --baseline")
    add_peak_arguments(parser)


def add_peak_arguments(parser: argparse.ArgumentParser) -> None:
    """Which peak an MFU is measured against: --gpu, --peak-tflops, --dtype (mfu and the live monitor)."""
    parser.add_argument("--gpu", metavar="NAME", help='the GPU\'s name as nvidia-smi shows it, e.g. "NVIDIA H200" '
                                                      "(default: the one NVML reports)")
    add_peak_tflops_argument(parser)
    parser.add_argument("--dtype", choices=PEAK_DTYPES, default="bf16",
                        help="which of the GPU's dense peaks the MFU is measured against (default bf16)")


def add_peak_tflops_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--peak-tflops", type=positive_float, metavar="TF",
                        help="the GPU's dense peak in TFLOP/s, instead of gputop's table")


def add_hang_after_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hang-after", type=positive_float, default=None, metavar="S",
                        help="call the target hung after this long with no progress "
                             f"(default {DEFAULT_HANG_AFTER_S:g})")


# --- what the shared options mean ---------------------------------------------------------------------------


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """The EngineConfig the sampling and monitoring options ask for (`gputop --pid` and `gputop serve`)."""
    native = bool(args.native)
    return EngineConfig(
        interval_s=args.interval,
        stack_rate_hz=args.rate,
        native=native,
        nonblocking=not (args.blocking or native),  # py-spy cannot read native frames without pausing
        sample_stacks=not args.no_stacks,
        read_gpu=not args.no_gpu,
        log_path=args.log,
        tokens_per_iter=args.tokens_per_iter,
        process_only=args.process_only,
        fr_dump=getattr(args, "fr_dump", False),
    )


def hang_after(args: argparse.Namespace) -> float:
    return DEFAULT_HANG_AFTER_S if args.hang_after is None else args.hang_after


def comparison_inputs(args: argparse.Namespace, recorded=None):
    """What the target's progress is compared with (--baseline, --model, --tokens-per-iter, and the peak's
    --gpu, --peak-tflops, --dtype), over what the job says of itself: live, the shape and tokens per iteration
    its command line states (nanoGPT's, or a Hugging Face config.json it names); on replay, `recorded`
    (probes.reference.pace_inputs.RecordedInputs), what the recording's header carries. None when nothing gives a
    model."""
    from probes.reference import BaselineError, PeakOptions, load_comparison_inputs

    peak = PeakOptions(args.gpu, args.peak_tflops, args.dtype)
    try:
        if recorded is not None:
            from probes.reference import replayed_comparison_inputs

            return replayed_comparison_inputs(recorded, args.baseline, args.model, args.tokens_per_iter, peak)
        stated = None
        if getattr(args, "pid", None):
            from probes.reference import stated_model

            # A job may name its shape and tokens per iteration itself; its own figures win over a baseline's.
            stated = stated_model(args.pid, getattr(args, "log", None))
        return load_comparison_inputs(args.baseline, args.model, args.tokens_per_iter, peak=peak, stated=stated)
    except BaselineError as exc:
        raise UsageError(str(exc)) from None


# --- checks of what the user named, before anything starts ------------------------------------------------


def check_one_job_or_follow(args: argparse.Namespace, command: str) -> None:
    """For commands that watch one job (--pid, --slurm-job) or every job here (--follow): one of them is named,
    the PID is alive, and the options that narrow one target are not given with --follow."""
    resolve_slurm_job(args)
    if args.pid is None and not args.follow:
        raise UsageError(f"say what to watch: gputop {command} --pid PID, --slurm-job JOBID, or gputop {command} "
                         "--follow for every job on this node")
    if args.pid is not None:
        check_target(args.pid)
    elif args.log is not None:
        raise UsageError("--log names one target's log: use it with --pid, not --follow")
    if args.process_only and args.pid is None:
        raise UsageError("--process-only narrows one target: use it with --pid, not --follow")


def resolve_slurm_job(args: argparse.Namespace) -> None:
    """With --slurm-job, set args.pid to the slurmstepd of that step on this node; Slurm missing, no such job or
    no process of it here is a UsageError."""
    if getattr(args, "slurm_job", None) is None:
        return
    from probes.monitoring import SlurmError, step_root

    found = step_root(args.slurm_job)
    if isinstance(found, SlurmError):
        raise UsageError(f"--slurm-job {args.slurm_job}: {found.reason}")
    args.pid, _ = found


def check_target(target_pid: int) -> None:
    from probes.monitoring import target_exists

    if not target_exists(target_pid):
        raise UsageError(f"no process with PID {target_pid} (check it with: ps -p {target_pid})")


def check_writable(path: str | None, what: str) -> None:
    if path in (None, "-"):
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"cannot write the {what} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"cannot write the {what} {path}: no write permission in {folder}")


def tell_verdict(view) -> None:
    """On stderr, last in a headless run: the verdict in the words of the TUI's verdict line, so its answer is on
    the terminal and not only in the JSON (on stderr also when the JSON goes to stdout)."""
    from tui.panes.text import verdict_line

    print(f"gputop: verdict: {verdict_line(view.verdict, view.job)}", file=sys.stderr)


def tell_recording(recorder, *, problem_told: bool = False) -> None:
    """On stderr, once a run with --record ends: where the recording was written and how many frames this run
    added, as a snapshot says where it went; or, where the recording stopped (a full disk), why, unless the run
    has said so already."""
    if recorder is None:
        return
    if recorder.problem is None:
        frames = f"{recorder.frames} frame{'s' if recorder.frames != 1 else ''}"
        print(f"gputop: recording written to {recorder.path} ({frames})", file=sys.stderr)
    elif not problem_told:
        print(f"gputop: {recorder.problem}", file=sys.stderr)


def silence_stdout() -> None:
    """After a broken pipe (the reader went away), point stdout at /dev/null so the interpreter's final flush
    does not raise again and print a traceback (as Python's signal docs advise)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # stdout is no real file (a test's buffer)
        pass
