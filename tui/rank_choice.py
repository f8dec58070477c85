"""Which rank of a distributed job the app's panes are scoped to, kept from one view to the next: the rank the
user attached to when ranks first show, the same rank after torchrun restarts it under a new PID, and the next
or previous one on `]` / `[`.
"""

from __future__ import annotations

from collections.abc import Sequence

from probes.view import MonitorView
from tui.panes.ranks import RankRow, rank_key


class RankChoice:
    """The selected rank by RankRow.key (its PID, and its node in a job merged across nodes: two nodes may each
    have a rank with the same PID); None for all ranks."""

    def __init__(self) -> None:
        self.key: str | None = None
        self._started = False  # JobInfo.selected_pid is applied once, when ranks first show
        self._number: int | None = None  # the selected rank's number, followed when it restarts

    def follow(self, view: MonitorView, rows: Sequence[RankRow]) -> None:
        """The rank the user attached to is selected when ranks first show. A selected rank that torchrun
        restarted under a new PID stays selected by its number; one that is gone altogether lets go."""
        keys = [row.key for row in rows]
        if rows and not self._started:
            self._started = True
            job_info = view.shown.job
            attached = rank_key(job_info.selected_pid, view.shown.node) \
                if job_info is not None and job_info.selected_pid is not None else None
            if attached in keys:
                self.key = attached
        if self.key is not None and self.key not in keys:
            self.key = next((row.key for row in rows if row.rank is not None and row.rank == self._number), None)
        self._number = next((row.rank for row in rows if row.key == self.key), None)

    def stepped(self, rows: Sequence[RankRow], step: int) -> str | None:
        """The key `step` rows on from the selected one: all ranks, rank 0, rank 1, ..., all ranks again."""
        choices: list[str | None] = [None, *(row.key for row in rows)]
        index = choices.index(self.key) if self.key in choices else 0
        return choices[(index + step) % len(choices)]
