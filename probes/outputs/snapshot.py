"""Snapshot: one JSON document (schema gputop.snapshot/2) summing up a run, written atomically.

The snapshot is what scripts, CI and bug reports consume: the latest readings, hot frames aggregated over
the whole sampled window, and the verdict. Command lines and environments inside it were redacted when they
were read (probes.redact), so it can be attached to an issue as it is.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from probes import __version__
from probes.diagnosis.claims import advice_record
from probes.diagnosis.collectives import collective_gaps, gap_line
from probes.diagnosis.gil import gil_summary
from probes.diagnosis.gpu_summary import GPU_WAIT_UTIL_PCT
from probes.diagnosis.shares import TimeShares
from probes.diagnosis.stacks import describe
from probes.doctor import Check, check_dict
from probes.frame import Frame, JobVerdict, Verdict, to_jsonable
from probes.reference.baseline import ComparisonInputs, compare_progress, target_gpu_name
from probes.reference.pace_inputs import pace_inputs_document
from probes.sampling.stacks import hot_frames
from probes.view import Pace

SNAPSHOT_SCHEMA = "gputop.snapshot/2"
# The schemas a reader of snapshots (compare) takes: /1 wrote `verdict.advice` as plain strings, /2 as records
# (lever, gain, its kind and basis) with the strings in `verdict.advice_text`; nothing it reads changed otherwise.
READ_SNAPSHOT_SCHEMAS = ("gputop.snapshot/1", SNAPSHOT_SCHEMA)
HOT_FRAMES_LIMIT = 30
PER_PROCESS_HOT_FRAMES_LIMIT = 10


def build_snapshot(frames: Sequence[Frame], verdict: Verdict,
                   comparison: ComparisonInputs | None = None, pace: Pace | None = None,
                   job: JobVerdict | None = None, shares: TimeShares | None = None,
                   cannot_see: Sequence[Check] = (), partial: str | None = None) -> dict[str, Any]:
    """The snapshot document for these frames (oldest first) and the verdict reached on them; comparison
    (--baseline, --model, --tokens-per-iter) fills progress.baseline; the monitor's pace adds the recent
    seconds per iteration; a distributed job's verdict fills `job` (null for a lone process); cannot_see is
    what gputop could not read (MonitorView.cannot_see); `partial` says why the run stopped before the duration
    asked (a signal), making the document's "partial" true."""
    if not frames:
        raise ValueError("a snapshot needs at least one frame")
    latest = frames[-1]
    counts = [c for f in frames for c in f.stacks.counts]
    samples = sum(f.stacks.samples for f in frames)
    elapsed = sum(f.interval_s for f in frames)
    roles = {p.pid: p.role for p in latest.processes}
    by_process = []
    for pid in sorted({c.pid for c in counts}):
        proc_counts = [c for c in counts if c.pid == pid]
        by_process.append({
            "pid": pid,
            "role": roles.get(pid, "other"),
            "samples": sum(c.count for c in proc_counts),
            "hot_frames": [to_jsonable(h) for h in hot_frames(
                proc_counts, include_idle=False, limit=PER_PROCESS_HOT_FRAMES_LIMIT)],
        })
    stacks = latest.stacks
    errors = sorted({e for f in frames for e in f.stacks.errors})
    monitor = [f.overhead.monitor_cpu_pct for f in frames if f.overhead.monitor_cpu_pct is not None]
    sampler = [f.overhead.sampler_cpu_pct for f in frames if f.overhead.sampler_cpu_pct is not None]
    return {
        "schema": SNAPSHOT_SCHEMA,
        "gputop_version": __version__,
        "created": datetime.fromtimestamp(latest.time, tz=timezone.utc).isoformat(),
        "duration_s": round(elapsed, 3),
        "partial": partial is not None,
        "partial_reason": partial,
        "frames": len(frames),
        "target": to_jsonable(latest.target),
        "processes": to_jsonable(latest.processes),
        "cpu": to_jsonable(latest.cpu),
        "host": to_jsonable(latest.host),
        "gpus": to_jsonable(latest.gpu),
        "stacks": {
            # Sampled at some point, or still believed possible: a sampler says "available" before its
            # first attach attempt has answered, so an early frame alone proves nothing.
            "available": samples > 0 or stacks.available,
            "reason": next((f.stacks.reason for f in reversed(frames) if f.stacks.reason), None),
            "sampler": stacks.sampler,
            "native": stacks.native,
            "rate_hz": stacks.rate_hz,
            "samples": samples,
            "achieved_rate_hz": round(samples / elapsed, 2) if elapsed > 0 else None,
            "threads": to_jsonable(stacks.threads),
            # Like py-spy top: where the tree spends its working time. Waiting threads show in "threads"
            # and in the verdict's evidence.
            "hot_frames": [to_jsonable(h) for h in hot_frames(counts, include_idle=False, limit=HOT_FRAMES_LIMIT)],
            "by_process": by_process,
            # Who held each process's GIL over the run, where GIL windows ran (another thread than the main one
            # was seen working): py-spy's looks, and per thread how many found it holding the GIL.
            "gil": _gil_document(frames),
            "errors": errors,
        },
        "progress": _progress(latest, comparison, pace),
        # What the pace is measured with, as resolved (probes/reference/pace_inputs.py): the model, its FLOPs per
        # token, the
        # tokens per iteration, the peak asked for and the baseline, each with its source, for compare and replay.
        "pace_inputs": pace_inputs_document(comparison),
        # Why there is no progress to show, in one line (the job's stdout is a pipe, its log has no step lines).
        "no_pace": pace.hint if pace is not None and pace.source is None else _no_pace(latest),
        "overhead": {
            "monitor_cpu_pct_mean": round(sum(monitor) / len(monitor), 1) if monitor else None,
            "sampler_cpu_pct_mean": round(sum(sampler) / len(sampler), 1) if sampler else None,
        },
        # What gputop could not read (ptrace denied, NVML missing, ...), each with its fix: `gputop doctor`'s shape.
        "cannot_see": [check_dict(c) for c in cannot_see],
        "verdict": {
            "bottleneck": verdict.bottleneck,
            "liveness": verdict.liveness,
            "confidence": round(verdict.confidence, 2),
            "samples": verdict.samples,
            "from_counters": verdict.from_counters,
            "evidence": list(verdict.evidence),
            # Each advice line as a record: its text, the lever it pulls and the most it can win with the gain's kind
            # (measured, bound, estimate) and basis; the lines as plain text in advice_text, as /1 wrote `advice`.
            "advice": [advice_record(line) for line in verdict.advice],
            "advice_text": list(verdict.advice),
            "max_speedup": verdict.max_speedup,
            "min_speedup": verdict.min_speedup,
            "step": list(verdict.step),
        },
        "job": job_document(latest, job),
        "collectives": collectives_document(latest, frames),
        # What the machine itself recorded (issue 40): the tree's processes that ended and how, the kernel's records
        # of this job's faults (Xids, OOM kills, segfaults), the memory cgroup, NCCL's RAS port's latest answer.
        "machine": _machine_document(frames),
        # The main thread's share of wall time per phase over the last minutes, and the phases that recur.
        "time_shares": {phase: round(share, 3) for phase, share in shares.shares.items()} if shares else None,
        "time_shares_window_s": round(shares.window_s, 1) if shares else None,
        # The part of that time between py-spy's windows, which no share holds (null: no windows recorded).
        "time_shares_unsampled": round(shares.unsampled, 3) if shares and shares.unsampled is not None else None,
        # From this GPU util on, the main thread's idle samples were counted gpu_wait; its presence also says this
        # snapshot's `idle` holds no waits for a busy GPU (older ones' did: `gputop compare` reads them so).
        "time_shares_gpu_wait_util_pct": GPU_WAIT_UTIL_PCT,
        "recurring_phases": [{"phase": r.phase, "share": round(r.share, 3), "period_s": round(r.period_s, 1),
                              "episodes": r.episodes} for r in shares.recurring] if shares else [],
    }


