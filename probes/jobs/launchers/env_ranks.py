"""Ranks from the environment: processes that carry torch.distributed's RANK, started by something gputop does
not otherwise know (a script that starts ``python train.py`` with RANK=0 and RANK=1, a custom launcher, a
rank whose launcher is out of sight).
"""

from __future__ import annotations

from collections.abc import Mapping

from probes.jobs.facts import Attachment, JobLayout, RootChoice, WatchedTree, is_job_of_ranks
from probes.jobs.launchers.base import Launcher
from probes.sensors.process_facts import TORCH_DISTRIBUTED_VARIABLES, DistEnv, torch_distributed_env


class EnvRanks(Launcher):
    kind = "ranks"

    def rank_variables(self, environ: Mapping[str, str]) -> DistEnv | None:
        if not any(name in environ for name in TORCH_DISTRIBUTED_VARIABLES):
            return None
        return torch_distributed_env(environ)

    def find(self, tree: WatchedTree) -> JobLayout | None:
        """The processes whose environment names a rank, when they are several or of a world above one (a
        single RANK=0 WORLD_SIZE=1 under a shell is a launched main process)."""
        heads = tree.rank_heads
        return tree.ranks_layout(self.kind, heads) if is_job_of_ranks(heads) else None

    def root_for(self, attached: Attachment) -> RootChoice | None:
        """A rank's parent, when that parent started two or more ranks (gputop does not take over an interactive
        shell from which one rank was started by hand)."""
        if attached.env.rank is not None and attached.ranked_siblings >= 2:
            return RootChoice(attached.parent_pid, attached_rank=attached.env.rank)
        return None
