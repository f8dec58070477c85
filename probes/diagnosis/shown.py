"""The verdict as shown: what goes under diagnose()'s verdict once the job's pace and the window's time shares are
known. The phases that recur beside the bottleneck (a checkpoint of a few seconds every few iterations is never a
window's majority), the pace lines (the MFU sentence; what a log's printed time is where it disagrees with the step
counter), the most the bottleneck's fix can win (a bound from a measured share), and, for a GPU-busy step at its
reference step's rate, the levers the reference does not pull.

Pure, like the rest of probes/diagnosis: the monitor calls shown_verdict() once per frame and hands its result to
the front ends; the verdict fed back to diagnose() stays without these lines, so they never steer the next one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from probes.diagnosis.bottlenecks import FACTS_BY_NAME
from probes.diagnosis.gpu_memory_risk import GPU_MEMORY_ADVICE, GpuMemoryRisk
from probes.diagnosis.levers import beside_reference
from probes.diagnosis.machine_faults import NODE_ADVICE, GpuFault
from probes.diagnosis.memory_risk import MemoryRisk
from probes.diagnosis.shares import TimeShares, max_speedup, recurring_lines
from probes.frame import Verdict
from probes.logformats import known_format
from probes.pace import disagreement_words
from probes.reference.baseline import compact_count, mfu_percent, printed_percent
from probes.reference.job_pace import Pace


def pace_line(pace: Pace | None) -> str | None:
    """One sentence for the verdict's evidence when the pace explains it: "21.0 s/iter = 52% MFU on the
    NVIDIA H200; the log's 164% is against an A100's 312 TFLOP/s". A log that prints achieved TFLOP/s per GPU
    instead of an MFU (Megatron-LM) has it set beside gputop's achieved TFLOP/s, not beside the MFU."""
    if pace is None or pace.comparison is None or pace.seconds_per_iter is None:
        return None
    compared = pace.comparison
    if compared.corrected_mfu_pct is None:
        return None
    printed = ""
    log_format = known_format(pace.format)
    # A log that counts attention otherwise than gputop (the causal half) says so beside its figure; one that
    # counts as gputop does needs no words here (the comparison's lines say it).
    counts = log_format.printed_mfu_counts if log_format is not None else None
    differs = f", {counts.short()}" if counts is not None and counts.differs else ""
    if compared.reported_mfu_pct is not None:
        printed = f"; the log's {printed_percent(compared.reported_mfu_pct)}%"
        if log_format is not None and log_format.printed_mfu_against:
            printed += f" is against {log_format.printed_mfu_against}"
        printed += differs
    if compared.reported_tflops_per_gpu is not None and compared.achieved_flops_per_s is not None:
        printed += (f"; {compared.achieved_flops_per_s / 1e12:.1f} TFLOP/s achieved, the log's "
                    f"{compared.reported_tflops_per_gpu:g} TFLOP/s per GPU{differs}")
    of = f" on the {pace.gpu_name}" if pace.gpu_name else ""
    basis = f" by {compared.mfu_basis}" if compared.mfu_basis else ""
    line = f"{pace.seconds_per_iter:.1f} s/iter = {mfu_percent(compared.corrected_mfu_pct)}% MFU{of}{basis}{printed}"
    if compared.compute_bound_pct is not None:
        kind = "compiled " if compared.reference_compiled else "eager " if compared.reference_compiled is False else ""
        line += f"; {compared.compute_bound_pct:.0f}% of the {kind}reference step's rate"
    return line


