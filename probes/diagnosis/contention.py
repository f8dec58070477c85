"""CPUs shared with other work: other processes busy on the CPUs the job may use, or a hypervisor's steal. Not a
bottleneck of its own: a line and a piece of advice that qualify whichever verdict the rules reach, both of kind
"contention" (verdict_lines.py), so that a held verdict leaves them out of what it keeps and they do not pile up."""

from __future__ import annotations

from probes.diagnosis.evidence import Evidence
from probes.diagnosis.verdict_lines import VerdictLine

# Other processes using at least this many CPUs' worth, and this share of the CPUs the job may use, is
# contention worth a line in any verdict: the job's numbers mean something else on a shared machine.
CONTENTION_MIN_CPUS = 0.5
CONTENTION_MIN_SHARE = 0.25
STEAL_NOTABLE_PCT = 10.0
LINE_PREFIX = "CPUs shared with other work: "


def contention(ev: Evidence) -> tuple[VerdictLine, VerdictLine] | None:
    """(evidence line, advice) when the CPUs the job may use are busy with other work, else None."""
    others, allowed = ev.others_busy_cpus, ev.allowed_cpus
    steal = ev.steal_pct or 0.0
    # Others matter only where they eat into what the job may use: under a quota of 0.2 CPUs on a
    # 2-CPU machine, another process on the other 1.8 takes nothing from it.
    entitled = min(allowed, ev.effective_cpus) if allowed and ev.effective_cpus else allowed
    shared = others is not None and allowed and entitled and others >= CONTENTION_MIN_CPUS and \
        others >= CONTENTION_MIN_SHARE * allowed and allowed - others < entitled - 0.1
    if not shared and steal < STEAL_NOTABLE_PCT:
        return None
    job = ev.job_cpus if ev.job_cpus is not None else 0.0
    parts = []
    if shared:
        parts.append(f"other processes used {others:.1f} of the {allowed} CPUs this job may run on, "
                     f"the job {job:.1f}")
    if steal >= STEAL_NOTABLE_PCT:
        parts.append(f"the hypervisor took {steal:.0f}% of their time (steal)")
    line = LINE_PREFIX + "; ".join(parts)
    if shared:
        advice = (f"The job gets {job:.1f} of its {allowed} CPUs: other processes use the rest. Find them "
                  "(top, sorted by CPU) and move them elsewhere, or give the job CPUs of its own (taskset, a "
                  "cpuset); its figures here are those of a shared machine.")
    else:
        advice = "This VM loses CPU time to its neighbours (steal): a dedicated or larger instance avoids it."
    return VerdictLine(line, "contention"), VerdictLine(advice, "contention")
