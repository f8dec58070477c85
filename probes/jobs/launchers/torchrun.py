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
import re
from collections.abc import Mapping, Sequence

from probes.jobs.environment import DistEnv, int_or_none, is_python_command, torch_distributed_env
from probes.jobs.facts import Attachment, JobLayout, RootChoice, WatchedTree, is_job_of_ranks
from probes.jobs.launchers.base import Launcher

TORCHRUN_AGENT_COMM = "pt_elastic"
TORCHRUN_SCRIPT = "torchrun"
_TORCHRUN_COMMANDS = re.compile(r"(^|[/\s])(torchrun|torch\.distributed\.(run|launch))(\s|$)|torch/distributed/run\.py")


def is_torchrun(name: str, cmdline: Sequence[str]) -> bool:
    """torchrun's elastic agent: named pt_elastic, or a Python process (or the torchrun script) whose command
    line runs torchrun; an editor or a shell merely naming torchrun is not one."""
    if name == TORCHRUN_AGENT_COMM:
        return True
    runs_python = (is_python_command(cmdline) or name.startswith("python")
                   or (bool(cmdline) and os.path.basename(cmdline[0]) == TORCHRUN_SCRIPT))
    return runs_python and bool(_TORCHRUN_COMMANDS.search(" ".join(cmdline)))


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
