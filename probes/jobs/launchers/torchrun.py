"""torchrun (``python -m torch.distributed.run``, and the older ``torch.distributed.launch``): the elastic agent
and the ranks it starts as its children.

The agent (torch/distributed/elastic/agent/server/local_elastic_agent.py) gives each rank RANK, LOCAL_RANK,
WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR/PORT and its own TORCHELASTIC_RUN_ID and
TORCHELASTIC_RESTART_COUNT; the TORCHELASTIC_* pair is what says torchrun started a rank. The agent names its
main thread, and so /proc/PID/comm, ``pt_elastic`` (torch/distributed/run.py).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence

from probes.jobs.facts import Attachment, JobLayout, RootChoice, WatchedTree, is_job_of_ranks
from probes.jobs.launchers.base import Launcher
from probes.sensors.process_facts import DistEnv, int_or_none, is_python_command, python_program, torch_distributed_env

TORCHRUN_AGENT_COMM = "pt_elastic"
TORCHRUN_SCRIPT = "torchrun"
_TORCHRUN_MODULES = frozenset({"torch.distributed.run", "torch.distributed.launch"})
_TORCHRUN_FILES = ("torch/distributed/run.py", "torch/distributed/launch.py")
_DEPRECATED_LAUNCH = ("torch.distributed.launch", "torch/distributed/launch.py")


def _torchrun_program(cmdline: Sequence[str]) -> str | None:
    """The torchrun module or script a command line runs ("torch.distributed.launch", "/venv/bin/torchrun"), or
    None: only the program counts, not an argument (`conda run torchrun ...` is conda)."""
    if not cmdline:
        return None
    if os.path.basename(cmdline[0]) == TORCHRUN_SCRIPT:
        return cmdline[0]
    program = python_program(cmdline)
    if program is None:
        return None
    if program.module is not None:
        return program.module if program.module in _TORCHRUN_MODULES else None
    script = program.script or ""
    return script if os.path.basename(script) == TORCHRUN_SCRIPT or script.endswith(_TORCHRUN_FILES) else None


def is_torchrun(name: str, cmdline: Sequence[str]) -> bool:
    """torchrun's elastic agent: named pt_elastic, or a Python process (or the torchrun script) whose program is
    torchrun; an editor or a shell merely naming torchrun is not one."""
    if name == TORCHRUN_AGENT_COMM:
        return True
    runs_python = is_python_command(cmdline) or name.startswith("python") or (
        bool(cmdline) and os.path.basename(cmdline[0]) == TORCHRUN_SCRIPT)
    return runs_python and _torchrun_program(cmdline) is not None


class Torchrun(Launcher):
    kind = "torchrun"

    def rank_variables(self, environ: Mapping[str, str]) -> DistEnv | None:
        if "TORCHELASTIC_RUN_ID" not in environ and "TORCHELASTIC_RESTART_COUNT" not in environ:
            return None
        return dataclasses.replace(torch_distributed_env(environ),
                                   restart_count=int_or_none(environ.get("TORCHELASTIC_RESTART_COUNT")),
                                   run_id=environ.get("TORCHELASTIC_RUN_ID") or None)

    def is_launcher_process(self, name: str, cmdline: Sequence[str]) -> bool:
        return is_torchrun(name, cmdline)

    def command_name(self, cmdline: Sequence[str]) -> str:
        """The deprecated `python -m torch.distributed.launch` runs the same agent: named as the user typed it."""
        program = _torchrun_program(cmdline) or ""
        return "torch.distributed.launch" if program.endswith(_DEPRECATED_LAUNCH) else self.kind

    def find(self, tree: WatchedTree) -> JobLayout | None:
        """The ranks when torchrun started them: one carries TORCHELASTIC_*, or they are several (or of a
        world above one) and their common parent is torchrun's agent."""
        heads = tree.rank_heads
        if any(h.env.torchelastic for h in heads):
            return tree.ranks_layout(self.kind, heads)
        agent = tree.common_parent(heads)
        if is_job_of_ranks(heads) and agent is not None and is_torchrun(agent.name, agent.cmdline):
            return tree.ranks_layout(self.kind, heads)
        return None

    def root_for(self, attached: Attachment) -> RootChoice | None:
        """A rank's agent."""
        if attached.env.rank is not None and is_torchrun(attached.parent_name, attached.parent_cmdline):
            return RootChoice(attached.parent_pid, attached_rank=attached.env.rank)
        return None
