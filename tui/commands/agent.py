"""`gputop agent`: this node's part of a job, as frames on stdout, for a gputop elsewhere to merge.

Headless and without a screen: it watches one job (--pid, --slurm-job) or every training job on this node
(--follow) and writes what `--record` writes, to stdout: a header line, then one JSON frame a tick per watched
target, each marked with this node's name (SLURMD_NODENAME under Slurm, else the hostname; the PIDs in a
frame are this node's own). A gputop on another node starts one agent per node (through `srun --overlap`, or
ssh) and reads the streams; `gputop replay` reads a saved stream as it reads any recording.

With --slurm-job, a node the job holds where no task of it runs (its tasks there have ended, or none was placed
there) is a fact to report, not a failure: the agent writes, each tick, a note line in place of frames saying so
with what Slurm says (the job's steps on this node, srun's words on how its tasks here ended: probes/sensors/slurm.py
agent_target), asks Slurm again every SLURM_RECHECK_S whether a task of the job has started here (then watches
it), and does the same once the tasks it watched here end. The merging gputop shows such a node as having no
task, never as lost.

It stops when the job ends (--pid; --slurm-job: when Slurm no longer runs the job here), when its reader goes
away (stdout closed: the merging gputop quit or lost the node), or on SIGTERM / SIGHUP / Ctrl-C, and always stops
its py-spy children. It imports no Textual: an agent starts on every node of a job, and must start fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import select
import signal
import sys
import threading
import time

from tui.commands.shared import (
    UsageError,
    add_follow_argument,
    add_monitoring_arguments,
    add_pid_argument,
    add_process_only_argument,
    add_sampling_arguments,
    add_slurm_job_argument,
    check_one_job_or_follow,
    check_target,
    engine_config,
    hang_after,
    node_name,
    silence_stdout,
)
from tui.exitcodes import EXIT_INTERRUPTED, EXIT_OK

# With --slurm-job and no task of the job on this node: how often Slurm is asked again whether one has started
# (each ask is a few RPCs to slurmctld, made only by agents of nodes without a task).
SLURM_RECHECK_S = 10.0


class AgentCommand:
    name = "agent"
    help = "headless: this node's part of a job as JSON frames on stdout, for a gputop on another node to merge"
    description = ("Watch one job (--pid, --slurm-job) or every training job on this node (--follow) and write "
                   "one JSON frame a tick per target to stdout, in the recording format (a header line first), "
                   "each frame marked with this node's name. Stops when the job ends, when stdout is closed, or "
                   "on SIGTERM.")

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        which = parser.add_mutually_exclusive_group()
        add_pid_argument(which)
        add_slurm_job_argument(which)
        add_follow_argument(which)
        add_sampling_arguments(parser)
        add_process_only_argument(parser)
        add_monitoring_arguments(parser)
        # An agent runs beside a job for as long as it is asked to: never pause the target (no --native,
        # --blocking), as `gputop serve` does not.
        parser.set_defaults(native=False, blocking=False)

    def run(self, args: argparse.Namespace) -> int:
        if args.slurm_job is None:
            check_one_job_or_follow(args, "agent")
            return stream_frames(args, sys.stdout)
        return stream_frames(args, sys.stdout, resolve_agent_slurm_job(args))


def resolve_agent_slurm_job(args: argparse.Namespace):
    """--slurm-job on this node: args.pid set to the slurmstepd of the job's tasks here, and None; where the job
    holds this node but no task of it runs here, what Slurm says of that (a NoTaskHere, said instead of frames); a
    UsageError otherwise (no such job, one that does not run or does not hold this node)."""
    from probes.monitoring import NoTaskHere, SlurmError, agent_target

    found = agent_target(args.slurm_job, node_name())
    if isinstance(found, SlurmError):
        raise UsageError(f"--slurm-job {args.slurm_job}: {found.reason}")
    if isinstance(found, NoTaskHere):
        return found
    args.pid = found[0]
    check_target(args.pid)
    return None


class _SlurmTasks:
    """--slurm-job: whether a task of the job runs on this node, asked of Slurm at most every SLURM_RECHECK_S
    while none does (at once when the watched tasks have just ended)."""

    def __init__(self, step, node: str, no_task) -> None:
        self.step, self.node, self.no_task = step, node, no_task
        self._asked = time.monotonic() if no_task is not None else None

    def now(self, *, ended: bool = False):
        """The slurmstepd PID of the job's tasks here to watch, the NoTaskHere to say, or a SlurmError (the job has
        ended, or no longer holds this node)."""
        from probes.monitoring import NoTaskHere, SlurmError, agent_target

        if not ended and self.no_task is not None and self._asked is not None and \
                time.monotonic() - self._asked < SLURM_RECHECK_S:
            return self.no_task
        self._asked = time.monotonic()
        found = agent_target(self.step, self.node)
        if isinstance(found, NoTaskHere):
            self.no_task = found.keeping_times(self.no_task)
            return self.no_task
        if isinstance(found, SlurmError):
            return found
        self.no_task = None
        return found[0]


def stream_frames(args: argparse.Namespace, out, no_task=None) -> int:
    """Write the header, then every tick's frames (with --slurm-job where no task of the job runs here: a note
    saying so, from `no_task` on), to `out` until the job ends, `out` closes or a signal."""
    from probes.frame import to_jsonable
    from probes.monitoring import AgentNote, NodeWatch, SlurmError, agent_note_line, recording_meta
    from probes.outputs import json_line, recording_header

    node = node_name()
    slurm = _SlurmTasks(args.slurm_job, node, no_task) if getattr(args, "slurm_job", None) is not None else None
    meta = recording_meta(args.pid, hang_after(args))
    meta.update(node=node, written_by="gputop agent", follow=args.follow,
                slurm_job=str(args.slurm_job) if getattr(args, "slurm_job", None) is not None else None)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGHUP)}
    watch = NodeWatch(engine_config(args), pid=args.pid, follow=args.follow)
    reader_gone = _ReaderGone(out)
    interval = watch.config.interval_s
    try:
        out.write(json_line(recording_header(meta)))
        out.flush()
        next_tick = time.monotonic() + interval
        while not stop.wait(max(0.0, next_tick - time.monotonic())):
            if reader_gone():
                return EXIT_OK
            ticked = watch.tick()
            for each in ticked:
                out.write(json_line(to_jsonable(dataclasses.replace(each.frame, node=node))))
            ended = not args.follow and bool(ticked) and not any(each.frame.target.alive for each in ticked)
            if slurm is not None and (ended or not watch.watched):
                for each in ticked:  # the job's tasks here have ended: what Slurm says of that comes next
                    watch.drop(each.root_pid)
                found = slurm.now(ended=ended)
                if isinstance(found, SlurmError):
                    out.flush()
                    print(f"gputop agent: --slurm-job {args.slurm_job} on {node}: {found.reason}", file=sys.stderr,
                          flush=True)
                    return EXIT_OK
                if isinstance(found, int):
                    watch.watch(found, f"Slurm job {args.slurm_job}")
                else:
                    out.write(agent_note_line(AgentNote(node, time.time(), found)))
            elif ended:
                out.flush()
                print(f"gputop agent: PID {args.pid} has ended on {node}", file=sys.stderr, flush=True)
                return EXIT_OK
            out.flush()
            next_tick += interval
            if next_tick < time.monotonic():  # fell behind: start afresh rather than firing a burst
                next_tick = time.monotonic() + interval
        return EXIT_OK
    except BrokenPipeError:  # the reader went away mid-write: that is how a merging gputop says "enough"
        silence_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        watch.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _ReaderGone:
    """Whether the reading end of stdout has closed, asked without writing: with --follow on a node with no job
    nothing is written for a long time, and the agent must not outlive the gputop that started it."""

    def __init__(self, out) -> None:
        self._poll = None
        try:
            fd = out.fileno()
        except (AttributeError, OSError, ValueError):  # not a real file (a test's buffer): never "gone"
            return
        self._poll = select.poll()
        self._poll.register(fd, 0)  # no events asked: POLLERR / POLLHUP come anyway when the reader closes

    def __call__(self) -> bool:
        if self._poll is None:
            return False
        return any(events & (select.POLLERR | select.POLLHUP | select.POLLNVAL) for _, events in self._poll.poll(0))

