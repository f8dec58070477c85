"""What gputop said in the GPU check, against what was built in (benchmarks/gpu_check.py): one row per case from its
snapshot (a watched case) or its `gputop probe --json` result, and the Markdown a person reads.

Only what the files say is put in a row: the verdict's bottleneck, its evidence and advice, the pace (s/iter, MFU,
the share of the probe's reference rate as gputop worked it out), the GPU's readings. "as built" means that the
bottleneck gputop named is one of those the case was built to be. The levers are judged by gpu_check_levers.judge:
an offered lever the job already pulls, the lever a case is built for not offered (on the GPU), the top lever's
measured gain outside what its prediction states. A case passes when it ran, as built, with no lever problem.
"""

from __future__ import annotations

from typing import Any

import gpu_check_levers as levers
from gpu_check_cases import Case, pulled_levers

GiB = 2**30
EVIDENCE_SHOWN = 8  # evidence lines per case in the Markdown (summary.json keeps them all)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def gpu_readings(snapshot: dict) -> dict[str, Any]:
    """The first GPU's readings in the snapshot: util, clocks, power, memory, and every GPM metric it has."""
    devices = (snapshot.get("gpus") or {}).get("devices") or []
    if not devices:
        return {}
    device = devices[0]
    keys = ("name", "util_gpu_pct", "sm_clock_mhz", "max_sm_clock_mhz", "power_w", "power_limit_w", "mem_used_bytes",
            "mem_total_bytes", "clock_event_reasons")
    return {key: device.get(key) for key in keys} | {key: value for key, value in device.items()
                                                     if key.startswith("gpm_") and value is not None}


def watched_row(case: Case, outcome: dict, snapshot: dict | None, judge: bool = True) -> dict[str, Any]:
    """A watched case's row: its outcome, and what gputop's snapshot of it says; judged against what the case was
    built to be only where it ran as built (on the GPU: judge=False for the CPU dry run)."""
    row: dict[str, Any] = {"case": case.name, "kind": case.kind, "summary": case.summary, "built": case.built,
                           "expected": list(case.expected), **outcome}
    if snapshot is None:
        return row | {"verdict": case_verdict(row)}
    verdict = snapshot.get("verdict") or {}
    progress = snapshot.get("progress") or {}
    baseline = progress.get("baseline") or {}
    bottleneck = verdict.get("bottleneck")
    row |= {
        "bottleneck": bottleneck, "liveness": verdict.get("liveness"), "confidence": verdict.get("confidence"),
        "as_built": None if bottleneck is None or not judge else bottleneck in case.expected,
        "evidence": list(verdict.get("evidence") or []), "advice": list(verdict.get("advice") or []),
        "max_speedup": verdict.get("max_speedup"),
        "seconds_per_iter": _number(progress.get("seconds_per_iter")),
        "tokens_per_s": _number(baseline.get("observed_tokens_per_s")),
        "mfu_pct": _number(baseline.get("corrected_mfu_pct")),
        "reference_pct": _number(baseline.get("compute_bound_pct")),
        "reference_compiled": baseline.get("reference_compiled"),
        "model": baseline.get("model"), "pace_lines": list(baseline.get("lines") or []),
        "gpu": gpu_readings(snapshot), "time_shares": snapshot.get("time_shares"),
        "cannot_see": snapshot.get("cannot_see") or [], "frames": snapshot.get("frames"),
        # What NCCL's RAS port answered where the job is an NCCL one (the data-starved loop on a GPU): issue 40's
        # reading, checked nowhere else on real NCCL.
        "nccl_ras": (snapshot.get("machine") or {}).get("nccl_ras"),
    }
    measurement = outcome.get("measurement")
    row |= levers.judge(levers.offered_levers(snapshot), pulled_levers(case, cpu=not judge), measurement,
                        case.lever, on_gpu=judge)
    return row | {"verdict": case_verdict(row)}


def case_verdict(row: dict[str, Any]) -> str:
    """pass: it ran, was what it was built to be (where judged) and its levers hold; fail otherwise."""
    if row["status"] != "ok" or row.get("as_built") is False or row.get("lever_problems"):
        return "fail"
    return "pass"


