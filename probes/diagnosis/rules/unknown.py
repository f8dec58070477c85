"""unknown: what is said while no rule fits (or no stack has been sampled yet). Not a rule in RULES: it always
fits, and evaluate_rules places it after the rules strong enough to be the verdict."""

from __future__ import annotations

from probes.diagnosis.evidence import Evidence
from probes.diagnosis.rules.lines import percent
from probes.diagnosis.rules.rule import BottleneckFacts, Candidate

UNKNOWN = BottleneckFacts(
    name="unknown",
    words="no verdict yet",
    # No rule fits: CPUs shared with other work are worth saying whatever the main thread is doing.
    runs_on_host_cpu=True,
    short_of_host_cpu=False,
    hung_in=(),
    badge="neutral",
    fix_removes=None,
    gpu_busy=False,
    kernels_bound=False,
)


def no_rule_fits(ev: Evidence) -> Candidate:
    stacks = ev.latest.stacks
    if not ev.main.samples:
        why = stacks.reason if not stacks.available and stacks.reason else "waiting for the first stack samples"
        return Candidate("unknown", 0.0, [f"no samples of the main thread yet: {why}"])
    top = ", ".join(f"{activity} {percent(n / ev.main.samples)}"
                    for activity, n in ev.main.by_activity.most_common(3))
    return Candidate("unknown", 0.0, [f"no rule fits yet: main thread {top} of {ev.main.samples} samples"])