def _pace_words(verdict: Verdict, pace: Pace | None) -> list[str]:
    """The pace lines the verdict's evidence carries: its MFU sentence and, where the log's printed time and
    its step counter disagree over the window, what the printed time is."""
    lines = []
    line = pace_line(pace)
    if line is not None and pace is not None and pace.comparison is not None:  # a line needs both
        # MFU is called good or poor by a fixed threshold only where no measured reference says what this GPU runs
        # this model at: with one, the line's share of the reference step's rate is the judgement.
        far_from_peak = False
        if FACTS_BY_NAME[verdict.bottleneck].kernels_bound and pace.comparison.compute_bound_pct is None:
            far_from_peak = (pace.comparison.corrected_mfu_pct or 0) < 35
            line += ": the GPU is busy but far from its peak" if far_from_peak \
                else ": compute-bound, as expected for this model"  # which levers are left: the advice, from the facts
        lines.append(line)
        if far_from_peak:
            lines.extend(_per_token_words(pace))
    cross_check = pace_cross_check_line(pace)
    if cross_check is not None:
        lines.append(cross_check)
    return lines


def _per_token_words(pace: Pace) -> list[str]:
    """A low MFU is no slow model: MFU counts FLOPs per second, and a narrow model does few FLOPs per token. The
    seed-004 pair on an H200 is the case: n_embd 384 at 30% MFU trained 2.2x the tokens per second of n_embd 768
    at 39%. Said with the job's measured tokens/s, so that runs of different shapes are compared by it."""
    if pace.tokens_per_s is None:
        return []
    flops = pace.comparison.flops_per_token if pace.comparison is not None else None
    at = f" at {compact_count(flops)} FLOPs per token" if flops else ""
    trains = f"this job trains {compact_count(pace.tokens_per_s)} tokens/s{at}"
    return [f"MFU counts FLOPs per second, not tokens: {trains}; "
            "a model of another shape can score a higher MFU and train fewer tokens/s, so compare runs by "
            "tokens/s (gputop compare A B)"]


def pace_cross_check_line(pace: Pace | None) -> str | None:
    """What the log's printed figure is, where it disagrees with the step counter over the window (probes/pace.py
    decides that, and the pace is the counter's): "the log's printed time averages 31 ms/step over the window, but
    the step counter moved every 0.64 s (21× longer): ..."."""
    if pace is None or pace.printed_seconds_per_iter is None or not pace.seconds_per_iter:
        return None
    return disagreement_words(pace.printed_seconds_per_iter, pace.seconds_per_iter, pace.printed_from)


def nothing_to_win_pct(pace: Pace | None) -> float | None:
    """The job's rate as a share of this GPU's reference step for its model, where it leaves nothing in the step to
    win (from NOTHING_TO_WIN_PCT up to the noise above 100%; faster than that, the probe is no bound for it)."""
    compared = pace.comparison if pace is not None else None
    if pace is None or compared is None or compared.compute_bound_pct is None:
        return None
    return compared.compute_bound_pct if compared.nothing_to_win else None


def _lever_advice(verdict: Verdict, pace: Pace | None) -> tuple[str, ...]:
    """The verdict's advice, or, for a GPU-busy step at its reference's rate, that measurement and the levers the
    reference does not pull (levers.beside_reference): the ones it pulls are measured away by it."""
    pct = nothing_to_win_pct(pace)
    if pct is None or not FACTS_BY_NAME[verdict.bottleneck].gpu_busy or pace is None or pace.comparison is None:
        return verdict.advice
    return beside_reference(verdict.advice, pct, pace.comparison.reference_compiled,
                            pace.comparison.reference_settings)