def _gil_document(frames: Sequence[Frame]) -> list[dict[str, Any]]:
    documents = []
    for pid in sorted({g.pid for f in frames for g in f.stacks.gil}):
        summary = gil_summary(frames, pid)
        if summary is None or not summary.looks:
            continue
        documents.append({
            "pid": pid,
            "looks": summary.looks,
            "holders": [{"tid": h.tid, "name": h.name, "held": h.held, "share": round(h.held / summary.looks, 3),
                         "where": describe(h.stack[0]) if h.stack else None} for h in summary.holders],
        })
    return documents


RANK_EVIDENCE_LINES = 2


def job_document(latest: Frame, job: JobVerdict | None) -> dict[str, Any] | None:
    """The snapshot's `job` object: what the job is, the finding, and each rank's own verdict in brief."""
    if job is None:
        return None
    info = latest.job
    return {
        "kind": info.kind if info is not None else None,
        "run_id": info.run_id if info is not None else None,
        "slurm_step": info.slurm_step if info is not None else None,
        "world_size": info.world_size if info is not None else None,
        "launcher_pid": info.launcher_pid if info is not None else None,
        "missing_ranks": list(info.missing_ranks) if info is not None else [],
        "ranks_elsewhere": [list(span) for span in info.ranks_elsewhere] if info is not None else [],
        "finding": job.finding,
        "responsible_rank": job.responsible_rank,
        "ranks": [
            {
                "rank": r.rank,
                "node": r.node,
                "local_rank": r.local_rank,
                "pid": r.pid,
                "gpu_index": r.gpu_index,
                "cpu_pct": r.cpu_pct,
                "collective_wait_ratio": r.collective_wait_ratio,
                "samples": r.samples,
                "verdict": {
                    "bottleneck": r.verdict.bottleneck,
                    "liveness": r.verdict.liveness,
                    "confidence": round(r.verdict.confidence, 2),
                    "evidence": list(r.verdict.evidence[:RANK_EVIDENCE_LINES]),
                },
            }
            for r in job.ranks
        ],
    }


