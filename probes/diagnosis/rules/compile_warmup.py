"""compile_warmup: the main thread compiling (torch._dynamo, inductor) or inductor's compile workers busy, told into
the one-time warm-up (how long it has run, that it ends by itself) and a recompilation storm (call sites compiling
again after the job ran on), with the knobs for each; and, once training runs, when the warm-up ended."""

from __future__ import annotations

import time

from probes.diagnosis.compile_history import COMPILE_HISTORY_S, CompileHistory
from probes.diagnosis.evidence import Evidence
from probes.diagnosis.rules.lines import percent, sample_count
from probes.diagnosis.rules.rule import BottleneckFacts, Candidate, FixRemoves, Rule
from probes.diagnosis.stacks import COMPILE, describe

# A recompilation storm that takes this share of the main thread's samples over its look-back is the verdict,
# at this score at least, whatever the share of the last window.
STORM_MIN_SHARE = 0.15
STORM_SCORE = 0.4
# Compiles that keep coming back: call sites compiling again after the job had run on, in this many windows of the
# look-back. One is a new shape once (a last partial batch, or dynamo's first dynamic-shape recompile): it ends by
# itself.
STORM_MIN_RECOMPILES = 2

COMPILE_WARMUP = BottleneckFacts(
    name="compile_warmup",
    words="compiling (warm-up)",
    runs_on_host_cpu=True,
    short_of_host_cpu=False,
    hung_in=(COMPILE,),
    badge="worth_fixing",
    # Only a storm: a warm-up ends by itself, and the verdict promises nothing for it (Verdict.one_time_cost).
    fix_removes=FixRemoves(
        phases=("compile",), activities=(COMPILE,),
        why="if the recompiles stopped (compiling takes {pct} of the time)"),
    gpu_busy=False,
    kernels_bound=False,
    news_while_starting=False,
)


def evaluate(ev: Evidence) -> Candidate | None:
    share = ev.main.share(COMPILE)
    workers_busy = (ev.compile_cpu_pct or 0.0) >= 50.0
    compiles = ev.compile
    storm = is_storm(compiles)
    # A storm is judged on its whole look-back: one window between compiles must not end it.
    storm_matters = storm and compiles.share >= STORM_MIN_SHARE
    if share < 0.05 and not workers_busy and not storm_matters:
        return None
    score = max(share, 0.5 if workers_busy else 0.0, STORM_SCORE if storm_matters else 0.0)
    responsible, user_frame, _ = ev.main.top(COMPILE)
    lines = []
    if share:
        trigger = f", triggered from {describe(user_frame)}" if user_frame is not None else ""
        where = describe(responsible) if responsible is not None else "torch.compile"
        lines.append(f"main thread: {percent(share)} of {sample_count(ev.main.samples)} compiling in {where}{trigger}")
    if workers_busy:
        lines.append(f"inductor compile workers at {ev.compile_cpu_pct:.0f}% CPU")
    if storm:
        lines.insert(0, f"recompilation storm: a call site compiled again after the job had run on, in "
                        f"{compiles.recompiles} of the {compiles.windows} sample windows that compiled "
                        f"({percent(compiles.share)} of the main thread's samples over the last "
                        f"{COMPILE_HISTORY_S:.0f} s)")
        advice = [
            ("Find what changes between calls: run with TORCH_LOGS=recompiles (it prints the failing guard, "
            "usually a tensor shape)."),
            ("For varying lengths or batch sizes: torch.compile(..., dynamic=True) or "
            "torch._dynamo.mark_dynamic(x, dim); or pad inputs to a few bucket lengths."),
            ("Each new shape counts against torch._dynamo.config.recompile_limit (8 by default); past it the "
            "function silently runs uncompiled."),
        ]
    else:
        said = warmup_line(compiles, ev.latest.time)
        if said is not None:
            lines.insert(0, said)
        advice = [
            ("torch.compile's warm-up is a one-time cost per graph and shape: it ends by itself, and the job's speed "
             "is the one after it (gputop says when compiling stopped)."),
            ("Keep the inductor cache between runs (TORCHINDUCTOR_CACHE_DIR on local disk); "
            "mode='max-autotune' makes compiling longer."),
        ]
    # A storm outranks the CPU work around it (that work is the training itself; the compiles are the waste),
    # and it is seen over two windows at least, so it may replace a verdict reached before the storm showed.
    # A warm-up is a one-time cost: no fix removes it, so no speed-up is promised for it.
    return Candidate("compile_warmup", score, lines, advice, sustained=storm_matters, one_time_cost=not storm)


def is_storm(compiles: CompileHistory) -> bool:
    """Call sites compiled again after the job had run on, in STORM_MIN_RECOMPILES windows of the look-back at least."""
    return compiles.recompiles >= STORM_MIN_RECOMPILES


def warmup_line(compiles: CompileHistory, now: float) -> str | None:
    """'torch.compile warm-up: compiling for 39 s so far (under way when gputop attached), no training step seen
    yet', or, once the main thread runs outside compiling, how long it took and since when nothing compiled. A call
    site compiling again once (a new shape) is named as such, not as the warm-up. Only what the frames show: a
    warm-up under way when gputop attached began before what it measures."""
    if compiles.began is None:
        return None
    attached = " (under way when gputop attached)" if compiles.under_way_at_attach else ""
    what = "torch.compile warm-up" if not compiles.recompiles_seen else "torch.compile recompiling"
    if compiles.ended is not None:
        took = _duration(compiles.ended - compiles.began)
        at_least = "at least " if attached else ""
        return f"{what} took {at_least}{took}{attached}; no compiling since {_clock(compiles.ended)}"
    at_least = "at least " if compiles.began_before_look_back else ""  # (the walk's bound, not its start)
    line = f"{what}: compiling for {at_least}{_duration(now - compiles.began)} so far{attached}"
    if compiles.recompiles_seen == 1:
        return line + (": one call site compiled again after the job had run on, once (a new shape, such as a last "
                       "partial batch: a one-time cost)")
    if compiles.recompiles_seen:
        return line + f": call sites compiled again after the job had run on, {compiles.recompiles_seen} times"
    if not compiles.ran_since_began:
        return line + ", no training step seen yet"
    return line + "; each call site compiled once (a new graph each: eval and train, forward and backward)"


def after_warmup_line(ev: Evidence) -> str | None:
    """For a verdict other than compile_warmup: when the warm-up the look-back holds ended, and that nothing has
    compiled since ('torch.compile warm-up took 2.1 min; no compiling since 14:03:12'). None where no warm-up
    ended in it, or where what compiled was a storm."""
    compiles = ev.compile
    if compiles.ended is None or compiles.recompiles_seen >= STORM_MIN_RECOMPILES or compiles.began_before_look_back:
        return None  # (a warm-up that began before the look-back ended long ago: its length is not in the frames)
    return warmup_line(compiles, ev.latest.time)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def _clock(when: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(when))


RULE = Rule(concludes=(COMPILE_WARMUP,), evaluate=evaluate)
