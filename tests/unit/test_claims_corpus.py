"""Every verdict of the fixture corpus claims no more than its type (issue 38): each recording in tests/fixtures
(the demo's, the constructed and real CPU runs', the H200 runs' with and without their probe) folded frame by frame,
and every verdict shown on the way read as a person reads it: the headless line, the evidence and the advice, and
the pane at the end. A sentence may say "measured" only for a gain of the measured kind, and no verdict says a
percent of confidence (a score over 9 samples read as a probability)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from support.h200 import fixture, recording

from probes.diagnosis.claims import Advice
from probes.monitoring.monitor import Monitor
from probes.outputs.recording import read_recording
from probes.reference.baseline import load_comparison_inputs
from tui.panes.text import verdict_line
from tui.panes.verdict import verdict_renderable

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CORPUS = sorted([*FIXTURES.glob("recordings/*.jsonl"), *FIXTURES.glob("frames/*.jsonl")])
H200_RUNS = [("gpt2xl_s1", None), ("gpt2xl_s2", None), ("gpt2xl_s2", "gpt2xl_probe_compile.json"),
             ("gpt2xl_s2", "gpt2xl_probe.json"), ("seed004_a_rec", None)]
# "measured" said as a claim: not in "not measured here", "cannot be measured".
MEASURED_CLAIM = re.compile(r"(?<!not )(?<!be )\bmeasured\b")
CONFIDENCE_PERCENT = re.compile(r"\d+% sure|\bsure\b")


def said_lines(monitor: Monitor) -> list[tuple[str, str]]:
    """(kind, text) of what the current view says: the headless line, each evidence and advice line."""
    view = monitor.view
    verdict = view.verdict
    return [("line", verdict_line(verdict, view.job)), *(("evidence", line) for line in verdict.evidence),
            *(("advice", line) for line in verdict.advice)]


def check_claims(monitor: Monitor, where: str) -> int:
    checked = 0
    for kind, text in said_lines(monitor):
        assert not CONFIDENCE_PERCENT.search(text), (where, text)
        if MEASURED_CLAIM.search(text):
            measured_gain = kind == "advice" and isinstance(text, Advice) and text.gain is not None \
                and text.gain.kind == "measured"
            assert measured_gain, f"{where}: says measured for a gain that is not: {text!r}"
        if isinstance(text, Advice) and text.gain is not None:
            assert text.gain.kind in ("measured", "bound", "estimate")
            checked += 1
    return checked


def fold_checking(frames, where: str, comparison=None) -> tuple[Monitor, int]:
    monitor = Monitor(comparison=comparison, replay=True)
    gains = 0
    for frame in frames:
        monitor.ingest(frame)
        gains += check_claims(monitor, f"{where} frame {frame.seq}")
    console = Console(width=80, file=io.StringIO(), record=True)
    console.print(verdict_renderable(monitor.view, now=monitor.view.latest.time + 2.0))
    pane = console.export_text()
    assert not CONFIDENCE_PERCENT.search(pane), (where, pane)
    return monitor, gains


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_a_recordings_verdicts_claim_no_more_than_their_type(path):
    fold_checking(read_recording(path), path.name)


@pytest.mark.parametrize("name, baseline", H200_RUNS, ids=lambda v: str(v))
def test_the_h200_runs_verdicts_claim_no_more_than_their_type(name, baseline, tmp_path):
    comparison = load_comparison_inputs(str(fixture(baseline)), None, 131_072) if baseline else None
    _, gains = fold_checking(read_recording(recording(name, tmp_path)), name, comparison)
    if name == "seed004_a_rec":
        assert gains > 0  # the larger micro-batch's bound, checked on every frame that offered it


def test_the_corpus_is_the_fixtures_there_are():
    assert len(CORPUS) >= 20, CORPUS  # a glob that finds nothing would check nothing
