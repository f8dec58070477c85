"""What the headless run's last line (`gputop: verdict: …`, tui/commands/shared.py tell_verdict) says for a snapshot's
verdict: its start (name and liveness), what it rests on, and its gain's words. For the tests that read that line
off stderr, live and replayed."""

from __future__ import annotations

from probes.diagnosis.support import support_words
from probes.frame import Verdict
from tui.panes.text import gain_words, liveness_words, verdict_name


def said_verdict(snapshot: dict) -> tuple[str, str | None, str | None]:
    """(start, support words or None, gain words or None) of the verdict line for the snapshot's verdict."""
    verdict = snapshot["verdict"]
    start = f"gputop: verdict: {verdict_name(verdict['bottleneck'], verdict['liveness'])}"
    if verdict["bottleneck"] != "unknown" or verdict["liveness"] not in ("hung", "exited"):
        start += f" · {liveness_words(verdict['liveness'])}"
    support = support_words(Verdict(bottleneck=verdict["bottleneck"], liveness=verdict["liveness"],
                                    samples=verdict["samples"], from_counters=verdict["from_counters"]))
    gain = gain_words(Verdict(bottleneck=verdict["bottleneck"], max_speedup=verdict["max_speedup"]))
    return start, support, gain


def check_verdict_line(line: str, snapshot: dict) -> None:
    """The line is the snapshot's verdict in the TUI's words: never a percent of confidence."""
    start, support, gain = said_verdict(snapshot)
    assert line.startswith(start), (line, snapshot["verdict"])
    assert support is None or f" · {support}" in line, (line, support)
    assert "sure" not in line, line
    assert line.endswith(gain) if gain is not None else "×" not in line, line