def shown_verdict(verdict: Verdict, pace: Pace | None, shares: TimeShares | None,
                  risk: MemoryRisk | None = None, faults: Sequence[GpuFault] = (),
                  nccl: Sequence[str] = (), gpu_risk: GpuMemoryRisk | None = None) -> Verdict:
    """The verdict as shown (the one fed back to diagnose() stays without these): under its headline the phases
    that recur beside it (a checkpoint of a few seconds every few iterations is never a window's majority), then
    the pace lines, the rule's second line, and the most its fix can win, with that figure in max_speedup. On an
    80×24 screen two evidence lines show: what recurs and the pace come first, the gain where there is room.
    Memory growing toward its limit (memory_risk.py), and a process's GPU memory toward its GPU's total
    (gpu_memory_risk.py), are said in any live state: first where the limit is near. The
    machine's faults on the job's GPUs (machine_faults.py) are said in every state: a node's first of all; NCCL's own
    view (nccl_view.py) under the headline, in every state."""
    verdict = _with_faults(_with_risk(_with_risk(verdict, gpu_risk), risk), faults)
    if nccl:
        verdict = dataclasses.replace(verdict, evidence=(*verdict.evidence[:1], *nccl, *verdict.evidence[1:]))
    if verdict.liveness in ("hung", "sleeping", "exited"):
        return verdict
    paced = _pace_words(verdict, pace)
    also = recurring_lines(shares, verdict.bottleneck) if shares is not None and verdict.liveness != "unknown" else []
    # A one-time cost (torch.compile's warm-up) ends by itself: no fix removes it, so no speed-up is promised.
    gain = max_speedup(shares, verdict.bottleneck) if verdict.liveness != "unknown" and not verdict.one_time_cost \
        else None
    advice = _lever_advice(verdict, pace)
    if not paced and not also and gain is None and advice == verdict.advice:
        return verdict
    # The headline stays first: the rule's own, or the node's fault or memory risk that went before it.
    head = 1 + sum(r is not None and r.imminent for r in (risk, gpu_risk)) + (any(f.node for f in faults))
    evidence = (*verdict.evidence[:head], *also, *paced, *verdict.evidence[head:head + 1],
                *((gain.words,) if gain is not None else ()), *verdict.evidence[head + 1:])
    return dataclasses.replace(verdict, evidence=evidence, advice=advice,
                               max_speedup=round(gain.factor, 2) if gain is not None and not gain.at_least else None,
                               min_speedup=round(gain.factor, 2) if gain is not None and gain.at_least else None)


def _with_risk(verdict: Verdict, risk: MemoryRisk | GpuMemoryRisk | None) -> Verdict:
    """A memory risk's line in the evidence: the headline where the limit is reached within HEADLINE_WITHIN_S, else
    after the rule's headline; with its advice where the limit is near, and where the workers copy their parent's
    pages (copy-on-read, a cause with its own fix) in any case."""
    if risk is None or verdict.liveness == "exited":
        return verdict
    line = risk.words()
    copying = isinstance(risk, MemoryRisk) and risk.copy_on_read_bytes_per_s is not None
    advice = COPY_ON_READ_ADVICE if copying else MEMORY_ADVICE if isinstance(risk, MemoryRisk) else GPU_MEMORY_ADVICE
    if risk.imminent:
        return dataclasses.replace(verdict, evidence=(line, *verdict.evidence), advice=(advice, *verdict.advice))
    later = (advice,) if copying else ()
    return dataclasses.replace(verdict, evidence=(*verdict.evidence[:1], line, *verdict.evidence[1:]),
                               advice=(*verdict.advice, *later))


def _with_faults(verdict: Verdict, faults: Sequence[GpuFault]) -> Verdict:
    """The node's first fault as the headline with the node's advice, the others under the rule's headline."""
    if not faults:
        return verdict
    node = [f.words for f in faults if f.node]
    others = [f.words for f in faults if not f.node]
    if node:
        return dataclasses.replace(verdict, evidence=(node[0], *verdict.evidence[:1], *node[1:], *others,
                                                      *verdict.evidence[1:]),
                                   advice=(NODE_ADVICE, *verdict.advice))
    return dataclasses.replace(verdict, evidence=(*verdict.evidence[:1], *others, *verdict.evidence[1:]))


MEMORY_ADVICE = ("Memory will run out: find what grows (workers that copy a dataset of Python objects grow with each "
                 "batch they touch: keep it in numpy arrays or tensors); give the job more (its container's or "
                 "Slurm job's --mem), or fewer DataLoader workers.")
COPY_ON_READ_ADVICE = ("Hold the dataset in numpy arrays, tensors or a memory map (np.memmap, Arrow, a tensor per "
                       "field) instead of lists or dicts of Python objects: a worker reading a Python object writes "
                       "its reference count, and so copies each page of the parent's dataset it touches; give each "
                       "worker its own copy only if it fits (fewer workers, or the job more memory).")