def probe_row(case: Case, outcome: dict, probe: dict | None) -> dict[str, Any]:
    """A probe's row: its outcome, and its step time, rate, MFU, compile time and memory."""
    row: dict[str, Any] = {"case": case.name, "kind": case.kind, "summary": case.summary, "built": case.built,
                           "expected": [], **outcome}
    if probe is None:
        return row | {"verdict": case_verdict(row)}
    mfu = _number(probe.get("mfu"))
    peak = _number(probe.get("peak_memory_bytes"))
    row |= {
        "model": probe.get("model"), "device_name": probe.get("device_name"),
        "torch_version": probe.get("torch_version"),
        "dtype": probe.get("dtype"), "compiled": probe.get("compiled"), "batch_size": probe.get("batch_size"),
        "step_seconds": _number(probe.get("step_seconds")), "tokens_per_s": _number(probe.get("tokens_per_s")),
        "mfu_pct": None if mfu is None else mfu * 100, "compile_seconds": _number(probe.get("compile_seconds")),
        "peak_memory_gib": None if peak is None else peak / GiB,
        "clean": (probe.get("other_load") or {}).get("clean"), "load_note": (probe.get("other_load") or {}).get("note"),
    }
    return row | {"verdict": case_verdict(row)}


def _pct(value: float | None, label: str) -> str | None:
    return None if value is None else f"{label} {value:.0f}%"


def figures(row: dict[str, Any]) -> str:
    """The row's figures in one line, each only where it was measured."""
    if row["kind"] == "probe":
        parts = [f"{row['step_seconds']:.3f} s/step" if row.get("step_seconds") else None,
                 f"{row['tokens_per_s'] / 1e3:.1f}k tokens/s" if row.get("tokens_per_s") else None,
                 _pct(row.get("mfu_pct"), "MFU"),
                 f"compile {row['compile_seconds']:.0f} s" if row.get("compile_seconds") else None,
                 f"peak {row['peak_memory_gib']:.1f} GiB" if row.get("peak_memory_gib") else None]
        return " · ".join(part for part in parts if part) or "–"
    gpu = row.get("gpu") or {}
    reference = None
    if row.get("reference_pct") is not None:
        kind = "compiled" if row.get("reference_compiled") else "eager"
        reference = f"{row['reference_pct']:.0f}% of the {kind} probe's rate"
    readings = [_pct(_number(gpu.get("util_gpu_pct")), "util"),
                _pct(_number(gpu.get("gpm_sm_active_pct")), "SM active"),
                _pct(_number(gpu.get("gpm_tensor_active_pct")), "tensor active")]
    power = (f"{gpu['power_w']:.0f}/{gpu['power_limit_w']:.0f} W"
             if _number(gpu.get("power_w")) is not None and _number(gpu.get("power_limit_w")) else None)
    parts = [f"{row['seconds_per_iter']:.3g} s/iter" if row.get("seconds_per_iter") else None,
             _pct(row.get("mfu_pct"), "MFU"), reference,
             ", ".join(reading for reading in readings if reading) or None, power]
    return " · ".join(part for part in parts if part) or "–"


def said(row: dict[str, Any]) -> str:
    if row["status"] != "ok":
        return f"{row['status']}: {row.get('reason') or ''}".strip()
    if row["kind"] == "probe":
        return "measured" + ("" if row.get("clean") is not False else " (not a clean baseline)")
    return f"{row.get('bottleneck')} ({row.get('liveness')})"


def as_built(row: dict[str, Any]) -> str:
    if row["kind"] == "probe" or row.get("as_built") is None:
        return "–"
    return "yes" if row["as_built"] else "**no**"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def top_lever(row: dict[str, Any]) -> str:
    offered = row.get("levers") or []
    if row["kind"] == "probe" or "levers" not in row:
        return "–"
    if not offered:
        return "none offered"
    return f"{offered[0]['lever']} (1st of {len(offered)})"


def predicted(row: dict[str, Any]) -> str:
    offered = row.get("levers") or []
    if not offered:
        return "–"
    top = offered[0]
    return f"{top['most']} ({top['kind']})" if top.get("most") else "no gain claimed"


def measured(row: dict[str, Any]) -> str:
    """The measured gain of the lever the check pulled, and by whose run; or why none was."""
    measurement = row.get("measurement")
    if row["kind"] == "probe" or not measurement:
        return "–"
    if measurement.get("saved_pct") is None:
        return f"not measured: {measurement.get('note') or 'no time left'}" if measurement.get("note") else "–"
    pulled = measurement["lever"]
    top = row.get("top_lever")
    label = "" if pulled == top else f"{pulled} (not gputop's top lever): "
    return (f"{label}{measurement['saved_pct']:.0f}% of the time saved ({measurement['speedup_pct']:+.0f}% "
            f"speed), by {measurement['by']}")


