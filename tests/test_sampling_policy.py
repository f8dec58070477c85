"""probes.sampling_policy: the stack sampler's rates, windows and dump cadence, driven without py-spy."""

from __future__ import annotations

from probes.sampling_policy import (
    DEFAULT_DUMP_EVERY_S,
    DEFAULT_RATE_HZ,
    FIRST_WINDOW_S,
    MAX_WINDOW_S,
    SETTLED_DUMP_EVERY_S,
    SETTLED_RATE_HZ,
    SETTLED_WINDOW_S,
    SamplingPolicy,
)

STEP = ("step", "/app/train.py")
TOKENIZE = ("tokenize_text", "/app/data.py")


def adaptive() -> SamplingPolicy:
    return SamplingPolicy(DEFAULT_RATE_HZ, SETTLED_RATE_HZ)


def plan(policy: SamplingPolicy) -> tuple[float, float]:
    return policy.rate_hz, policy.window_s


def settle(policy: SamplingPolicy, picture=STEP) -> list[tuple[float, float]]:
    """Feed windows showing ``picture`` until the policy settles; the plans it made on the way."""
    plans = [plan(policy)]
    for _ in range(10):
        policy.window_finished(picture)
        plans.append(plan(policy))
        if policy.settled:
            return plans
    raise AssertionError(f"never settled: {plans}")


def test_starts_fast_in_short_windows_that_double_up_to_the_maximum():
    policy = adaptive()
    assert plan(policy) == (DEFAULT_RATE_HZ, FIRST_WINDOW_S)
    assert not policy.settled
    lengths = []
    for picture in [STEP, TOKENIZE, STEP, TOKENIZE, STEP]:  # a picture that keeps moving never settles
        policy.window_finished(picture)
        lengths.append(policy.window_s)
        assert policy.rate_hz == DEFAULT_RATE_HZ
    assert lengths == [2.0, 4.0, MAX_WINDOW_S, MAX_WINDOW_S, MAX_WINDOW_S]
    assert not policy.settled


def test_settles_once_a_full_window_agrees_with_the_one_before():
    plans = settle(adaptive())
    # 1 s, 2 s and 4 s windows, then the picture of the 4 s window matches the 2 s one: settle.
    assert plans == [(DEFAULT_RATE_HZ, 1.0), (DEFAULT_RATE_HZ, 2.0), (DEFAULT_RATE_HZ, 4.0),
                     (SETTLED_RATE_HZ, SETTLED_WINDOW_S)]


def test_stays_settled_while_the_picture_holds():
    policy = adaptive()
    settle(policy)
    for _ in range(5):
        policy.window_finished(STEP)
        assert plan(policy) == (SETTLED_RATE_HZ, SETTLED_WINDOW_S)
        assert policy.settled


def test_goes_back_to_the_fast_rate_and_short_windows_when_the_picture_moves():
    policy = adaptive()
    settle(policy, STEP)
    policy.window_finished(TOKENIZE)  # a settled window saw something else
    assert plan(policy) == (DEFAULT_RATE_HZ, FIRST_WINDOW_S)
    assert not policy.settled
    # and it settles again, on the new picture, the same way as at first
    assert settle(policy, TOKENIZE)[-1] == (SETTLED_RATE_HZ, SETTLED_WINDOW_S)


def test_a_window_with_no_busy_position_counts_as_a_picture():
    policy = adaptive()
    settle(policy, None)  # only idle waits: that holds still too
    assert policy.settled
    policy.window_finished(STEP)
    assert not policy.settled


def test_dumps_come_less_often_while_settled():
    policy = adaptive()
    assert policy.dump_wait_s() == DEFAULT_DUMP_EVERY_S
    settle(policy)
    assert policy.dump_wait_s() == SETTLED_DUMP_EVERY_S
    policy.window_finished(TOKENIZE)
    assert policy.dump_wait_s() == DEFAULT_DUMP_EVERY_S


def test_a_dump_cadence_slower_than_the_settled_one_is_kept():
    policy = SamplingPolicy(DEFAULT_RATE_HZ, SETTLED_RATE_HZ, dump_every_s=30.0)
    settle(policy)
    assert policy.dump_wait_s() == 30.0


def test_a_fixed_rate_never_settles():
    policy = SamplingPolicy(10.0)  # --rate 10: the user's rate holds
    for _ in range(10):
        policy.window_finished(STEP)
    assert plan(policy) == (10.0, MAX_WINDOW_S)
    assert not policy.settled
    assert policy.dump_wait_s() == DEFAULT_DUMP_EVERY_S


def test_window_lengths_follow_the_sampler_settings():
    policy = SamplingPolicy(10.0, 2.0, first_window_s=1.0, max_window_s=1.0)
    assert plan(policy) == (10.0, 1.0)
    policy.window_finished(STEP)  # already full length, but nothing to agree with yet
    assert plan(policy) == (10.0, 1.0)
    policy.window_finished(STEP)
    assert plan(policy) == (2.0, SETTLED_WINDOW_S)
