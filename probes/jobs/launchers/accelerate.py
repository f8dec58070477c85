"""Hugging Face Accelerate's ``accelerate launch``: with several processes (``--multi_gpu``, or a config that
asks for them) it runs torch's elastic agent inside its own process, so the ranks are torchrun's ranks
(TORCHELASTIC_* set) whose parent is the ``accelerate launch`` process, not a ``torchrun`` one.

Checked with accelerate 1.x and torch 2.13 (``accelerate launch --multi_gpu --num_processes 2 train.py`` on
CPU): ``python .../bin/accelerate launch ...`` (its comm becomes ``pt_elastic``) starts ``python -u train.py``
twice with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, TORCHELASTIC_* and its own ACCELERATE_*
variables. Its rank variables are torchrun's, read by that module; this one owns the shape and the name the
user typed. ``accelerate launch`` with one process (``--cpu``, the default on a machine without GPUs) starts the
script as a plain child instead: a launched main process, named here too.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from probes.jobs.facts import Attachment, JobLayout, RootChoice, WatchedTree, is_job_of_ranks
from probes.jobs.launchers.base import Launcher
from probes.sensors.process_facts import is_python_command, python_program

_LAUNCH_MODULE = "accelerate.commands.launch"


def is_accelerate_launch(cmdline: Sequence[str]) -> bool:
    """`accelerate launch ...`, `accelerate-launch ...` or `python -m accelerate.commands.launch ...`, run by
    Python (a console script's command line starts with the interpreter) or as the script itself."""
    if not cmdline:
        return False
    if is_python_command(cmdline):
        program = python_program(cmdline)
        if program is None:
            return False
        if program.module is not None:
            return program.module == _LAUNCH_MODULE
        script, args = os.path.basename(program.script or ""), program.args
    else:
        script, args = os.path.basename(cmdline[0]), tuple(cmdline[1:])
    return script == "accelerate-launch" or (script == "accelerate" and args[:1] == ("launch",))


class Accelerate(Launcher):
    kind = "accelerate"

    def is_launcher_process(self, name: str, cmdline: Sequence[str]) -> bool:
        return is_accelerate_launch(cmdline)

    def command_name(self, cmdline: Sequence[str]) -> str:
        return "accelerate launch"

    def find(self, tree: WatchedTree) -> JobLayout | None:
        """The ranks when their common parent is `accelerate launch` (torch's agent inside it)."""
        heads = tree.rank_heads
        parent = tree.common_parent(heads)
        if is_job_of_ranks(heads) and parent is not None and is_accelerate_launch(parent.cmdline):
            return tree.ranks_layout(self.kind, heads)
        return None

    def root_for(self, attached: Attachment) -> RootChoice | None:
        """A rank's `accelerate launch` process."""
        if attached.env.rank is not None and is_accelerate_launch(attached.parent_cmdline):
            return RootChoice(attached.parent_pid, attached_rank=attached.env.rank)
        return None
