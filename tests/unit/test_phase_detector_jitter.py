"""PhaseChangeDetector's jitter (probes/sampling_policy._jitter) takes one sort instead of statistics.median and a
sort by distance: it must give exactly what the two-sort form gave, ties between the ends included (which end is
left out then decides the spread), on the detector's own history lengths and on integer readings where ties are
common."""

from __future__ import annotations

import random
import statistics
from collections import deque

from probes.sampling.sampling_policy import DETECTOR_HISTORY_TICKS, PhaseChangeDetector, PhaseSignals, _jitter


def _jitter_two_sorts(recent):
    median = statistics.median(recent)
    kept = sorted(recent, key=lambda x: abs(x - median))[:-1]
    return median, max(kept) - min(kept)


def test_one_sort_jitter_equals_the_two_sort_form_ties_included():
    rng = random.Random(19)
    cases = [[10.0, 20.0, 30.0], [30.0, 20.0, 10.0], [5.0, 5.0], [1.0, 2.0], [2.0, 1.0], [0.0] * 10,
             [0.0, 100.0, 0.0, 100.0, 50.0, 50.0], [100.0, 0.0, 50.0, 0.0, 100.0, 50.0]]
    for _ in range(20000):
        n = rng.randint(2, DETECTOR_HISTORY_TICKS)
        if rng.random() < 0.5:  # few distinct values: ties between the ends
            cases.append([float(rng.choice((0, 10, 20, 30, 40))) for _ in range(n)])
        else:
            cases.append([rng.uniform(0, 100) for _ in range(n)])
    for recent in cases:
        assert _jitter(deque(recent)) == _jitter_two_sorts(recent), recent


def test_the_detector_still_fires_on_a_move_and_holds_on_jitter():
    detector = PhaseChangeDetector()
    for tick in range(DETECTOR_HISTORY_TICKS):
        assert detector.observe(float(tick), {1: PhaseSignals(cpu_pct=50.0 + (tick % 3))}) is None
    reason = detector.observe(10.0, {1: PhaseSignals(cpu_pct=95.0)})
    assert reason is not None and reason.startswith("PID 1: CPU moved (51% → 95%)"), reason
