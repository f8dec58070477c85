"""One Python training process under a launcher: a non-Python one (``bash train.sh``, ``uv run``, a container's
init), a Python one that waits for its child or relays its output, or a known launcher's own process
(``accelerate launch`` of one process).

Nothing in the environment marks such a process: it is found by shape. The topmost Python processes under
the root are the candidates; the one that has used the most CPU is the training process (role ``main``), and
it stays so while it lives. A Python process that only runs a tool (nvidia-smi, git) is still the training
process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from probes.jobs.facts import HELPER_ROLES, JobLayout, NoteContext, ProcessFacts, WatchedTree
from probes.jobs.launchers.base import Launcher
from probes.sensors.process_facts import short_command


class Launched(Launcher):
    kind = "launched"

    def find(self, tree: WatchedTree) -> JobLayout | None:
        root = tree.root
        if root is None or not root.launches:
            return None  # a Python process that trains by itself is no job
        candidates = _candidates(root, tree.children, root=True)
        if not candidates:
            return None
        main = _choose_main(candidates, tree.previous_main)
        return JobLayout(
            kind=self.kind,
            launcher_pid=tree.root_pid,
            launchers=tree.launchers_of([main.pid]),
            main_pid=main.pid,
            other_candidates=len([c for c in candidates if c.alive]) - (1 if main.alive else 0),
        )

    def keeps_job_without_training(self, root: ProcessFacts) -> bool:
        """A script between programs still launches; a Python process that ran a Python child for a while and
        now trains again is a lone process again."""
        return root.launches

    def note(self, layout: JobLayout, context: NoteContext) -> str:
        attached = f"attached to {context.root_label} (PID {context.root_pid})"
        main = context.processes.get(layout.main_pid) if layout.main_pid is not None else None
        if main is None:
            return f"{attached}: waiting for its Python training process"
        others = (f" (and {layout.other_candidates} other Python process"
                  f"{'es' if layout.other_candidates != 1 else ''})") if layout.other_candidates else ""
        return f"{attached}: watching {short_command(main.cmdline)} (PID {main.pid}) under it{others}"


def _candidates(f: ProcessFacts, children: Mapping[int, list[ProcessFacts]], root: bool) -> list[ProcessFacts]:
    """The topmost Python training processes at or under `f`: a non-Python process and a Python one waiting for
    its child are passed through; a Python one waiting with no Python process under it is one itself."""
    if not f.launches and not root:
        return [f] if f.role not in HELPER_ROLES else []
    found = []
    for child in children.get(f.pid, ()):
        if child.role in HELPER_ROLES:
            continue
        found.extend(_candidates(child, children, root=False))
    if not found and f.python and not root:
        return [f]
    return found


def _choose_main(candidates: Sequence[ProcessFacts], previous_main: int | None) -> ProcessFacts:
    """The one kept from before while it lives; else the live one that has used the most CPU (the earliest
    started on a tie); a finished one only when none lives."""
    for c in candidates:
        if c.pid == previous_main and c.alive:
            return c
    alive = [c for c in candidates if c.alive] or list(candidates)
    return min(alive, key=lambda c: (-(c.cpu_seconds or 0.0), c.started, c.pid))
