"""The app's two header lines: the status line (what is watched, live, paused or replayed, what gputop costs)
and the job note under it (what gputop found from the PID it was given, each node of a job merged across nodes,
and what hides the target's stacks). Built from the MonitorView and the app's own state, like a pane's text.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from probes.frame import JobInfo
from probes.view import MonitorView
from tui.panes.text import duration


class StatusBar(Static):
    """The top line: what is watched, live/paused/replay, and what gputop itself costs."""


class JobNote(Static):
    """The header's second line, for a job only: what gputop found from the PID it was given (JobInfo.note),
    e.g. "attached to bash (PID 10): watching python train.py (PID 12) under it"."""


def job_words(job: JobInfo) -> str:
    """The job in a few words when discovery left no note: "torchrun job, 2 ranks"."""
    ranks = job.world_size or len(job.rank_pids)
    words = f"{job.kind} job"
    if ranks:
        words += f", {ranks} rank{'s' if ranks != 1 else ''}"
    # torchrun names a run "none" unless told otherwise: no use to anyone
    if job.slurm_step:
        words += f" (Slurm step {job.slurm_step})"
    return words + (f" (run {job.run_id})" if job.run_id and job.run_id != "none" else "")


def status_text(view: MonitorView | None, *, pid: int | None, interval_s: float | None, now: float, paused: bool,
                frames_while_paused: int, error: str | None, recording_stopped: bool,
                last_saved: str | None) -> Text:
    """The status line, most important first, so a narrow terminal cuts the command line, not the state. `pid`
    and `interval_s` are the source's (tui/view_sources.py), the rest the app's."""
    text = Text()
    text.append(" gputop ", style="bold reverse")
    if view is None:
        text.append(f" PID {pid if pid is not None else '?'} · attaching…")
        return text
    target = view.latest.target
    text.append(f" PID {target.pid}", style="bold")
    if view.replay:
        span = view.latest.time - view.frames[0].time
        text.append(f" · replay of {len(view.frames)} frames, {duration(span)}", style="bold cyan")
    if not target.alive:
        exited = "" if target.exited_at is None else f" {duration(now - target.exited_at)} ago"
        text.append(f" · EXITED{exited}", style="bold red")
    elif paused:
        text.append(f" · PAUSED, sampling goes on ({frames_while_paused} new): p resumes",
                    style="bold black on yellow")
    elif not view.replay and interval_s is not None:
        text.append(f" · live every {interval_s:g} s")
    if view.nodes:
        lost = sum(1 for n in view.nodes if n.state == "lost")
        text.append(f" · {len(view.nodes)} nodes merged" + (f", {lost} lost" if lost else ""),
                    style="bold red" if lost else "")
    if error:
        text.append(f" · {error}", style="bold red")
    if recording_stopped:
        text.append(" · ⚠ recording stopped", style="bold red")
    overhead = view.latest.overhead
    if not view.replay and target.alive:
        if overhead.behind:
            text.append(f" · ⚠ sampling behind ({overhead.tick_seconds or 0:.1f} s per reading)",
                        style="bold yellow")
        costs = [f"{label} {value:.0f}%" for label, value in
                 (("gputop", overhead.monitor_cpu_pct), ("py-spy", overhead.sampler_cpu_pct)) if value is not None]
        if costs:
            text.append(" · CPU " + ", ".join(costs), style="dim")
    job = view.shown.job
    if job is not None and not job.note:  # with a note, the line under this one says what is watched
        text.append(f" · {job_words(job)}", style="bold")
    if last_saved:
        text.append(f" · saved {last_saved}", style="green")
    if target.cmdline:
        command = " ".join([target.cmdline[0].rsplit("/", 1)[-1], *target.cmdline[1:]])
        text.append(f" · {command}", style="dim")
    return text


def job_note_text(view: MonitorView | None) -> Text | None:
    """The job's note, on its own line: on the status line it would be the first thing a narrow terminal
    cuts, and it is what tells a person who named a shell script or one rank what gputop is watching.
    What hides the target's stacks (ptrace denied, py-spy missing) comes first on that line: every verdict
    below it is then "cannot see"."""
    blind = cannot_see_text(view)
    if view is not None and view.nodes:  # a job across nodes: a line per node
        # One line a node where the header has room for them (two), else side by side on one.
        joint = Text("\n" if len(view.nodes) <= 2 else " │ ")
        lines = joint.join(Text(f" {n.line()}", style="bold red" if n.state == "lost" else "bold")
                           for n in view.nodes)
        return lines if blind is None else Text.assemble(blind, "\n", lines)
    job = view.shown.job if view is not None else None
    if job is None or not job.note:
        return blind
    note = Text(f" {job.note}", style="bold")
    return note if blind is None else Text.assemble(blind, "\n", note)


def cannot_see_text(view: MonitorView | None) -> Text | None:
    """What hides the target's stacks, with how to fix it; None when its stacks are seen."""
    if view is None:
        return None
    hidden = [c for c in view.cannot_see if c.sees_process and c.status == "cannot"]
    if not hidden:
        return None
    pid = view.latest.target.pid
    words = "; ".join(dict.fromkeys(c.finding.split(":", 1)[0] for c in hidden))
    return Text(f" ⚠ cannot see PID {pid}'s stacks: {words} · gputop doctor --pid {pid} says how to fix it",
                style="bold white on dark_red")
