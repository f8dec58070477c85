"""Every fact about a bottleneck lives in its BottleneckFacts (probes/diagnosis/rules/), and everything that needs
one reads it there: the time shares, `gputop compare`, the verdict pane's badge, the monitor's pace line and the
exporter. The exporter's vocabularies come from their sources (probes/frame.py's Literals, NVML's reason table).

Each test walks the registry: a bottleneck added without a fact, a fact no consumer follows, or a consumer that
keeps a table of bottlenecks of its own fails here.
"""

from __future__ import annotations

import dataclasses
import typing

import pytest

import probes.compare
import probes.compare_inputs
import probes.diagnosis.shares
import probes.monitoring.monitor
import probes.outputs.exporter
import probes.sensors.nvml
import tui.panes.verdict
from probes.diagnosis.bottlenecks import BOTTLENECK_FACTS, FACTS_BY_NAME, facts_named
from probes.diagnosis.phases import PHASE_WORDS, PHASES
from probes.diagnosis.rules.rule import BadgeTone, BottleneckFacts
from probes.diagnosis.shares import _PHASE_OF_ACTIVITY, SPEEDUP_MIN_SAMPLES, TimeShares, max_speedup
from probes.diagnosis.stacks import ACTIVITIES
from probes.frame import BOTTLENECKS, JobFinding, Verdict

CONSUMERS = (probes.diagnosis.shares, probes.compare, probes.compare_inputs, tui.panes.verdict,
             probes.outputs.exporter, probes.monitoring.monitor)


def test_every_bottleneck_has_its_facts_and_every_fact_is_decided():
    assert set(FACTS_BY_NAME) == set(BOTTLENECKS), "a Bottleneck without BottleneckFacts, or facts of no Bottleneck"
    # No field has a default: a new bottleneck decides each one, and a new fact is decided for every bottleneck.
    for field in dataclasses.fields(BottleneckFacts):
        assert field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING, field.name
    for name in BOTTLENECKS:
        assert facts_named(name) is FACTS_BY_NAME[name]
    assert facts_named("a_bottleneck_of_another_version") is None and facts_named(None) is None


def _table_keys(value: object) -> list[object]:
    if isinstance(value, dict):
        return list(value)
    if isinstance(value, (tuple, list, set, frozenset)):
        return list(value)
    return []


def test_no_consumer_keeps_a_table_of_bottlenecks_of_its_own():
    # A vocabulary of its own may share one word with the bottlenecks' ('idle' is a phase too); a table of
    # bottlenecks names several. The registry itself and the Literal's own tuple are what consumers should hold.
    allowed = {id(FACTS_BY_NAME), id(BOTTLENECK_FACTS), id(BOTTLENECKS)}
    for module in CONSUMERS:
        for name, value in vars(module).items():
            if id(value) in allowed:
                continue
            named = [key for key in _table_keys(value) if isinstance(key, str) and key in BOTTLENECKS]
            assert len(named) < 2, f"{module.__name__}.{name} names bottlenecks {named}: a BottleneckFacts field"


def test_what_a_fix_removes_is_named_in_both_vocabularies_and_they_agree():
    for facts in BOTTLENECK_FACTS:
        removes = facts.fix_removes
        if removes is None:
            continue
        assert removes.phases and set(removes.phases) <= set(PHASES), facts.name
        assert removes.activities and set(removes.activities) <= set(ACTIVITIES), facts.name
        # each activity is time the shares count in one of the phases the fix removes
        assert {_PHASE_OF_ACTIVITY[activity] for activity in removes.activities} <= set(removes.phases), facts.name
        assert removes.why.startswith("if ") and "{pct}" in removes.why, facts.name
        assert not facts.gpu_busy, f"{facts.name}: a busy GPU bounds the gain by its idle time, not by a phase"


def test_the_gpu_facts_are_consistent():
    for facts in BOTTLENECK_FACTS:
        assert facts.gpu_busy or not facts.kernels_bound, f"{facts.name}: kernels at full clocks keep the GPU busy"
    assert [f.name for f in BOTTLENECK_FACTS if f.kernels_bound] == ["gpu_bound"]


def test_the_time_shares_bound_each_verdict_as_its_facts_say():
    shares = TimeShares(window_s=120.0, shares={phase: 1 / len(PHASES) for phase in PHASES}, gpu_util_pct=80.0,
                        samples=SPEEDUP_MIN_SAMPLES)
    for facts in BOTTLENECK_FACTS:
        gain = max_speedup(shares, facts.name)
        if facts.gpu_busy:
            assert gain is not None and gain.words.startswith("nothing outside the GPU"), facts.name
        elif facts.fix_removes is not None:
            share = shares.share(*facts.fix_removes.phases)
            assert gain is not None and gain.factor == pytest.approx(1 / (1 - share)), facts.name
            assert gain.words.endswith(facts.fix_removes.why.format(pct=f"{share * 100:.0f}%")), facts.name
        else:
            assert gain is None, facts.name


def test_compare_reads_what_a_bottleneck_held_and_a_busy_gpu_from_the_facts():
    from probes.compare import _gpu_busy, _held_by
    from probes.compare_inputs import RunSummary

    for facts in BOTTLENECK_FACTS:
        held = _held_by(facts.name)
        removes = facts.fix_removes
        assert set(held) == (set() if removes is None else {*removes.phases, *removes.activities}), facts.name
        assert len(held) == len(set(held)), f"{facts.name}: a share named in both vocabularies counts once"
        assert _gpu_busy(RunSummary(label="A", source="a.json", kind="snapshot", bottleneck=facts.name)) \
            == facts.gpu_busy
    assert _held_by("a_bottleneck_of_another_version") == () and _held_by(None) == ()


def test_the_verdict_badge_has_a_style_for_every_tone_and_reads_it_from_the_facts():
    assert set(tui.panes.verdict.BADGE_STYLE) == set(typing.get_args(BadgeTone))
    for facts in BOTTLENECK_FACTS:
        badge = tui.panes.verdict.verdict_badge(Verdict(bottleneck=facts.name, liveness="progressing"))
        assert badge.style == tui.panes.verdict.BADGE_STYLE[facts.badge], facts.name
    # another version's bottleneck reads as a limit worth fixing
    other = tui.panes.verdict.verdict_badge(Verdict(bottleneck="a_bottleneck_of_another_version"))
    assert other.style == tui.panes.verdict.BADGE_STYLE["worth_fixing"]


def test_the_exporters_vocabularies_are_their_sources():
    exporter = probes.outputs.exporter
    assert exporter.JOB_FINDINGS == typing.get_args(JobFinding)
    assert exporter.CLOCK_EVENT_REASONS is probes.sensors.nvml.CLOCK_EVENT_REASONS
    assert len(set(exporter.CLOCK_EVENT_REASONS)) == len(exporter.CLOCK_EVENT_REASONS)


def test_every_phase_has_its_words():
    assert set(PHASE_WORDS) == set(PHASES)
