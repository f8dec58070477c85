"""An OpenSSH server inside each namespaced test node (tests/support/ns_nodes.py), so that `gputop --hosts` is
tested over real ssh to hosts that see only their own processes.

:func:`start_sshds` makes, in a folder of the test's: a client key (`client_key`), one host key per node, one
`authorized_keys` per node holding the client key (a test makes a node refuse by writing another key there: sshd
reads the file at each login), a `known_hosts` naming each node's address with its host key, and one sshd
config per node (`ListenAddress` the node's address, `PermitRootLogin prohibit-password`, `UsePAM no`,
`StrictModes no`: the keys are in a temp folder, `PidFile` there). Each sshd runs inside its node as `sshd -D -f
CONF -e` (its log in the folder) and is up once its port accepts a connection from the host. :meth:`SshNodes.stop`
ends them; the nodes' teardown would anyway. :meth:`SshNodes.ssh_command` is the GPUTOP_SSH_COMMAND that reaches
them with these keys and nothing of the machine's own ssh config.

:class:`SshUnavailable` carries the reason where no sshd or ssh-keygen is installed (Debian: openssh-server).
"""

from __future__ import annotations

import shlex
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from support.ns_nodes import Node, NodeSet

SSHD = "/usr/sbin/sshd"  # sshd re-executes itself for each connection: it must be started by its full path
PORT = 22
START_TIMEOUT_S = 30.0
CONFIG = """\
ListenAddress {address}
Port {port}
HostKey {host_key}
AuthorizedKeysFile {authorized_keys}
PidFile {pid_file}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
LogLevel VERBOSE
"""


class SshUnavailable(Exception):
    """Why the nodes' sshd cannot run here: one line a skip reason can carry."""


@dataclass
class SshNodes:
    """The sshd of each node of one NodeSet and the files to reach them."""

    folder: Path
    client_key: Path
    known_hosts: Path
    authorized_keys: dict[str, Path] = field(default_factory=dict)  # node name -> its authorized_keys
    pid_files: dict[str, Path] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)

    def ssh_command(self, key: Path | None = None) -> str:
        """GPUTOP_SSH_COMMAND for these nodes: this key only, their known host keys, no ssh config of the
        machine's (-F /dev/null)."""
        return shlex.join(["ssh", "-F", "/dev/null", "-i", str(key or self.client_key), "-o", "IdentitiesOnly=yes",
                           "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
                           "-o", "StrictHostKeyChecking=yes"])

    def log(self, node: str) -> str:
        path = self.logs[node]
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """End each node's sshd by the PID its node gave it (read from its PidFile)."""
        for node in self.nodes:
            pid_file = self.pid_files[node.name]
            if node.init_pid is None or not pid_file.exists():
                continue
            pid = pid_file.read_text().strip()
            if pid.isdigit():
                node.run(["kill", pid])


def check_available() -> None:
    missing = [tool for tool in (SSHD, "ssh-keygen", "ssh") if shutil.which(tool) is None]
    if missing:
        raise SshUnavailable(f"no {', '.join(missing)} here (Debian: apt-get install openssh-server)")


def make_key(path: Path, comment: str) -> str:
    """A new ed25519 key pair at `path` (no passphrase); its public line."""
    done = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise SshUnavailable(f"ssh-keygen failed: {done.stderr.strip()}")
    return path.with_suffix(".pub").read_text().strip()


def start_sshds(node_set: NodeSet, folder: Path) -> SshNodes:
    """One sshd inside each started node of `node_set`; returns once each accepts connections from the host."""
    check_available()
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation folder, which it requires
    folder.mkdir(parents=True, exist_ok=True)
    client_key = folder / "client_key"
    client_public = make_key(client_key, "gputop-test-client")
    ssh = SshNodes(folder=folder, client_key=client_key, known_hosts=folder / "known_hosts")
    known = []
    for node in node_set.nodes:
        host_key = folder / f"host_key_{node.name}"
        host_public = make_key(host_key, f"gputop-test-{node.name}")
        known.append(f"{node.address} {' '.join(host_public.split()[:2])}")
        authorized = folder / f"authorized_keys_{node.name}"
        authorized.write_text(client_public + "\n")
        pid_file, log = folder / f"sshd_{node.name}.pid", folder / f"sshd_{node.name}.log"
        config = folder / f"sshd_config_{node.name}"
        config.write_text(CONFIG.format(address=node.address, port=PORT, host_key=host_key,
                                        authorized_keys=authorized, pid_file=pid_file))
        ssh.authorized_keys[node.name], ssh.pid_files[node.name], ssh.logs[node.name] = authorized, pid_file, log
        ssh.nodes.append(node)
    ssh.known_hosts.write_text("\n".join(known) + "\n")
    for node in ssh.nodes:
        with ssh.logs[node.name].open("w") as log:
            process = node.spawn([SSHD, "-D", "-e", "-f", str(folder / f"sshd_config_{node.name}")],
                                 stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _accepts(node.address, PORT):
            if process.poll() is not None:
                raise SshUnavailable(f"sshd in {node.name} exited with {process.returncode}: "
                                     f"{ssh.log(node.name).strip()[-300:]}")
            if time.monotonic() > deadline:
                raise SshUnavailable(f"sshd in {node.name} accepts no connection after {START_TIMEOUT_S:g} s")
            time.sleep(0.1)
    return ssh


def _accepts(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=2):
            return True
    except OSError:
        return False