def judged(row: dict[str, Any]) -> str:
    verdict = row.get("verdict", "–")
    problems = [*row.get("lever_problems", [])]
    if row.get("as_built") is False:
        problems.insert(0, f"{row.get('bottleneck')} is not {' or '.join(row['expected'])}")
    if row["status"] != "ok":
        problems.insert(0, row["status"])
    return "pass" if verdict == "pass" else "**fail**: " + "; ".join(problems)


def table_rows(gpu: str, rows: list[dict[str, Any]], date: str = "–") -> list[str]:
    """The rows of docs/benchmarks.md's results table ("The GPU check"), one per case."""
    return ["| " + " | ".join(_cell(cell) for cell in (
        gpu, date, row["case"], row["summary"], said(row), figures(row), as_built(row), top_lever(row),
        predicted(row), measured(row), judged(row))) + " |" for row in rows]


TABLE_HEAD = ("| GPU | date | case | built in | gputop said | figures | as built | top lever | predicted gain | "
              "measured gain | verdict |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")


def markdown(summary: dict[str, Any]) -> str:
    """summary.md: the machine, the table (the same rows as docs/benchmarks.md's), then each case's words."""
    machine = summary["machine"]
    gpu = summary["gpu_label"]
    lines = [f"# The GPU check on {gpu}, {summary['date']}", ""]
    lines.append(f"{summary['mode_note']} gputop {summary.get('gputop_commit') or '(commit not given)'}; "
                 f"nanoGPT {machine.get('nanogpt_commit') or '(not found)'}; torch {machine.get('torch') or '?'}; "
                 f"Python {machine.get('python')}; {machine.get('cpus')} CPUs; "
                 f"py-spy {machine.get('py_spy') or 'none'}.")
    if machine.get("gpu_name"):
        memory = machine.get("gpu_memory_bytes")
        lines.append(f"GPU: {machine['gpu_name']}, {memory / GiB:.0f} GiB, driver {machine.get('driver')}, power limit "
                     f"{machine.get('power_limit_w')} W; GPT-2 XL batch {summary['xl_batch']}." if memory else "")
    lines += [f"Took {summary['wall_s']:.0f} s of the {summary['limit_s']:.0f} s budget; "
              f"{summary['ok']} of {len(summary['cases'])} cases ran; as built: {summary['as_built']}; levers hold: "
              f"{summary.get('levers_hold', 'none judged')}; {summary.get('passed', 0)} passed.", "",
              *[f"- preflight: {line}" for line in machine.get("preflight", [])], "",
              TABLE_HEAD, *table_rows(gpu, summary["cases"], summary["date"]), ""]
    for row in summary["cases"]:
        lines += [f"## {row['case']}", "", row["built"], "", f"- outcome: {said(row)} ({row.get('wall_s', 0):.0f} s"
                  + (f"; steady after {row['steady_after_s']:.0f} s" if row.get("steady_after_s") is not None else "")
                  + (f"; watched {row['watched_s']:.0f} s" if row.get("watched_s") else "") + ")"]
        if row.get("steady") is False:
            lines.append("- watched before the job's steady state: it had not printed enough progress lines in time")
        lines += [f"- evidence: {line}" for line in row.get("evidence", [])[:EVIDENCE_SHOWN]]
        lines += [f"- advice: {line['text'] if isinstance(line, dict) else line}" for line in row.get("advice", [])[:3]]
        lines += [f"- lever offered: {lever['lever']}: {lever['most'] or 'no gain claimed'}"
                  + (f" ({lever['kind']}: {lever['basis']})" if lever.get("kind") else "")
                  for lever in row.get("levers", [])]
        if row.get("measurement"):
            lines.append(f"- lever measured: {measured(row)}"
                         + (f"; stated: {row['stated']['words']}" if row.get("stated") else ""))
        lines += [f"- problem: {problem}" for problem in row.get("lever_problems", [])]
        lines += [f"- pace: {line}" for line in row.get("pace_lines", [])[:2]]
        lines.append(f"- figures: {figures(row)}")
        lines.append("")
    return "\n".join(line for line in lines if line is not None) + "\n"
