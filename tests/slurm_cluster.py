"""A real one-node Slurm cluster for the tests: Debian's slurmctld and slurmd started as plain daemons on a
configuration written into a temporary folder, and stopped again.

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
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

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
    node: str
    daemons: list[subprocess.Popen] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """The environment a client (srun, sbatch, scontrol, gputop) needs to reach this cluster."""
        return dict(os.environ, SLURM_CONF=str(self.conf))

    def stop(self) -> None:
        """Kill both daemons and every slurmstepd of this cluster (they outlive slurmd, with PID 1 as parent)."""
        for proc in self.daemons:
            _kill_group(proc)
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
        return "; ".join(f"{name}: {_last_lines(self.folder / f'{name}.log')}" for name in DAEMONS)


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


def write_conf(folder: Path) -> tuple[Path, str]:
    node_line = _node_line()
    node = node_line.split()[0].split("=", 1)[1]
    ctld_port, slurmd_port = _free_ports(2)
    for sub in ("state", "spool"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    conf = folder / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=gputoptest",
        f"SlurmctldHost={node}",
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
        f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'slurmd.log'}",
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
        f"{node_line.split(' UpTime=')[0]} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4",
        "",
    ]))
    return conf, node


def _node_state(env: dict[str, str], node: str) -> str:
    try:
        out = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%T"], capture_output=True, text=True, env=env,
                             timeout=10)
    except subprocess.TimeoutExpired:
        return ""
    return out.stdout.strip()


def start_cluster(folder: Path) -> SlurmCluster:
    """Start a one-node cluster in `folder`; ClusterUnavailable when it cannot run here."""
    missing = [name for name in (*DAEMONS, *CLIENTS) if shutil.which(name) is None]
    if missing:
        raise ClusterUnavailable(f"Slurm is not installed ({', '.join(missing)} missing): "
                                 "apt-get install slurmd slurmctld slurm-client")
    if os.geteuid() != 0:
        raise ClusterUnavailable("the test cluster runs slurmd as root (SlurmdUser=root): not root here")
    conf, node = write_conf(folder)
    cluster = SlurmCluster(folder=folder, conf=conf, node=node)
    env = cluster.env
    try:
        for daemon in DAEMONS:
            # -D: stay in the foreground, so the Popen is the daemon; -i (slurmctld): ignore state from a past run.
            extra = ["-i"] if daemon == "slurmctld" else []
            cluster.daemons.append(subprocess.Popen(
                [daemon, "-D", *extra, "-f", str(conf)], env=env, cwd=folder, start_new_session=True,
                stdout=subprocess.DEVNULL, stderr=(folder / f"{daemon}.stderr").open("w")))
        deadline = time.monotonic() + START_TIMEOUT_S
        while (state := _node_state(env, node)) != "idle":
            exited = [f"{d} exited with {p.returncode}" for d, p in zip(DAEMONS, cluster.daemons, strict=True)
                      if p.poll() is not None]
            if exited or time.monotonic() > deadline:
                why = ", ".join(exited) or f"node {node} not idle after {START_TIMEOUT_S:g} s (state {state!r})"
                raise ClusterUnavailable(f"the test Slurm cluster did not start: {why}; {cluster.log_tail()}")
            time.sleep(0.2)
    except BaseException:
        cluster.stop()
        raise
    return cluster
