"""The memory growth estimator on synthetic series (a steady rise, noise only, a step, too little data, a fall) and
copy-on-read from smaps_rollup reads; smaps_rollup parsed, and read for this process."""

from __future__ import annotations

import os
import random

import pytest

from probes.sensors.memory_growth import copy_on_read, fit_line, memory_growth
from probes.sensors.proc_readers import SmapsRollup, parse_smaps_rollup, read_smaps_rollup

MIB = 1 << 20
T0 = 1_700_000_000.0  # Unix times: the fit must not lose precision on them


def _series(rate: float, seconds: int = 120, noise: float = 0.0, base: float = 500 * MIB, seed: int = 1,
            step_at: float | None = None, step: float = 0.0) -> list[tuple[float, float]]:
    rng = random.Random(seed)
    return [
        (T0 + t, base + rate * t + rng.gauss(0, noise) + (step if step_at is not None and t >= step_at else 0))
        for t in range(seconds)
    ]


def test_fit_line_is_exact_on_a_line():
    fit = fit_line([(T0 + t, 3.0 + 2.0 * t) for t in range(10)])
    assert fit is not None
    assert fit.slope == pytest.approx(2.0) and fit.stderr == pytest.approx(0.0, abs=1e-6)
    assert fit.value_at_end == pytest.approx(21.0)
    assert fit_line([(T0, 1.0), (T0 + 1, 2.0)]) is None


def test_a_steady_rise_is_claimed_with_its_time_to_the_limit():
    # 8 MiB/s with a 20 MiB sawtooth-sized noise, 2 GiB limit.
    growth = memory_growth(_series(8 * MIB, noise=20 * MIB), limit_bytes=2048 * MIB)
    assert growth.growing and growth.reason is None
    assert growth.rate_bytes_per_s == pytest.approx(8 * MIB, rel=0.1)
    assert growth.points == 91 and growth.span_s == 90.0, "the last 90 s only"
    # At t=119 the line is at 500 + 8*119 = 1452 MiB: 596 MiB left at 8 MiB/s is 74.5 s.
    assert growth.seconds_to_limit == pytest.approx(74.5, rel=0.1)


def test_noise_only_is_no_rate():
    growth = memory_growth(_series(0.0, noise=20 * MIB), limit_bytes=2048 * MIB)
    assert not growth.growing and growth.rate_bytes_per_s is None and growth.seconds_to_limit is None
    assert "standard errors" in (growth.reason or "")
    assert growth.slope_bytes_per_s is not None, "the fitted slope is still given"


@pytest.mark.parametrize("step_at", [45.0, 75.0, 110.0])  # inside the window (the last 90 s: t 29 to 119)
def test_a_step_is_not_a_growth(step_at):
    # Flat at 500 MiB, then 300 MiB more at once (a model loaded, the allocator's segment): a large, significant
    # slope across it, but no steady growth to extrapolate.
    growth = memory_growth(_series(0.0, noise=2 * MIB, step_at=step_at, step=300 * MIB), limit_bytes=2048 * MIB)
    assert growth.rate_bytes_per_s is None and growth.seconds_to_limit is None
    assert "step" in (growth.reason or ""), growth


def test_too_few_points_or_too_short_a_span_claims_nothing():
    assert "points" in (memory_growth(_series(8 * MIB, seconds=20)).reason or "")
    sparse = [(T0 + 10 * t, 100 * MIB + 80 * MIB * t) for t in range(5)]  # 5 points over 40 s
    assert memory_growth(sparse).rate_bytes_per_s is None


def test_a_tiny_but_significant_drift_is_not_growth():
    growth = memory_growth(_series(1000.0, noise=10.0))  # 1 kB/s, almost noiseless
    assert growth.rate_bytes_per_s is None and "drift" in (growth.reason or "")


def test_a_steady_fall_is_a_negative_rate_with_no_time_to_limit():
    growth = memory_growth(_series(-4 * MIB, base=1500 * MIB, noise=MIB), limit_bytes=2048 * MIB)
    assert growth.rate_bytes_per_s == pytest.approx(-4 * MIB, rel=0.05)
    assert not growth.growing and growth.seconds_to_limit is None


def test_already_past_the_limit_is_zero_seconds_left():
    growth = memory_growth(_series(8 * MIB), limit_bytes=600 * MIB)
    assert growth.seconds_to_limit == 0.0


def _rollup(private: float, shared: float) -> SmapsRollup:
    return SmapsRollup(int(private + shared), int(private + shared / 4), int(shared), 0, 0, int(private), 0)


def test_copy_on_read_private_grows_as_shared_shrinks():
    # A worker touching its parent's 1 GiB list of objects: 5 MiB a second turn from shared to private.
    samples = [(T0 + t, _rollup(20 * MIB + 5 * MIB * t, 1024 * MIB - 5 * MIB * t)) for t in range(90)]
    found = copy_on_read(samples)
    assert found.turning_private and found.reason is None
    assert found.private.rate_bytes_per_s == pytest.approx(5 * MIB)
    assert found.shared.rate_bytes_per_s == pytest.approx(-5 * MIB)


def test_a_worker_that_allocates_is_not_copy_on_read():
    samples = [(T0 + t, _rollup(20 * MIB + 5 * MIB * t, 1024 * MIB)) for t in range(90)]
    found = copy_on_read(samples)
    assert not found.turning_private and "shared bytes not falling" in (found.reason or "")
    steady = [(T0 + t, _rollup(20 * MIB, 1024 * MIB)) for t in range(90)]
    assert not copy_on_read(steady).turning_private


SMAPS_ROLLUP = """55c863535000-7ffdc3870000 ---p 00000000 00:00 0                          [rollup]
Rss:                1636 kB
Pss:                 286 kB
Pss_Dirty:           112 kB
Shared_Clean:       1484 kB
Shared_Dirty:          0 kB
Private_Clean:        40 kB
Private_Dirty:       112 kB
Referenced:         1636 kB
Anonymous:           112 kB
Swap:                  0 kB
SwapPss:               0 kB
"""


def test_smaps_rollup_parsed_in_bytes():
    rollup = parse_smaps_rollup(SMAPS_ROLLUP)
    assert rollup == SmapsRollup(1636 * 1024, 286 * 1024, 1484 * 1024, 0, 40 * 1024, 112 * 1024, 0)
    assert rollup.private_bytes == 152 * 1024 and rollup.shared_bytes == 1484 * 1024
    assert parse_smaps_rollup("Rss: 1 kB\n") is None and parse_smaps_rollup(None) is None


def test_smaps_rollup_of_this_process():
    rollup = read_smaps_rollup(os.getpid())
    if rollup is None:
        pytest.skip("no /proc/PID/smaps_rollup here (Linux before 4.14)")
    assert rollup.rss_bytes > 0 and rollup.private_bytes + rollup.shared_bytes == pytest.approx(rollup.rss_bytes,
                                                                                                 abs=8192)
    assert read_smaps_rollup(999_999_999) is None
