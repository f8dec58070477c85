"""CPUs shared with other work: other processes busy on the CPUs the job may use, or a hypervisor's steal. Not a
bottleneck of its own: a line and a piece of advice that qualify whichever verdict the rules reach, both of kind
"contention" (verdict_lines.py), so that a held verdict leaves them out of what it keeps and they do not pile up.

Other work is work outside the job: a job's own processes (its ranks, their DataLoader workers, the launcher) are
never counted as such. For a lone process or a whole job (job_contention) the watched tree is the job; a rank's
projection (rank_projection.py) leaves the rest of its job out of the host's busy CPUs, and its line says what
the rank itself got. A job's verdict says it once, for the job (with_job_contention), in place of its ranks' lines.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from probes.diagnosis.bottlenecks import FACTS_BY_NAME
from probes.diagnosis.evidence import Evidence, others_busy_cpus
from probes.diagnosis.verdict_lines import VerdictLine, kind_of
from probes.diagnosis.windows import METRIC_WINDOW_S, mean, recent
from probes.frame import Frame, Verdict

# Other processes using at least this many CPUs' worth, and this share of the CPUs the job may use, is
# contention worth a line in any verdict: the job's numbers mean something else on a shared machine.
CONTENTION_MIN_CPUS = 0.5
CONTENTION_MIN_SHARE = 0.25
STEAL_NOTABLE_PCT = 10.0
# A main thread runnable but not running less than this share of wall time is not short of a CPU: the others take
# CPUs it does not want (a job that sleeps most of its step by design), and it is told to move nothing.
QUEUED_NOTABLE_PCT = 5.0
LINE_PREFIX = "CPUs shared with other work: "


def contention(ev: Evidence) -> tuple[VerdictLine, VerdictLine] | None:
    """(evidence line, advice) when the CPUs the job may use are busy with other work, else None."""
    # A rank's projection marks its target with the ranks on its node (and only a projection does).
    rank = ev.latest.target.ranks_on_node is not None
    return _said(ev.others_busy_cpus, ev.allowed_cpus, ev.effective_cpus, ev.steal_pct, ev.job_cpus, rank,
                 ev.main_thread_runqueue_pct)


def job_contention(frames: Sequence[Frame]) -> tuple[VerdictLine, VerdictLine] | None:
    """contention() for a whole job on one node, over its frames' metric window (oldest first, not empty): every
    process of the watched tree is the job's, so the others are what the host's CPUs spent beyond them."""
    window = recent(frames, METRIC_WINDOW_S)
    latest = frames[-1]
    job = mean(_job_cpus(f) for f in window)
    return _said(mean(others_busy_cpus(f) for f in window), latest.host.allowed_cpus, latest.cpu.effective_cpus,
                 mean(f.host.steal_pct for f in window), job, rank=False)


def _job_cpus(frame: Frame) -> float | None:
    """CPUs' worth the job's live processes used in one tick."""
    values = [p.cpu_pct for p in frame.processes if p.alive and p.state != "zombie" and p.cpu_pct is not None]
    return sum(values) / 100.0 if values else None


def _said(others: float | None, allowed: int | None, effective: float | None, steal_pct: float | None,
          job_cpus: float | None, rank: bool,
          queued_pct: float | None = None) -> tuple[VerdictLine, VerdictLine] | None:
    """The line and its advice; the advice is empty ("") where the main thread was seen not waiting for a CPU
    (`queued_pct`, its run-queue share of wall time from schedstat; None where unread): the others then take CPUs
    the job does not want, and nothing is to be moved for it."""
    steal = steal_pct or 0.0
    # Others matter only where they eat into what the job may use: under a quota of 0.2 CPUs on a
    # 2-CPU machine, another process on the other 1.8 takes nothing from it.
    entitled = min(allowed, effective) if allowed and effective else allowed
    shared = others is not None and allowed and entitled and others >= CONTENTION_MIN_CPUS and \
        others >= CONTENTION_MIN_SHARE * allowed and allowed - others < entitled - 0.1
    if not shared and steal < STEAL_NOTABLE_PCT:
        return None
    own = job_cpus if job_cpus is not None else 0.0
    parts = []
    if shared:
        if rank:
            parts.append(f"processes outside the job used {others:.1f} of the {allowed} CPUs this job may run on, "
                         f"this rank {own:.1f}")
        else:
            parts.append(f"other processes used {others:.1f} of the {allowed} CPUs this job may run on, "
                         f"the job {own:.1f}")
    if steal >= STEAL_NOTABLE_PCT:
        parts.append(f"the hypervisor took {steal:.0f}% of their time (steal)")
    unwanted = bool(shared) and queued_pct is not None and queued_pct < QUEUED_NOTABLE_PCT
    if unwanted:
        parts.append(f"its main thread waited for a CPU {queued_pct:.0f}% of the time: it is not short of one")
    line = LINE_PREFIX + "; ".join(parts)
    move = ("find them (top, sorted by CPU) and move them elsewhere, or give the job CPUs of its own (taskset, a "
            "cpuset); its figures here are those of a shared machine.")
    if not shared or unwanted:
        advice = "This VM loses CPU time to its neighbours (steal): a dedicated or larger instance avoids it." \
            if steal >= STEAL_NOTABLE_PCT else ""
    elif queued_pct is not None:  # what the others cost the job, measured: its main thread queued for a core
        whose = "this rank's" if rank else "the job's"
        advice = (f"While other processes used {others:.1f} of its {allowed} CPUs, {whose} main thread waited for a "
                  f"CPU {queued_pct:.0f}% of the time: {move}")
    elif rank:
        advice = f"Processes outside the job use {others:.1f} of its {allowed} CPUs (this rank gets {own:.1f}): {move}"
    else:
        advice = f"The job gets {own:.1f} of its {allowed} CPUs: other processes use the rest. {move.capitalize()}"
    return VerdictLine(line, "contention"), VerdictLine(advice, "contention")


def with_job_contention(verdict: Verdict, frames: Sequence[Frame], ranks: Sequence[tuple[str, Verdict]],
                        one_node: bool) -> Verdict:
    """The job's verdict with the CPUs shared with other work said once, for the job: where any rank's own verdict
    (`ranks`: its label and verdict) says its CPUs are shared, on one node the line is worked out for the whole
    job over `frames` (the node's, whose tree is the job); across nodes, where each node's share differs, it is
    the first such rank's line under its label. Lines of that kind the verdict already carries (a held
    verdict's) are replaced, never repeated."""
    evidence = [line for line in verdict.evidence if kind_of(line) != "contention"]
    advice = [line for line in verdict.advice if kind_of(line) != "contention"]
    saying = [(label, r) for label, r in ranks if any(kind_of(line) == "contention" for line in r.evidence)]
    said: tuple[VerdictLine, VerdictLine] | None = None
    if saying and one_node:
        said = job_contention(frames)
    elif saying:
        label, first = saying[0]
        line = next(line for line in first.evidence if kind_of(line) == "contention")
        tip = next((line for line in first.advice if kind_of(line) == "contention"), None)
        said = (VerdictLine(f"{label}: {line}", "contention"),
                VerdictLine(tip if tip is not None else "", "contention"))
    if said is not None:
        evidence.append(said[0])
        if said[1]:
            # As for a lone process (verdict.py): right after the first advice where CPU is what the verdict is
            # short of, else last.
            short = verdict.bottleneck in FACTS_BY_NAME and FACTS_BY_NAME[verdict.bottleneck].short_of_host_cpu
            advice.insert(1 if short else len(advice), said[1])
    if evidence == list(verdict.evidence) and advice == list(verdict.advice):
        return verdict
    return dataclasses.replace(verdict, evidence=tuple(evidence), advice=tuple(advice))
