"""The job list as words: the cells of each job's row (the picker's table and `gputop --list` show the same),
the plain-text table, the JSON document, and the lines said when there is no job or exactly one.

No Textual here: `gputop --list` and the no-terminal path print from this module alone.
"""

from __future__ import annotations

import json
import re

from probes.monitoring import JSON_SCHEMA, CensusReading, JobSummary, NotAJob
from tui.panes.text import duration

COLUMNS = ("PID", "JOB", "GPU", "CPU%", "AGE", "COMMAND")
LIST_COLUMNS = ("PID", "JOB", "GPU", "AGE", "COMMAND")  # `gputop --list`: what one reading gives, no CPU%
NO_JOB_LINE = ("no training job found on this machine (no Python process that imports torch, no launcher, "
               "no rank): start one, or try gputop demo")
COMMAND_CHARS = 200  # --list's command column; the picker cuts to its width
JOBS_NAMED = 5  # the jobs a `--pid` that is no job names in its one line; the rest: gputop --list
NAMED_COMMAND_CHARS = 50
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def job_words(job: JobSummary) -> str:
    """What the job is: 'torchrun 2/2 ranks +2 workers', 'python +1 worker'."""
    words = job.launcher
    if job.ranks != 1 or job.world_size is not None:  # a lone process, or one a script started: no ranks to count
        of = f"/{job.world_size}" if job.world_size is not None and job.world_size != job.ranks else ""
        words += f" {job.ranks}{of} rank{'s' if job.ranks != 1 or of else ''}"
    if job.workers:
        words += f" +{job.workers} worker{'s' if job.workers != 1 else ''}"
    return words


def gpu_words(gpus: tuple[int, ...]) -> str:
    """GPU indices as runs: '0-7', '0,2', '1-3,6'; '-' for none known."""
    runs: list[list[int]] = []
    for index in sorted(gpus):
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ",".join(f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)) for run in runs) or "-"


def job_cells(job: JobSummary, now: float, cpu_unknown: str = "-") -> tuple[str, ...]:
    """One row, in COLUMNS' order; `cpu_unknown` stands for a CPU% not measured (the picker: "…", measuring)."""
    age = job.age_s(now)
    return (
        str(job.root_pid),
        job_words(job),
        gpu_words(job.gpus),
        cpu_unknown if job.cpu_pct is None else f"{job.cpu_pct:.0f}",
        "-" if age is None else duration(age),
        one_line(job.shown_command),
    )


def one_line(text: str) -> str:
    """A command as one row: its newlines and other control characters as spaces (`python -c` with a program)."""
    return _CONTROL.sub(" ", text)


def text_table(jobs: list[JobSummary], now: float) -> str:
    """The jobs as aligned columns under a header (LIST_COLUMNS), the command last and cut to COMMAND_CHARS. One
    reading's figures only: CPU% needs a second one, and `gputop --list` answers at once without it."""
    shown = [i for i, column in enumerate(COLUMNS) if column in LIST_COLUMNS]
    rows = [LIST_COLUMNS, *(tuple(job_cells(job, now)[i] for i in shown) for job in jobs)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(LIST_COLUMNS) - 1)]
    lines = []
    for row in rows:
        fixed = "  ".join(cell.rjust(width) if i == 0 else cell.ljust(width)
                          for i, (cell, width) in enumerate(zip(row, widths, strict=False)))
        lines.append(f"{fixed}  {row[-1][:COMMAND_CHARS]}".rstrip())
    return "\n".join(lines)


def json_document(reading: CensusReading, jobs: list[JobSummary]) -> str:
    return json.dumps({"schema": JSON_SCHEMA, "time": reading.time, "gpu_note": reading.gpu_note,
                       "jobs": [job.to_json(reading.time) for job in jobs]}, indent=2)


def one_job_note(job: JobSummary) -> str:
    """Said when the only job is attached at once: which one, and how to choose another."""
    return (f"one training job here, attached: {job_words(job)} (PID {job.root_pid}) "
            f"{job.shown_command[:60]}; to pick another: gputop --list, then gputop --pid PID")


def not_a_job_line(found: NotAJob) -> str:
    """The one line for `gputop --pid PID` when PID is no training job: what it is, and the jobs `gputop --list`
    finds here (by PID, at most JOBS_NAMED), and what to type."""
    said = f"PID {found.pid} ({found.name or '?'}) is not a training job: {found.why}"
    jobs = list(found.reading.jobs)
    if not jobs:
        return f"{said}; no training job found on this machine (gputop --list looks again)"
    named = ", ".join(f"PID {job.root_pid} {job_words(job)} ({one_line(job.shown_command)[:NAMED_COMMAND_CHARS]})"
                      for job in jobs[:JOBS_NAMED])
    more = f" and {len(jobs) - JOBS_NAMED} more (gputop --list)" if len(jobs) > JOBS_NAMED else ""
    return f"{said}; the training jobs here: {named}{more}; attach to one with gputop --pid PID"
