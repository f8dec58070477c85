"""diagnose(history) -> Verdict: which bottleneck limits the target, whether it is hung, with the evidence
(numbers from the frames, the responsible frame) and the knob to turn.

A pure function of the frames: no I/O and no clock reads (time comes from the frames), so live runs,
replays and tests get the same answer. It looks only at a recent window of the history, so one call
costs the same after ten minutes as after ten seconds.

Method, in the order an expert would check:
1. Liveness: any sign of progress (CPU time, I/O bytes, the main thread's stack moving, GPU work, the
   log's iteration) within ``hang_after_s``? If none, it is hung, and the evidence says where it waits; unless
   it sleeps in the kernel with no Python stack to be stuck in (`sleep`, a shell): then it is sleeping.
2. Bottleneck, by rules in priority order: compiling, checkpointing, collectives (the main thread's
   stacks say so); a busy GPU (clocks, power and SM activity, not util% alone), held down or not; a CPU
   quota that throttles; storage or network reads; the input pipeline; host compute; waiting
   (probes.diagnosis.rules.RULES; docs/diagnosis.md). Where no stack can be read at all (ptrace denied,
   py-spy missing) the verdict is "cannot see" with the fix, not a bottleneck.
3. Hysteresis: the previous verdict stands while its rule still holds nearly as well as the newcomer.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from probes.diagnosis.bottlenecks import FACTS_BY_NAME
from probes.diagnosis.contention import contention
from probes.diagnosis.evidence import Evidence, gather
from probes.diagnosis.exit_causes import (
    account,
    asked_to_stop,
    ended,
    failure_line,
    kernel_records,
    last_log_failure,
    log_failures,
    told_in_log,
)
from probes.diagnosis.hung import hung_bottleneck, sleeping_bottleneck
from probes.diagnosis.rules import ENTER_SCORE, evaluate_rules
from probes.diagnosis.rules.cannot_see import blind, cannot_see
from probes.diagnosis.rules.compile_warmup import after_warmup_line
from probes.diagnosis.rules.rule import Candidate
from probes.diagnosis.rules.unknown import start_imports, starting
from probes.diagnosis.verdict_lines import THIN_EVIDENCE_NOTES, VerdictLine, kind_of, without
from probes.frame import Frame, LogFailure, ProcessExit, Verdict
from probes.machine_records import KernelEvent

DEFAULT_HANG_AFTER_S = 5.0  # no progress for this long is hung (--hang-after)
# A new bottleneck replaces the previous one only once the previous rule's strength has fallen below
# STAY_SCORE or the newcomer is stronger by SWITCH_MARGIN: one noisy window must not flip the verdict.
STAY_SCORE = 0.2
SWITCH_MARGIN = 0.25
# A verdict reached on thin evidence (say GPU counters before the first stack samples) is provisional:
# it is not held against the first real evidence.
HOLD_MIN_CONFIDENCE = 0.45
CONFIDENCE_FULL_SAMPLES = 40
# Fewer main-thread samples than this in the stack window is thin evidence: the verdict says how thin,
# is capped at PROVISIONAL_CONFIDENCE, and does not replace a verdict that was reached on more.
THIN_SAMPLES = 10
PROVISIONAL_CONFIDENCE = 0.4
CONFIDENCE_FULL_SECONDS = 10.0
# While the verdict holds, its confidence rises with the evidence at once but falls toward a lower raw figure
# only with this time constant: the raw figure follows how many samples the stack window happens to hold (a
# window the sampler closed early, the ticks before the next one lands), and swung 0.88 -> 0.40 -> 0.81 on a
# job that did not change. Weaker evidence that lasts still lowers it; a new verdict starts from its raw figure.
CONFIDENCE_FALL_SECONDS = 30.0


def diagnose(history: Sequence[Frame], previous: Verdict | None = None,
             hang_after_s: float = DEFAULT_HANG_AFTER_S) -> Verdict:
    """The verdict on `history` (oldest frame first). Pass the previous verdict for stability."""
    return diagnose_with_evidence(history, previous, hang_after_s)[0]


def diagnose_with_evidence(history: Sequence[Frame], previous: Verdict | None = None,
                           hang_after_s: float = DEFAULT_HANG_AFTER_S) -> tuple[Verdict, Evidence | None]:
    """diagnose(), plus the Evidence it was reached on (None for an empty history or an exited target), so
    the job's diagnosis reads each rank's profile without gathering it twice."""
    if not history:
        return Verdict(), None
    latest = history[-1]
    if not latest.target.alive:
        return _exited(history, previous), None
    evidence = gather(history, hang_after_s)
    liveness = evidence.liveness
    imports = start_imports(evidence)
    starting_up = imports if previous is None or previous.bottleneck == "unknown" else None
    candidates = evaluate_rules(evidence) if liveness not in ("hung", "sleeping") else []
    limit = _limit_while_starting(candidates) if starting_up is not None else None
    if liveness == "hung":
        candidate = hung_bottleneck(evidence, hang_after_s)
        # Resting on the log's age, the hang has been watched only as long as gputop has watched: it grows with that.
        silent_s = evidence.log_still[1] + hang_after_s if evidence.log_still is not None else evidence.stuck_for_s
        confidence = min(1.0, 0.6 + 0.4 * (silent_s - hang_after_s) / max(hang_after_s, 1.0))
    elif liveness == "sleeping":
        candidate = sleeping_bottleneck(evidence)
        confidence = min(1.0, 0.6 + 0.4 * (evidence.stuck_for_s - hang_after_s) / max(hang_after_s, 1.0))
    elif starting_up is not None and limit is None:
        candidate, confidence = starting(starting_up), 0.0  # the imports say nothing of what will limit the training
    else:
        candidate = limit if limit is not None else _choose(candidates, previous, evidence.main.samples)
        if imports is not None and FACTS_BY_NAME[candidate.bottleneck].news_while_starting:
            # slow *because* of the quota, or of the GIL holder, is not "starting": both are said
            also = f"{imports.words()}, {FACTS_BY_NAME[candidate.bottleneck].words} as it imports"
            candidate = dataclasses.replace(candidate, evidence=[*candidate.evidence[:1], also,
                                                                 *candidate.evidence[1:]])
        confidence = _confidence(candidate, evidence, previous, latest.time)
        if candidate.held_over and previous is not None:
            confidence = previous.confidence  # neither grows nor decays on samples that are not its own
        elif previous is not None and _holds(candidate, liveness, previous) and confidence < previous.confidence:
            step = 1.0 - math.exp(-latest.interval_s / CONFIDENCE_FALL_SECONDS)
            confidence = previous.confidence + step * (confidence - previous.confidence)
        thin = _thin(candidate, evidence, previous)
        candidate = _with_context(candidate, evidence, thin)
        if thin:
            confidence = min(confidence, PROVISIONAL_CONFIDENCE)
    if blind(evidence):
        # Without a single stack a bottleneck would be a guess ("idle" for a process it may not read): say
        # what cannot be seen and the fix instead. The liveness stands: it rests on CPU, I/O and the log.
        candidate, confidence = cannot_see(evidence, candidate), 0.0
    since = latest.time
    if previous is not None and (previous.bottleneck, previous.liveness) == (candidate.bottleneck, liveness):
        since = previous.since if previous.since is not None else latest.time
    return Verdict(
        bottleneck=candidate.bottleneck,
        liveness=liveness,
        confidence=round(max(0.0, min(1.0, confidence)), 2),
        evidence=tuple(candidate.evidence),
        advice=tuple(candidate.advice),
        since=since,
        stalled_s=round(evidence.stuck_for_s, 1),
        one_time_cost=candidate.one_time_cost,
        step=evidence.step.lines(),
        samples=evidence.main.samples,
        from_counters=candidate.from_metrics,
    ), evidence


def _exited(history: Sequence[Frame], previous: Verdict | None) -> Verdict:
    latest = history[-1]
    target = latest.target
    own = ended(history).get(target.pid)
    kernel = kernel_records(history)
    log = log_failures(history)
    said = account(own, kernel) if own is not None else None
    if said is not None:
        headline = f"PID {target.pid} has exited: {said.how}"
    else:
        headline = f"PID {target.pid} has exited" + (f" ({target.exit_reason})" if target.exit_reason else "")
    children = _children_ended(history, own)
    # A child whose death the machine recorded (a signal, the OOM killer) is often the cause: said in the headline.
    # Where /proc could not say how a child ended, its main process's log may ("DataLoader worker (pid 57) is killed by
    # signal: Killed.").
    # Of those, one that crashed (a fault, the OOM killer) before one that was asked to stop: a launcher stops the
    # other ranks after one fails, and torchrun's log names their SIGTERM.
    recorded = [child for child in children if child.signal is not None or child.pid in kernel
                or _killed_per_log(child, log)]
    cause = min(recorded, key=lambda child: asked_to_stop(child, log), default=None)
    if cause is not None:
        how = account(cause, kernel, log).how  # "killed by …": a signal, the kernel's or the log's record is known
        headline += f", after its {_role_words(cause)} PID {cause.pid} was {how}"
    # The job's own last words, right after the headline: the exception, the timeout, the worker it names.
    failure = last_log_failure(log, own.seen_at if own is not None else target.exited_at)
    said_in_log = [failure_line(failure)] if failure is not None else []
    lines = [headline + ".", *said_in_log,
             *(_child_line(child, own, kernel, log) for child in children if child is not cause)]
    if previous is not None and previous.liveness == "exited":
        lines = list(previous.evidence)  # said once, when it exited: keep the account of what came before
        if said_in_log and said_in_log[0] not in lines:  # the log's last lines read a tick after the exit was seen
            lines.insert(1, said_in_log[0])
    elif previous is not None and previous.bottleneck != "unknown":
        lines.append(f"Before it exited: {previous.bottleneck}" +
                     (f" — {previous.evidence[0]}" if previous.evidence else ""))
    since = target.exited_at if target.exited_at is not None else latest.time
    if previous is not None and previous.liveness == "exited" and previous.since is not None:
        since = previous.since
    advice: tuple[str, ...] = (said.advice,) if said is not None and said.advice else () if said is not None else \
        ("Check its exit status and the end of its log; dmesg shows whether the OOM killer ended it.",)
    if previous is not None and previous.liveness == "exited":
        advice = previous.advice
    return Verdict(
        bottleneck=previous.bottleneck if previous is not None else "unknown",
        liveness="exited",
        confidence=1.0,
        evidence=tuple(lines),
        advice=advice,
        since=since,
    )


# A child that ended this long before the target, or after, is said beside its exit: a DataLoader worker killed makes
# the main process raise ("DataLoader worker (pid X) is killed by signal: Killed.") within the same tick.
CHILD_ENDED_BEFORE_S = 30.0


def _children_ended(history: Sequence[Frame], own: ProcessExit | None) -> list[ProcessExit]:
    """Up to two children (workers, ranks) that ended up to CHILD_ENDED_BEFORE_S before the target, first first."""
    if own is None:
        return []
    return sorted((e for e in ended(history).values()
                   if e.pid != own.pid and own.seen_at - e.seen_at <= CHILD_ENDED_BEFORE_S),
                  key=lambda e: e.seen_at)[:2]


def _child_line(child: ProcessExit, own: ProcessExit | None, kernel: dict[int, KernelEvent],
                log: Sequence[LogFailure]) -> str:
    before = own.seen_at - child.seen_at if own is not None else 0.0
    when = f", {before:.0f} s before it" if before >= 1 else ", in the same tick"
    return f"its {_role_words(child)} PID {child.pid} ({child.name}) ended{when}: {account(child, kernel, log).how}"


def _killed_per_log(child: ProcessExit, log: Sequence[LogFailure]) -> bool:
    """/proc could not say how the child ended, and the log says a signal ended it."""
    told = told_in_log(log, child.pid) if child.signal is None and child.exit_code is None else None
    return told is not None and told.signal is not None


def _role_words(process: ProcessExit) -> str:
    if process.rank is not None:
        return f"rank {process.rank}"
    return process.role.replace("_", " ").replace("dataloader", "DataLoader")


def _choose(candidates: list[Candidate], previous: Verdict | None, main_samples: int) -> Candidate:
    """The first candidate (they come in priority order), unless the previous verdict still holds.

    A handful of stack samples never overturns a verdict reached on more: the previous one stands while
    its rule fits at all."""
    winner = candidates[0]
    if previous is None or previous.bottleneck == winner.bottleneck or previous.liveness == "hung" \
            or previous.confidence < HOLD_MIN_CONFIDENCE:
        return winner
    held = next((c for c in candidates if c.bottleneck == previous.bottleneck), None)
    if not winner.from_metrics and main_samples < THIN_SAMPLES:
        if held is not None:
            return held
        # The previous verdict's samples have aged out and too few new ones point elsewhere: keep it, and
        # say what is being held back.
        kept = without(previous.evidence, *THIN_EVIDENCE_NOTES, "contention")
        kept.append(VerdictLine(f"holding: the latest {main_samples} sample{'s' if main_samples != 1 else ''} point "
                                f"to {winner.bottleneck}, too few ({THIN_SAMPLES} needed) to change the verdict",
                                "holding"))
        advice = without(previous.advice, "contention")
        return Candidate(previous.bottleneck, previous.confidence, kept, advice, held_over=True,
                         one_time_cost=previous.one_time_cost)
    if held is None or winner.sustained:
        return winner
    if held.score < STAY_SCORE or winner.score >= held.score + SWITCH_MARGIN:
        return winner
    return held


def _limit_while_starting(candidates: list[Candidate]) -> Candidate | None:
    """The strongest limit measured outside the code (a quota's throttling, a GIL holder), which is the verdict while
    the job imports: every other reading would describe the imports."""
    return next((c for c in candidates if c.score >= ENTER_SCORE and FACTS_BY_NAME[c.bottleneck].news_while_starting),
                None)


def _holds(candidate: Candidate, liveness: str, previous: Verdict | None) -> bool:
    """The previous verdict names the same bottleneck and liveness: the job has not changed its picture."""
    return previous is not None and (previous.bottleneck, previous.liveness) == (candidate.bottleneck, liveness)


def _thin(candidate: Candidate, evidence: Evidence, previous: Verdict | None) -> bool:
    """A new stack-based verdict from fewer than THIN_SAMPLES samples (one that was reached on more and
    still holds is not made provisional again by a quiet window)."""
    if candidate.bottleneck == "unknown" or candidate.from_metrics or evidence.main.samples >= THIN_SAMPLES:
        return False
    held = previous is not None and previous.bottleneck == candidate.bottleneck and \
        previous.confidence >= HOLD_MIN_CONFIDENCE
    return not held


def _wants_cpu(candidate: Candidate, evidence: Evidence) -> bool:
    """Sharing the CPUs matters to this verdict: its work runs on the host CPU, or the main thread is seen
    queueing for a core."""
    running = evidence.running_share()
    return FACTS_BY_NAME[candidate.bottleneck].runs_on_host_cpu or (running is not None and running < 0.8)


def _with_context(candidate: Candidate, evidence: Evidence, thin: bool) -> Candidate:
    """The rule's finding plus what qualifies it: thin evidence, and CPUs shared with other work."""
    lines, advice = list(candidate.evidence), list(candidate.advice)
    warmed_up = after_warmup_line(evidence) if candidate.bottleneck != "compile_warmup" else None
    # A held verdict keeps its lines: the same line is not said twice.
    if warmed_up is not None and not any(kind_of(line) == "after_warmup" and line == warmed_up for line in lines):
        lines.append(VerdictLine(warmed_up, "after_warmup"))  # when the steady state this verdict describes began
    if thin:
        n = evidence.main.samples
        lines.append(VerdictLine(f"provisional: only {n} sample{'s' if n != 1 else ''} of the main thread so far "
                                 f"({THIN_SAMPLES} make a verdict)", "provisional"))
    shared = contention(evidence) if _wants_cpu(candidate, evidence) else None
    if shared is not None:
        # Never before the rule's own first advice: in the first slot this generic line pushed the specific fix off
        # the verdict pane (issue 20). Right after it where CPU is what this verdict is short of, else last.
        lines.append(shared[0])
        if shared[1]:  # empty where the job is not short of a CPU: nothing to move for it
            advice.insert(1 if FACTS_BY_NAME[candidate.bottleneck].short_of_host_cpu else len(advice), shared[1])
    return dataclasses.replace(candidate, evidence=lines, advice=advice)


def _confidence(candidate: Candidate, evidence: Evidence, previous: Verdict | None, now: float) -> float:
    """Strength of the rule, scaled by how much evidence there is and how long it has held."""
    if candidate.bottleneck == "unknown":
        return 0.0
    support = min(1.0, evidence.main.samples / CONFIDENCE_FULL_SAMPLES) if evidence.main.samples else 0.3
    if candidate.from_metrics:  # GPU and cgroup rules rest on counters, not on stack samples
        support = max(support, min(1.0, len(evidence.metric_frames) / 3))
    held_for = 0.0
    if previous is not None and previous.bottleneck == candidate.bottleneck and previous.since is not None:
        held_for = max(0.0, now - previous.since)
    persistence = min(1.0, held_for / CONFIDENCE_FULL_SECONDS)
    return min(1.0, candidate.score) * (0.45 + 0.35 * support + 0.2 * persistence)
