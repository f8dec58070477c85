"""`gputop --slurm-job J` across nodes: one `gputop agent` per node of the job, started through Slurm
(`srun --jobid J --overlap` on each node, probes/sensors/slurm.py), their streams merged by
probes/monitoring/cluster.py into one
job: every rank with its node, the job's verdict across nodes, a line per node, lost nodes said.

It is the path where this node runs no task of the job (a login node), or where --across-nodes asks for it.
Headless (--snapshot, --duration, --record) or in the TUI. The agents run from this installation: the same
Python and the same PYTHONPATH (srun passes the environment on), which a cluster keeps on a shared filesystem;
a node that cannot run it is lost with what its srun said.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import threading

from tui.commands.shared import UsageError, check_writable, hang_after, tell_recording, tell_verdict
from tui.exitcodes import EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_OK

DEFAULT_DURATION_S = 10.0


SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10")  # never a password prompt: a host refuses, or not
# The ssh command and its own options for --hosts, as git's GIT_SSH_COMMAND: a key, a config file, a jump host.
SSH_COMMAND_VARIABLE = "GPUTOP_SSH_COMMAND"
SSH_FAILED = 255  # ssh's exit status for its own failure (no connection, refused), not the remote command's


def agent_argv(args: argparse.Namespace, target: list[str] | None = None) -> list[str]:
    """The agent's command line on every node: this Python, this gputop, the job and the sampling options."""
    target = target if target is not None else ["--slurm-job", str(args.slurm_job)]
    argv = [sys.executable, "-m", "tui", "agent", *target, "--interval", f"{args.interval:g}"]
    if args.rate is not None:
        argv += ["--rate", f"{args.rate:g}"]
    if args.no_gpu:
        argv.append("--no-gpu")
    if args.no_stacks:
        argv.append("--no-stacks")
    if args.hang_after is not None:
        argv += ["--hang-after", f"{args.hang_after:g}"]
    return argv


def agent_specs(args: argparse.Namespace):
    """One AgentSpec per node: from the test-only --agent-command, or one srun per node of the Slurm job."""
    from probes.monitoring import AgentSpec, SlurmError, agent_step_command, job_nodes

    if args.agent_command:
        return [AgentSpec(f"agent-{i + 1}", tuple(shlex.split(command)))
                for i, command in enumerate(args.agent_command)]
    if args.hosts:
        return [AgentSpec(host, ssh_agent_command(host, agent_argv(args, ["--follow"])), unreachable_status=SSH_FAILED)
                for host in hosts(args.hosts)]
    nodes = job_nodes(args.slurm_job)
    if isinstance(nodes, SlurmError):
        raise UsageError(f"--slurm-job {args.slurm_job}: {nodes.reason}")
    argv = agent_argv(args)
    return [AgentSpec(node, agent_step_command(args.slurm_job, node, argv)) for node in nodes]


