"""A real Slurm cluster for the tests: Debian's slurmctld and slurmd started as plain daemons on a configuration
written into a temporary folder, and stopped again. One node (this machine) by :func:`start_cluster`; two
namespaced nodes, each with its own slurmd and seeing only its own processes, by
:func:`start_namespaced_cluster` (the `slurm_two_nodes` fixture; tests/support/ns_nodes.py makes the nodes).

:func:`start_cluster` writes slurm.conf (no munge: auth/none and cred/none; proctrack/linuxproc and task/none,
so no cgroup is touched; state, spool, logs and PID files in the folder; ports picked free; the node as
``slurmd -C`` sees it, oversubscribed so a 2-task job fits on 2 cores), starts both daemons in their own
sessions and waits until ``sinfo`` shows the node idle. It raises :class:`ClusterUnavailable` with the reason
(the binary that is missing, or the daemons' last log lines) when the cluster cannot run here; the conftest
fixture turns that into a skip. :meth:`SlurmCluster.stop` kills both daemons and the job steps' slurmstepd
processes they left behind.
"""

from __future__ import annotations

import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from probes.sensors.slurm import SlurmError, SlurmStep

if TYPE_CHECKING:
    from support.ns_nodes import NodeSet

DAEMONS = ("slurmctld", "slurmd")
CLIENTS = ("srun", "sbatch", "scontrol", "squeue", "sinfo")
PARTITION = "debug"
START_TIMEOUT_S = 60.0
LOG_LINES_IN_REASON = 8


class ClusterUnavailable(Exception):
    """Why the cluster cannot run here: one line a skip reason can carry."""


@dataclass
class SlurmCluster:
    folder: Path
    conf: Path
    node: str  # the first node
    daemons: list[subprocess.Popen] = field(default_factory=list)  # on this machine: both, or slurmctld alone
    node_set: NodeSet | None = None  # the namespaced nodes, each running its own slurmd

    @property
    def nodes(self) -> list[str]:
        return [node.name for node in self.node_set.nodes] if self.node_set is not None else [self.node]

    @property
    def env(self) -> dict[str, str]:
        """The environment a client (srun, sbatch, scontrol, gputop) needs to reach this cluster."""
        return dict(os.environ, SLURM_CONF=str(self.conf))

    def stop(self) -> None:
        """Kill the daemons and every slurmstepd of this cluster (they outlive slurmd, with PID 1 as parent); the
        namespaced nodes with all their processes."""
        for proc in self.daemons:
            _kill_group(proc)
        if self.node_set is not None:
            self.node_set.teardown()
        for pid in _stepd_pids(self.folder):
            _kill_tree(pid)

    def cancel(self, job_id: str, timeout_s: float = 30.0) -> None:
        """scancel a job and wait until its slurmstepd processes are gone; kill what is left after the wait."""
        subprocess.run(["scancel", job_id], env=self.env, capture_output=True, timeout=30)
        deadline = time.monotonic() + timeout_s
        while _stepd_pids(self.folder, job_id) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in _stepd_pids(self.folder, job_id):
            _kill_tree(pid)

    def log_tail(self) -> str:
        logs = ["slurmctld", *(f"slurmd-{n}" for n in self.nodes)] if self.node_set is not None else DAEMONS
        return "; ".join(f"{name}: {_last_lines(self.folder / f'{name}.log')}" for name in logs)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _kill_tree(pid: int) -> None:
    """SIGKILL a slurmstepd and its tasks (killed alone, it would leave them to PID 1)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=5)


def _stepd_pids(folder: Path, job_id: str | None = None) -> list[int]:
    """slurmstepd processes of this cluster (of one job when given): those whose working directory is the
    cluster's folder (slurmd's, which they inherit), with the job in their title ('slurmstepd: [12.0]')."""
    pids = []
    for proc in psutil.process_iter(["name", "cmdline", "cwd"]):
        try:
            if proc.info["name"] != "slurmstepd" or proc.info["cwd"] != str(folder):
                continue
            if job_id is None or f"[{job_id}." in " ".join(proc.info["cmdline"] or ()):
                pids.append(proc.pid)
        except psutil.Error:
            continue
    return pids


def _last_lines(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no log)"
    return " | ".join(lines[-LOG_LINES_IN_REASON:]) or "(empty log)"


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _node_line() -> str:
    """The node as slurmd sees it (`slurmd -C`: NodeName, CPUs, sockets, RealMemory), its first line."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("NodeName=")), None)
    if line is None:
        raise ClusterUnavailable(f"`slurmd -C` did not describe this node: {out.stderr.strip() or out.stdout.strip()}")
    return line


