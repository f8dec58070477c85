"""compile_warmup: the main thread compiling (torch._dynamo, inductor), inductor's compile workers busy, or a
recompilation storm (compiling again after training steps had run), with the knobs for each."""

from __future__ import annotations

from probes.diagnosis.evidence import COMPILE_HISTORY_S, Evidence
from probes.diagnosis.rules.lines import percent, sample_count
from probes.diagnosis.rules.rule import BottleneckFacts, Candidate, Rule
from probes.diagnosis.stacks import COMPILE, describe

# A recompilation storm that takes this share of the main thread's samples over its look-back is the verdict,
# at this score at least, whatever the share of the last window.
STORM_MIN_SHARE = 0.15
STORM_SCORE = 0.4

COMPILE_WARMUP = BottleneckFacts(
    name="compile_warmup",
    words="compiling (warm-up)",
    runs_on_host_cpu=True,
    short_of_host_cpu=False,
    hung_in=(COMPILE,),
)


def evaluate(ev: Evidence) -> Candidate | None:
    share = ev.main.share(COMPILE)
    workers_busy = (ev.compile_cpu_pct or 0.0) >= 50.0
    storm = ev.recompile_windows >= 2
    # A storm is judged on its whole look-back: one window between compiles must not end it.
    storm_matters = storm and ev.lookback_compile_share >= STORM_MIN_SHARE
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
        lines.insert(0, f"recompilation storm: compiling again in {ev.recompile_windows} of "
                        f"{ev.compile_windows} sample windows after training steps had run "
                        f"({percent(ev.lookback_compile_share)} of the main thread's samples over the last "
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
        advice = [
            "Compile warm-up is a one-time cost per shape: steady-state speed comes after it.",
            ("Keep the inductor cache between runs (TORCHINDUCTOR_CACHE_DIR on local disk); "
            "mode='max-autotune' makes compiling longer."),
        ]
    # A storm outranks the CPU work around it (that work is the training itself; the compiles are the waste),
    # and it is seen over two windows at least, so it may replace a verdict reached before the storm showed.
    return Candidate("compile_warmup", score, lines, advice, sustained=storm_matters)


RULE = Rule(concludes=(COMPILE_WARMUP,), evaluate=evaluate)
