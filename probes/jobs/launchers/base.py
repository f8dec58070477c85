"""The one interface every launcher module implements: :class:`Launcher`.

A launcher is one way a training job is started (torchrun, torch.multiprocessing.spawn, ...). It answers, for
gputop's part of the job: which variables of a process's environment are its ranks' (and what they say), which
process is its own (recognised by name and command line), where its job is in a watched tree (ranks, launcher,
world size, run id), which process's tree to watch when the user names one of its processes, and the words of
the note that says what was found. Lightning Fabric's ClusterEnvironment has the same shape (detect, world_size,
global_rank, local_rank). Defaults say "not mine"; a launcher overrides what it knows.

It lives apart from launchers/__init__.py (which lists the launchers) so that each launcher module imports
the interface without importing the list that imports it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar

from probes.frame import JobKind
from probes.jobs.facts import Attachment, JobLayout, NoteContext, ProcessFacts, RootChoice, WatchedTree
from probes.sensors.process_facts import DistEnv


class Launcher(ABC):
    kind: ClassVar[JobKind]  # JobInfo.kind of the jobs it finds, and the name docs/jobs.md's table uses

    def rank_variables(self, environ: Mapping[str, str]) -> DistEnv | None:
        """The distributed variables this launcher gives its ranks, read from a process's environment; None
        when the environment carries none of them."""
        return None

    def is_launcher_process(self, name: str, cmdline: Sequence[str]) -> bool:
        """Whether a process (its /proc/PID/comm and command line) is this launcher's own."""
        return False

    def command_name(self, cmdline: Sequence[str]) -> str:
        """What the user typed to start this launcher, as the note names it ("accelerate launch",
        "torch.distributed.launch"), from its own process's command line (empty when not in sight)."""
        return self.kind

    @abstractmethod
    def find(self, tree: WatchedTree) -> JobLayout | None:
        """This launcher's job in the watched tree, or None when the tree holds none."""

    def root_for(self, attached: Attachment) -> RootChoice | None:
        """The process whose tree is watched when the user names `attached`, when it is one of this launcher's
        training processes (its launcher, usually); None when it is not."""
        return None

    def local_rank(self, process: ProcessFacts, rank: int) -> int | None:
        """A rank's local rank (its position on this node)."""
        return process.env.local_rank

    def stated_local_world_size(self, layout: JobLayout, ranks: Sequence[ProcessFacts]) -> int | None:
        """How many ranks this node holds, as the launcher states it (LOCAL_WORLD_SIZE or its own variable), live
        ranks first; None when it does not say. Not a count of the ranks seen: a rank may be gone."""
        return next((f.env.local_world_size for f in ranks if f.env.local_world_size is not None), None)

    def keeps_job_without_training(self, root: ProcessFacts) -> bool:
        """Whether the root still stands for this job while no training process lives (between a rank's exit
        and its restart, or a script's programs)."""
        return True

    def note(self, layout: JobLayout, context: NoteContext) -> str:
        """The one line that says what gputop found: on stderr in headless mode, in the TUI's header."""
        launcher = context.processes.get(layout.launcher_pid) if layout.launcher_pid is not None else None
        what = (f"{self.command_name(launcher.cmdline if launcher else ())} job, {context.live_training} "
                f"rank{'s' if context.live_training != 1 else ''} on this node")
        ranks = dict(layout.ranks)
        if context.attached_pid != context.root_pid:
            attached = context.processes.get(context.attached_pid)
            rank = ranks.get(context.attached_pid, context.attached_rank)
            named = f"rank {rank}" if rank is not None else (attached.name if attached else "PID")
            return (f"attached to {named} (PID {context.attached_pid}): watching the {what} under PID "
                    f"{context.root_pid}; --process-only watches PID {context.attached_pid} alone")
        if context.root_pid in ranks:
            return (f"PID {context.root_pid} is rank {ranks[context.root_pid]} of a job whose launcher is not "
                    "visible from here")
        return f"attached to {context.root_label} (PID {context.root_pid}): watching the {what}"