@dataclass(frozen=True)
class ListedPid:
    """One row of ``scontrol listpids``: a process of a job step on this node."""

    pid: int
    step: SlurmStep
    local_id: int | None
    global_id: int | None


def list_pids(step: SlurmStep) -> tuple[ListedPid, ...] | SlurmError:
    """The processes of a job (or one step) on this node as ``scontrol listpids`` lists them (the cluster named by
    SLURM_CONF in this process's environment): the tests' own witness of a step's tasks, apart from the
    slurmstepd titles and cgroups gputop finds them by (probes/sensors/slurm.py)."""
    try:
        done = subprocess.run(["scontrol", "listpids", str(step)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return SlurmError(f"`scontrol listpids {step}`: {exc}")
    if done.returncode != 0:
        return SlurmError(f"`scontrol listpids {step}`: {(done.stderr or done.stdout).strip()}")
    rows = []
    for line in done.stdout.splitlines()[1:]:  # past the header: PID JOBID STEPID LOCALID GLOBALID
        fields = line.split()
        if len(fields) >= 3 and fields[0].isdigit():
            rows.append(ListedPid(pid=int(fields[0]), step=SlurmStep(fields[1], fields[2]),
                                  local_id=_number(fields, 3), global_id=_number(fields, 4)))
    return tuple(rows)


def _number(fields: list[str], index: int) -> int | None:
    return int(fields[index]) if len(fields) > index and fields[index].isdigit() else None


def write_conf(folder: Path, *, controller: str | None = None, nodes: dict[str, str] | None = None) -> tuple[Path, str]:
    """slurm.conf in `folder`, and the first node's name. By default one node, this machine as `slurmd -C` sees
    it, with the controller on it. `controller` (``name(address)``) and `nodes` ({name: address}) make a cluster
    of several nodes of this machine's size, each reached at its own address (tests/support/ns_nodes.py); their
    slurmd's spool, PID and log files are kept apart by Slurm's %n (the node's name)."""
    node_line = _node_line()
    if nodes is None:
        node = node_line.split()[0].split("=", 1)[1]
        node_lines = [f"{node_line.split(' UpTime=')[0]} State=UNKNOWN"]
        names = [node]
    else:
        hardware = " ".join(node_line.split(" UpTime=")[0].split()[1:])  # CPUs=2 Boards=1 ... RealMemory=...
        node_lines = [f"NodeName={name} NodeAddr={address} {hardware} State=UNKNOWN"
                      for name, address in nodes.items()]
        names = list(nodes)
    per_node = "-%n" if nodes is not None else ""
    ctld_port, slurmd_port = _free_ports(2)
    for sub in ("state", "spool"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    conf = folder / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=gputoptest",
        # Job ids of its own: two test clusters on one machine (two test runs at once) never both run a job 1,
        # whose slurmstepd gputop would take for its own job's. Above 999999, which the tests use as no job.
        f"FirstJobId={random.randrange(1_000_000, 60_000_000)}",
        f"SlurmctldHost={controller or names[0]}",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "AuthType=auth/none",
        "CredType=cred/none",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool'}{'/%n' if nodes is not None else ''}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / f'slurmd{per_node}.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / f'slurmd{per_node}.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ReturnToService=2",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "JobCompType=jobcomp/none",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "InactiveLimit=0",
        "KillWait=5",
        "MinJobAge=300",
        # Jobs of several tests share one small node: each may take its CPUs again.
        *node_lines,
        f"PartitionName={PARTITION} Nodes={','.join(names)} Default=YES MaxTime=INFINITE State=UP "
        "OverSubscribe=FORCE:4",
        "",
    ]))
    return conf, names[0]


def _node_states(env: dict[str, str], nodes: list[str]) -> dict[str, str]:
    """{node: state} as sinfo says it (idle, down, unknown, ...); empty when sinfo does not answer."""
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%N %T"], capture_output=True,
                             text=True, env=env, timeout=10)
    except subprocess.TimeoutExpired:
        return {}
    return dict(line.split(None, 1) for line in out.stdout.splitlines() if len(line.split()) == 2)