def collectives_document(latest: Frame, frames=()) -> dict[str, Any] | None:
    """The ranks' Flight Recorders (null when no rank shows one and no dump was asked): where each rank stands
    per process group, the collectives some ranks wait in that others never entered, and what gputop asked of
    which rank when the user asked for a dump (over the frames kept)."""
    asks = [ask for frame in frames if frame.collectives is not None for ask in frame.collectives.asks]
    if latest.collectives is None and not asks:
        return None
    reading = latest.collectives
    return {
        "ranks": to_jsonable(reading.ranks) if reading is not None else [],
        "gaps": [{**to_jsonable(gap), "line": gap_line(gap)} for gap in collective_gaps(reading)],
        "asks": to_jsonable(tuple(asks)),
    }


def _no_pace(latest: Frame) -> str | None:
    progress = latest.progress
    return progress.no_pace if progress is not None and progress.source is None else None


def _progress(latest: Frame, comparison: ComparisonInputs | None, pace: Pace | None) -> dict[str, Any] | None:
    """The latest progress reading, plus how it compares with the baseline (null without one)."""
    if latest.progress is None or latest.progress.source is None:  # no log read: no_pace says why
        return None
    if pace is not None and pace.source is not None:
        compared, recent = pace.comparison, list(pace.recent_seconds_per_iter)
    else:
        compared, recent = compare_progress(latest.progress, comparison, target_gpu_name(latest)), []
    return {**to_jsonable(latest.progress), "recent_seconds_per_iter": recent, "baseline": to_jsonable(compared)}


def write_json_atomic(document: dict[str, Any], path: str) -> None:
    """Write JSON to path through a temp file and a rename, so readers never see half a file.

    "-" writes to stdout. A path that exists and is not a regular file (/dev/null, a FIFO, /dev/stdout)
    is written in place: renaming over a device would replace the device itself.
    """
    text = json.dumps(document, indent=2) + "\n"
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    target = Path(path)
    if target.exists() and not target.is_file():
        with target.open("w", encoding="utf-8") as fh:
            fh.write(text)
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _machine_document(frames: Sequence[Frame]) -> dict[str, Any]:
    latest = frames[-1]
    ras = next((f.nccl_ras for f in reversed(frames) if f.nccl_ras is not None), None)
    return {
        "exits": [to_jsonable(e) for f in frames for e in f.exits],
        "kernel_events": [to_jsonable(e) for f in frames for e in f.kernel_events],
        "kernel_log_problem": latest.kernel_log_problem,
        "memory": to_jsonable(latest.memory),
        "nccl_ras": to_jsonable(ras) if ras is not None else None,
    }
