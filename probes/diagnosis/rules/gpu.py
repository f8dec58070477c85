"""gpu_bound and gpu_throttled, one rule: a GPU busy by its counters (SM activity or power, not util% alone) is
the limit; held below its maximum clock by a power cap, heat or a hardware slowdown, it is throttled."""

from __future__ import annotations

from probes.diagnosis.evidence import Evidence
from probes.diagnosis.gpu_limit import THROTTLE_REASONS, clock_cap, gpu_limit
from probes.diagnosis.levers import Seen, offered
from probes.diagnosis.rules.lines import gpu_line, main_share_line, percent
from probes.diagnosis.rules.rule import BottleneckFacts, Candidate, Rule
from probes.diagnosis.rules.signs import power_fraction
from probes.diagnosis.stacks import COMPUTE, DATA_PREP, DATA_WAIT, IO, WAIT

GPU_BUSY_UTIL_PCT = 80.0
GPU_BUSY_SM_ACTIVE_PCT = 50.0
GPU_BUSY_POWER_FRACTION = 0.5
# CLOCK_HELD_FRACTION and THROTTLE_REASONS live in probes/diagnosis/gpu_limit.py, which says what holds the clock.

# A GPU-bound step for which no lever applies: its facts and its class leave none (an unknown fact offers none).
NO_LEVER = ("The GPU is the limit, and nothing gputop read names a lever the job does not already pull: "
            "gputop probe --like PID times this GPU's reference for its model, which says what is left.")

GPU_BOUND = BottleneckFacts(
    name="gpu_bound",
    words="GPU-bound",
    runs_on_host_cpu=False,
    short_of_host_cpu=False,
    hung_in=(),
    badge="healthy",
    fix_removes=None,
    gpu_busy=True,
    kernels_bound=True,
    news_while_starting=False,
)

GPU_THROTTLED = BottleneckFacts(
    name="gpu_throttled",
    words="GPU throttled",
    runs_on_host_cpu=False,
    short_of_host_cpu=False,
    hung_in=(),
    badge="worth_fixing",
    fix_removes=None,
    gpu_busy=True,
    kernels_bound=False,
    news_while_starting=False,
)


def evaluate(ev: Evidence) -> Candidate | None:
    g = ev.gpu
    if not g.in_use or g.util_pct is None or g.util_pct < GPU_BUSY_UTIL_PCT:
        return None
    power = power_fraction(ev)
    if g.sm_active_pct is not None:
        if g.sm_active_pct < GPU_BUSY_SM_ACTIVE_PCT:
            return None
        strength = 0.9
    elif power is not None:
        if power < GPU_BUSY_POWER_FRACTION:
            return None
        strength = 0.8
    else:
        strength = 0.5  # util% alone: a kernel was running, not necessarily a busy one
    lines = [gpu_line(ev)]
    inside = gpu_limit(ev)
    if strength == 0.5:
        lines.append("only util% is readable here: it says a kernel was running, not how many SMs were busy")
    elif inside is not None:  # util% alone already said what cannot be seen; with SM activity or power, what is inside
        lines.append(inside.line())
    if ev.main.samples:
        lines.append(main_share_line(ev, ev.main.share(COMPUTE, WAIT), "computing or waiting on the GPU",
                                      COMPUTE, WAIT))
        data = ev.main.share(DATA_WAIT, DATA_PREP, IO)
        if data < 0.1:
            lines.append(f"input pipeline: {percent(data)} of main-thread samples — data loading is not the limit")
    step = ev.step.summary()
    if step is not None:  # what the levers below were checked against: why compile or bf16 is not offered
        lines.append(f"the step, as read: {step}")
    cap = clock_cap(g)
    if cap is not None:
        names = ", ".join(THROTTLE_REASONS[r] for r in cap.reasons)
        lines.insert(1, f"SM clock held at {percent(cap.clock_fraction)} of max by: {names}")
        # The caps first, then whatever levers the step leaves (levers.py: each only where the facts say it applies).
        advice = offered(Seen(ev.step, inside, g))
        return Candidate("gpu_throttled", strength, lines, advice, from_metrics=True)
    # Only the levers the GPU's class and the step's facts say apply (levers.py); none is the good case's answer.
    advice = offered(Seen(ev.step, inside, g)) or [NO_LEVER]
    return Candidate("gpu_bound", strength, lines, advice, from_metrics=True)


RULE = Rule(concludes=(GPU_BOUND, GPU_THROTTLED), evaluate=evaluate)