def _check_installed() -> None:
    missing = [name for name in (*DAEMONS, *CLIENTS) if shutil.which(name) is None]
    if missing:
        raise ClusterUnavailable(f"Slurm is not installed ({', '.join(missing)} missing): "
                                 "apt-get install slurmd slurmctld slurm-client")
    if os.geteuid() != 0:
        raise ClusterUnavailable("the test cluster runs slurmd as root (SlurmdUser=root): not root here")


def _start_daemon(cluster: SlurmCluster, daemon: str) -> subprocess.Popen:
    # -D: stay in the foreground, so the Popen is the daemon; -i (slurmctld): ignore state from a past run.
    extra = ["-i"] if daemon == "slurmctld" else []
    proc = subprocess.Popen(
        [daemon, "-D", *extra, "-f", str(cluster.conf)], env=cluster.env, cwd=cluster.folder,
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=(cluster.folder / f"{daemon}.stderr").open("w"))
    cluster.daemons.append(proc)
    return proc


def _wait_idle(cluster: SlurmCluster, exited) -> None:
    """Until sinfo shows every node of the cluster idle; ClusterUnavailable when a daemon exits (`exited()`
    names those that did) or after START_TIMEOUT_S."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while set((states := _node_states(cluster.env, cluster.nodes)).values()) != {"idle"} or \
            len(states) != len(cluster.nodes):
        gone = exited()
        if gone or time.monotonic() > deadline:
            why = ", ".join(gone) or f"nodes not idle after {START_TIMEOUT_S:g} s (states {states})"
            raise ClusterUnavailable(f"the test Slurm cluster did not start: {why}; {cluster.log_tail()}")
        time.sleep(0.2)


def start_cluster(folder: Path) -> SlurmCluster:
    """Start a one-node cluster in `folder`; ClusterUnavailable when it cannot run here."""
    _check_installed()
    conf, node = write_conf(folder)
    cluster = SlurmCluster(folder=folder, conf=conf, node=node)
    try:
        for daemon in DAEMONS:
            _start_daemon(cluster, daemon)
        _wait_idle(cluster, lambda: [f"{d} exited with {p.returncode}"
                                     for d, p in zip(DAEMONS, cluster.daemons, strict=True) if p.poll() is not None])
    except BaseException:
        cluster.stop()
        raise
    return cluster


def start_namespaced_cluster(folder: Path, count: int = 2) -> SlurmCluster:
    """A cluster of `count` namespaced nodes n1..nCOUNT (tests/support/ns_nodes.py): slurmctld on this machine,
    listening on the nodes' bridge, and in each node its own slurmd (`slurmd -D -f CONF -N nX` as the child of
    the node's PID 1), which sees only that node's processes. ClusterUnavailable when Slurm or the namespaces
    cannot run here."""
    from support.ns_nodes import NodesUnavailable, make_nodes

    _check_installed()
    try:
        node_set = make_nodes(count)
    except NodesUnavailable as exc:
        raise ClusterUnavailable(f"no namespaced nodes here: {exc}") from None
    cluster = None
    try:
        conf, first = write_conf(folder, controller=f"{socket.gethostname().split('.')[0]}({node_set.bridge_address})",
                                 nodes={node.name: node.address for node in node_set.nodes})
        cluster = SlurmCluster(folder=folder, conf=conf, node=first, node_set=node_set)
        _start_daemon(cluster, "slurmctld")
        for node in node_set.nodes:
            with (folder / f"slurmd-{node.name}.stderr").open("w") as stderr:
                node.start(f"slurmd -D -f {shlex.quote(str(conf))} -N {node.name}", env=cluster.env, cwd=folder,
                           stderr=stderr)

        def exited() -> list[str]:
            gone = [f"slurmctld exited with {p.returncode}" for p in cluster.daemons if p.poll() is not None]
            return gone + [f"slurmd of {node.name} exited" for node in node_set.nodes
                           if node.init is not None and node.init.poll() is not None]

        _wait_idle(cluster, exited)
    except BaseException:
        if cluster is not None:
            cluster.stop()
        else:
            node_set.teardown()
        raise
    return cluster


def stop_merge(merge: subprocess.Popen) -> str:
    """Stop a `gputop --slurm-job` merge run in its own process group (SIGTERM, then SIGKILL to the group after
    60 s) and return what it wrote on stderr."""
    if merge.poll() is None:
        merge.send_signal(signal.SIGTERM)
    try:
        _, stderr = merge.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(merge.pid, signal.SIGKILL)
        _, stderr = merge.communicate()
    return stderr
