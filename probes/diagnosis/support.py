"""How far a verdict can be trusted, in words tied to what it rests on (issue 38): "on 258 samples", "provisional:
4 samples", "on GPU counters and 12 samples". Never a percent: the verdict's `confidence` is a score its hysteresis
weighs (how strongly the rule fits, scaled by samples and time held), not a probability, and printed as "90% sure"
over 9 samples it read as one. The screens and the headless line say these words in its place.
"""

from __future__ import annotations

from probes.diagnosis.verdict import THIN_SAMPLES
from probes.frame import Verdict

# Liveness that its own words already account for: "HUNG · no progress for 23 s", "exited 4 s ago".
_SAID_BY_LIVENESS = ("hung", "sleeping", "exited")


def _samples(n: int) -> str:
    return f"{n} sample{'s' if n != 1 else ''}"


def support_words(verdict: Verdict) -> str | None:
    """What the verdict rests on, or None where there is nothing to say (no verdict yet, a hang or an exit, whose
    state says how long; a verdict whose samples were not counted)."""
    if verdict.bottleneck == "unknown" or verdict.liveness in _SAID_BY_LIVENESS or verdict.samples is None:
        return None
    n = verdict.samples
    if verdict.from_counters:
        return f"on counters and {_samples(n)}" if n else "on counters"
    if n < THIN_SAMPLES:
        return f"provisional: {_samples(n)}"
    return f"on {_samples(n)}"
