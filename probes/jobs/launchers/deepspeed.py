"""DeepSpeed's launcher: ``deepspeed train.py`` (deepspeed/launcher/runner.py) starts
``python -u -m deepspeed.launcher.launch --world_info=<base64> --master_addr=... --master_port=... train.py ...``
on each node (under pdsh, ssh or mpirun on several), and that process starts the ranks as its children:
``python -u train.py --local_rank=N ...``.

launch.py (read in DeepSpeed's source) gives each rank RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT and three
of its own: LOCAL_SIZE (the ranks on this node), CROSS_RANK (this node's number) and CROSS_SIZE (the number of
nodes); no LOCAL_WORLD_SIZE and no TORCHELASTIC_*. LOCAL_SIZE is what says whether this node holds the whole
world. DeepSpeed does not install on a CPU-only machine without a CUDA torch, so its shape is tested as a
process table and as a real process tree of the same command lines and environments.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence

from probes.jobs.facts import Attachment, JobLayout, RootChoice, WatchedTree, is_job_of_ranks
from probes.jobs.launchers.base import Launcher
from probes.jobs.launchers.torchrun import Torchrun
from probes.sensors.process_facts import DistEnv, int_or_none, is_python_command, python_program, torch_distributed_env

# The per-node launcher, and the runner the user types (the `deepspeed` console script, or the module).
NODE_LAUNCHER_MODULE = "deepspeed.launcher.launch"
RUNNER_MODULE = "deepspeed.launcher.runner"
RUNNER_SCRIPT = "deepspeed"
# launch.py's own variables (deepspeed/constants.py names CROSS_RANK and CROSS_SIZE).
DEEPSPEED_VARIABLES = ("LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE")


def _runs(cmdline: Sequence[str], module: str, script_names: tuple[str, ...]) -> bool:
    program = python_program(cmdline) if is_python_command(cmdline) else None
    if program is None:
        return bool(cmdline) and not is_python_command(cmdline) and os.path.basename(cmdline[0]) in script_names
    if program.module is not None:
        return program.module == module
    script = program.script or ""
    return os.path.basename(script) in script_names or script.endswith(module.replace(".", "/") + ".py")


def is_node_launcher(cmdline: Sequence[str]) -> bool:
    """`python -u -m deepspeed.launcher.launch ...`: the process whose children are the ranks."""
    return _runs(cmdline, NODE_LAUNCHER_MODULE, ())


def is_runner(cmdline: Sequence[str]) -> bool:
    """`deepspeed train.py` (the console script) or `python -m deepspeed.launcher.runner`."""
    return _runs(cmdline, RUNNER_MODULE, (RUNNER_SCRIPT,))


class DeepSpeed(Launcher):
    kind = "deepspeed"

    def rank_variables(self, environ: Mapping[str, str]) -> DistEnv | None:
        """torch.distributed's variables, with LOCAL_SIZE as the local world size and CROSS_RANK as the node's
        number (group rank), when launch.py set them."""
        if "RANK" not in environ or not all(name in environ for name in DEEPSPEED_VARIABLES):
            return None
        env = Torchrun().rank_variables(environ) or torch_distributed_env(environ)  # its elastic agent's too
        return dataclasses.replace(
            env,
            local_world_size=env.local_world_size if env.local_world_size is not None
            else int_or_none(environ.get("LOCAL_SIZE")),
            group_rank=env.group_rank if env.group_rank is not None else int_or_none(environ.get("CROSS_RANK")))

    def is_launcher_process(self, name: str, cmdline: Sequence[str]) -> bool:
        return is_node_launcher(cmdline) or is_runner(cmdline)

    def command_name(self, cmdline: Sequence[str]) -> str:
        return "deepspeed"

    def find(self, tree: WatchedTree) -> JobLayout | None:
        """The ranks when their common parent is deepspeed.launcher.launch."""
        heads = tree.rank_heads
        parent = tree.common_parent(heads)
        if is_job_of_ranks(heads) and parent is not None and is_node_launcher(parent.cmdline):
            return tree.ranks_layout(self.kind, heads)
        return None

    def root_for(self, attached: Attachment) -> RootChoice | None:
        """A rank's deepspeed.launcher.launch process (the runner above it only waits for it)."""
        if attached.env.rank is not None and is_node_launcher(attached.parent_cmdline):
            return RootChoice(attached.parent_pid, attached_rank=attached.env.rank)
        return None
