"""The GPU check's judgement of gputop's levers (issue 41): which levers a snapshot offered, in order, each with its
predicted gain and that gain's kind (measured / bound / estimate, probes/diagnosis/claims.py); the time a job's
iterations took, from its own log; and the top lever's measured gain set against what its prediction states.

A gain's words are turned into the interval of the step time it says the lever saves (``stated``):

* a share that bounds it ("the 80% of the SMs' time with no work on them", "less than the 63% of the SMs' active
  time …", "the 12% of main-thread samples in that loop", kind bound): from 0 to that share;
* "up to about half the matmuls' time": from 0 to half the step;
* "~N%": for the clock levers and compile a speed-up (the clock's 1/fraction − 1, the probe's eager over compiled
  time − 1), for dropping checkpointing a share of the step ("without it the step does 3/4 of its work"); a bound
  from 0 to it, an estimate from half to twice it (to no ceiling where it says "more where …"), a measurement within
  a quarter of it;
* no figure ("the matmuls' time several-fold", "the gaps between kernels"): only that it saves something.

A measured gain is the share of the job's time per unit of work (an iteration, a sample) the fix saved: 1 − fixed /
base, from the medians of each run's steady progress lines. It is within the stated interval where it lies inside
it widened by ``NOISE_PCT`` points either way; a lever that saves nothing (under NOISE_PCT) is outside every
interval, since each says it wins something.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Any

NOISE_PCT = 3.0  # points of the step time two runs of the same job may differ by (GPU steps: well under 1%)
MEASURE_LINES = 3  # progress lines after the steady ones that make a fix run's median
# "~N%" figures that are a share of the step saved; the others ("~19%" of the clock levers, compile's) a speed-up.
SAVED_FIGURES = frozenset({"drop_checkpointing"})
TIME_LINE = {"nanogpt": re.compile(r"^iter \d+: .*?time (\d+(?:\.\d+)?)ms", re.MULTILINE),
             "loop": re.compile(r"^step \d+ \|.*?step_time (\d+(?:\.\d+)?)ms", re.MULTILINE)}


def offered_levers(snapshot: dict | None) -> list[dict[str, Any]]:
    """The levers a snapshot's verdict offered, in its order: each {lever, most, kind, basis} (most, kind and
    basis None where the advice claims no gain). Advice lines that pull no lever are left out."""
    advice = ((snapshot or {}).get("verdict") or {}).get("advice") or []
    levers = []
    for record in advice:
        if not isinstance(record, dict) or not record.get("lever"):
            continue
        gain = record.get("gain") or {}
        levers.append({"lever": record["lever"], "most": gain.get("most"), "kind": gain.get("kind"),
                       "basis": gain.get("basis"), "text": record.get("text")})
    return levers


@dataclass(frozen=True)
class Stated:
    """The share of the step a lever's gain says it saves, in percent: low to high (None: no ceiling)."""

    low: float
    high: float | None
    words: str

    def holds(self, saved_pct: float) -> bool:
        if saved_pct < max(self.low - NOISE_PCT, NOISE_PCT):  # every gain says the lever wins something
            return False
        return self.high is None or saved_pct <= self.high + NOISE_PCT

    def record(self) -> dict[str, Any]:
        return {"low_pct": round(self.low, 1), "high_pct": None if self.high is None else round(self.high, 1),
                "words": self.words}


def _saved(speedup_pct: float) -> float:
    """A speed-up of s% as the share of the step it saves."""
    return 100.0 * (1.0 - 1.0 / (1.0 + speedup_pct / 100.0))


def stated(lever: dict[str, Any]) -> Stated | None:
    """The interval a lever's gain states (see the module's words), or None where it claims no gain."""
    most, kind = lever.get("most"), lever.get("kind")
    if not most or kind not in ("measured", "bound", "estimate"):
        return None
    if (share := re.match(r"^(?:less than )?the (\d+(?:\.\d+)?)% of", most)) is not None:
        return Stated(0.0, float(share.group(1)), f"saves at most {float(share.group(1)):.0f}% of the step")
    if most.startswith("up to about half"):
        return Stated(0.0, 50.0, "saves at most half the step (half the matmuls' time)")
    if (figure := re.match(r"^~(\d+(?:\.\d+)?)%", most)) is not None:
        value = float(figure.group(1))
        as_saved = lever.get("lever") in SAVED_FIGURES
        convert = (lambda pct: pct) if as_saved else _saved
        what = "of the step saved" if as_saved else "faster"
        if kind == "bound":
            return Stated(0.0, convert(value), f"at most {value:.0f}% {what}")
        if kind == "measured":
            return Stated(convert(0.75 * value), convert(1.25 * value), f"{value:.0f}% {what}, within a quarter")
        ceiling = None if " more where " in most else convert(2 * value)
        return Stated(convert(value / 2), ceiling, f"~{value:.0f}% {what}: half to "
                      + ("no ceiling (more where it says)" if ceiling is None else "twice it"))
    return Stated(0.0, None, "saves something (no figure)")


def iteration_seconds(log_text: str, kind: str, skip: int) -> list[float]:
    """The seconds of each progress line after the first `skip` (the warm-up), as the job's log prints them."""
    pattern = TIME_LINE.get(kind)
    if pattern is None:
        return []
    return [float(value) / 1e3 for value in pattern.findall(log_text)][skip:]


def median_seconds(log_text: str, kind: str, skip: int, units: int = 1) -> tuple[float | None, int]:
    """The median seconds per unit of work of a log's steady lines, and how many lines it rests on."""
    times = iteration_seconds(log_text, kind, skip)
    return (statistics.median(times) / units if times else None), len(times)


def measured_gain(base_s: float, fixed_s: float) -> dict[str, float]:
    """The share of the time per unit of work the fix saved, and the speed-up, in percent."""
    return {"saved_pct": round(100.0 * (1.0 - fixed_s / base_s), 1),
            "speedup_pct": round(100.0 * (base_s / fixed_s - 1.0), 1)}


def judge(levers: list[dict[str, Any]], pulled: frozenset[str], measurement: dict[str, Any] | None,
          built_for: str | None, on_gpu: bool) -> dict[str, Any]:
    """A case's levers judged: the top lever, the offered levers its job already pulls, whether the lever it is
    built for was offered (on the GPU), and the measured gain against the stated one where the measured lever is
    gputop's top lever. `problems` lists each failure; an empty list passes."""
    top = levers[0] if levers else None
    already = [lever["lever"] for lever in levers if lever["lever"] in pulled]
    problems = [f"offered {name}, which the job already pulls" for name in already]
    if on_gpu and built_for is not None and built_for not in [lever["lever"] for lever in levers]:
        problems.append(f"{built_for}, the lever it is built for, was not offered")
    within = interval = None
    if top is not None and measurement is not None and measurement.get("lever") == top["lever"] \
            and measurement.get("saved_pct") is not None:
        found = stated(top)
        if found is not None:
            interval = found.record()
            within = found.holds(measurement["saved_pct"])
            if not within:
                problems.append(f"{top['lever']}: measured {measurement['saved_pct']:.0f}% of the step saved, "
                                f"outside its stated gain ({found.words})")
    return {"levers": levers, "top_lever": top["lever"] if top else None, "already_pulled": already,
            "built_for": built_for, "stated": interval, "within": within, "lever_problems": problems}