def hosts(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise UsageError(f"--hosts names the hosts to merge, comma-separated (a,b,c), got {text!r}")
    bad = [name for name in names if name.startswith("-") or any(c.isspace() for c in name)]
    if bad:
        raise UsageError(f"--hosts: {bad[0]!r} is not a host name")
    return names


def ssh_command() -> tuple[str, ...]:
    """The ssh program and options: $GPUTOP_SSH_COMMAND split as a shell would (`ssh -i KEY -F CONFIG`), else
    `ssh`. OpenSSH reads ~/.ssh from the passwd entry's home, not $HOME: this is how a key or a config of one's
    own reaches it."""
    text = os.environ.get(SSH_COMMAND_VARIABLE, "")
    if not text.strip():
        return ("ssh",)
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise UsageError(f"{SSH_COMMAND_VARIABLE}: cannot split {text!r} as a shell would: {exc}") from None


def ssh_agent_command(host: str, argv: list[str]) -> tuple[str, ...]:
    """ssh to `host` running the agent: the remote shell gets one quoted command line, with this PYTHONPATH
    (the installation is expected at the same path there, as on a shared filesystem). BatchMode=yes comes after
    the options of $GPUTOP_SSH_COMMAND: ssh keeps an option's first value, so one given there on purpose wins."""
    path = os.environ.get("PYTHONPATH")
    path = os.pathsep.join(os.path.abspath(p) for p in path.split(os.pathsep) if p) if path else None
    remote = (["env", f"PYTHONPATH={path}"] if path else []) + argv
    return (*ssh_command(), *SSH_OPTIONS, host, "--", shlex.join(remote))


def run_across_nodes(args: argparse.Namespace) -> int:
    from probes.monitoring import AgentStreams, ClusterMonitor, run_merge
    from probes.outputs import write_json_atomic

    if args.hosts and (args.slurm_job is not None or args.agent_command):
        raise UsageError("--hosts starts the agents over ssh: give it without --slurm-job (Slurm starts them)")
    for flag, given in (("--list", args.list), ("--flamegraph", args.flamegraph), ("--native", args.native),
                        ("--log", args.log)):
        if given:
            raise UsageError(f"{flag} reads one node: it does not work across nodes")
    check_writable(args.snapshot, "snapshot")
    check_writable(args.record, "recording")
    specs = agent_specs(args)
    recorder = _recorder(args)
    monitor = ClusterMonitor(hang_after_s=hang_after(args), recorder=recorder, interval_s=args.interval,
                             expected_nodes=[s.node for s in specs] if not args.agent_command else ())
    headless = args.snapshot is not None or args.duration is not None
    where = ", ".join(s.node for s in specs)
    print(f"gputop: starting an agent on {len(specs)} node{'s' if len(specs) != 1 else ''} ({where})", file=sys.stderr)
    streams = AgentStreams(specs)
    if not headless:
        status = _run_tui(args, streams, monitor)
        tell_recording(recorder)
        return status
    stop = threading.Event()
    previous_handler = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    told: set[tuple[str, str]] = set()

    def tell(view) -> None:  # each node's change of state, once, on stderr: a headless run has no header
        for status in view.nodes:
            if status.state in ("lost", "no_task") and (status.name, status.state) not in told:
                told.add((status.name, status.state))
                print(f"gputop: node {status.line()}", file=sys.stderr)

    interrupted = False
    try:
        run_merge(streams, monitor, stop, interval_s=args.interval, duration_s=args.duration or DEFAULT_DURATION_S,
                  on_view=tell)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        streams.close()
        monitor.close()
    tell_recording(recorder)
    if monitor.view is None:
        monitor.merge()  # the nodes' last state: each lost one with what its agent or srun said
        said = "; ".join(s.line() for s in monitor.statuses) or "no agent answered"
        print(f"gputop: no frame came from any node ({said})", file=sys.stderr)
        return EXIT_INTERRUPTED if interrupted else EXIT_INCOMPLETE
    if args.snapshot is not None:
        write_json_atomic(monitor.snapshot(), args.snapshot)
        if args.snapshot != "-":
            print(f"gputop: snapshot of {len(monitor.nodes)} nodes written to {args.snapshot}", file=sys.stderr)
    tell_verdict(monitor.view)
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_INCOMPLETE if monitor.record_problem else EXIT_OK


def _recorder(args: argparse.Namespace):
    from probes.monitoring import recording_meta
    from probes.outputs import Recorder

    if not args.record:
        return None
    meta = recording_meta(None, hang_after(args))
    meta.update(across_nodes=True, slurm_job=str(args.slurm_job) if args.slurm_job is not None else None,
                hosts=args.hosts)
    try:
        return Recorder(args.record, meta=meta)
    except OSError as exc:
        raise UsageError(f"cannot write the recording {args.record}: {exc.strerror or exc}") from None


def _run_tui(args: argparse.Namespace, streams, monitor) -> int:
    from tui.app import exit_status, make_app

    app = make_app(cluster=(streams, monitor), hang_after_s=hang_after(args))
    try:
        app.run()
    finally:
        streams.close()
        monitor.close()
    return exit_status(app)
