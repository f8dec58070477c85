"""gil_contention: another thread of the training process holds its GIL so much of the time that the training
thread waits for it: each return from a torch op (which runs with the GIL released) needs the GIL back.

It reads the GIL windows (``py-spy record --gil``, probes/sampling/pyspy.py), which say at each look which thread held
the GIL, and the training thread's own schedstat (on a CPU, queued for one, or off CPU): a thread that waits
for the GIL sleeps on a futex, so it is off CPU while its Python stack still shows the line it runs.

Its own verdict rather than evidence on cpu_bound: the fix is not in the training loop (faster ops, more cores,
the GPU) but in the other thread, and what cpu_bound advises would not help.
"""

from __future__ import annotations

from probes.diagnosis.evidence import Evidence
from probes.diagnosis.rules.lines import percent
from probes.diagnosis.rules.rule import BottleneckFacts, Candidate, Rule
from probes.diagnosis.stacks import QUEUE_WAIT, WAIT, describe, is_library
from probes.frame import StackFrame

# Fewest looks a share is judged on: 20 looks put a 50% share within about +-11% (one standard error).
MIN_LOOKS = 20
# Another thread holding the GIL at least this share of the looks contends with the training thread ...
HOLDER_SHARE = 0.35
# ... unless the training thread (schedstat) is asleep less than this share of the time: one that never sleeps
# is not held back. Waiting for the GIL is a futex sleep, but once the holder lets go the waiter queues for a
# core, so on a busy machine part of the wait shows as run-queue time: this bound is low on purpose.
MAIN_ASLEEP_PCT = 10.0

GIL_CONTENTION = BottleneckFacts(
    name="gil_contention",
    words="GIL-contended",
    runs_on_host_cpu=True,
    short_of_host_cpu=False,
    hung_in=(),
    badge="worth_fixing",
    fix_removes=None,
    gpu_busy=False,
    kernels_bound=False,
    news_while_starting=True,
)


def evaluate(ev: Evidence) -> Candidate | None:
    gil = ev.gil
    if gil is None or gil.looks < MIN_LOOKS:
        return None
    holder = gil.busiest_other()
    if holder is None:
        return None
    share = holder.held / gil.looks
    if share < HOLDER_SHARE:
        return None
    if ev.main.samples and ev.main.share(WAIT, QUEUE_WAIT) >= 0.5:
        return None  # the training thread itself waits (a queue, a sleep): the GIL is not what holds it
    asleep = ev.asleep_pct()
    if asleep is not None and asleep < MAIN_ASLEEP_PCT:
        return None
    name = f"thread {holder.name}" if holder.name else f"thread {holder.tid}"
    where = _where(holder.stack)
    main_share = gil.main_held() / gil.looks
    lines = [f"{name}{where} holds the GIL {percent(share)} of the time ({holder.held} of {gil.looks} looks); "
             f"the training thread holds it {percent(main_share)}"]
    if ev.main_thread_cpu_pct is not None and asleep is not None:
        queued = ev.main_thread_runqueue_pct or 0.0
        queued_words = f", queued for a core {queued:.0f}%" if queued >= 5 else ""
        lines.append(f"the training thread runs {ev.main_thread_cpu_pct:.0f}% of the time and waits the rest: asleep "
                     f"{asleep:.0f}% outside any blocking call (waiting for the GIL){queued_words}")
    others = [h for h in gil.holders if h.tid not in (gil.main_tid, holder.tid) and h.held / gil.looks >= 0.1]
    for other in others[:2]:
        lines.append(f"also thread {other.name or other.tid}{_where(other.stack)} holds it"
                     f" {percent(other.held / gil.looks)}")
    who = holder.name or f"thread {holder.tid}"
    advice = [
        f"Move {who}'s work to a process (multiprocessing, or a separate service): a process has its own GIL.",
        f"Make {who} sleep between rounds (time.sleep or Event.wait with a period), so it holds the GIL in "
        "short bursts instead of all the time.",
        f"Batch {who}'s work into fewer, larger calls that release the GIL (numpy, torch ops on whole arrays) "
        "instead of a Python loop over items.",
    ]
    score = min(0.95, 0.5 + share / 2)
    # Sustained: the shares come from whole GIL windows (5-10 s each, up to GIL_WINDOW_S of them), not from one
    # noisy stack window, and they explain the cpu_bound reading it replaces (a thread waiting for the GIL keeps
    # its stack on the line it runs, so its samples look like computing).
    return Candidate("gil_contention", score, lines, advice, sustained=True)


def _where(stack: tuple[StackFrame, ...]) -> str:
    """', in aggregate_metrics (telemetry.py:41),': the thread's own innermost frame, else its innermost one."""
    if not stack:
        return ""
    own = next((f for f in stack if not is_library(f)), stack[0])
    return f", in {describe(own)},"


RULE = Rule(concludes=(GIL_CONTENTION,), evaluate=evaluate)
