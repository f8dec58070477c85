"""probes.sampling.sampling_policy: the stack sampler's rates, windows and dump cadence, driven without py-spy."""

from __future__ import annotations

import math
import random

import pytest

from probes.sampling.sampling_policy import (
    CONFIRM_AFTER_S,
    DEFAULT_DUMP_EVERY_S,
    DEFAULT_RATE_HZ,
    FIRST_WINDOW_S,
    LOOK_AGAIN_RATE_FACTOR,
    LOOK_AGAIN_SAMPLES,
    MAX_WINDOW_S,
    NODE_STACK_CHECK_CPU_BUDGET,
    SEEN_WINDOWS,
    SETTLED_DUMP_EVERY_S,
    SETTLED_RATE_HZ,
    SETTLED_WINDOW_S,
    STACK_CHECK_CONFIRMATIONS,
    STACK_CHECK_CPU_BUDGET,
    STACK_CHECK_EVERY_S,
    PhaseChangeDetector,
    PhaseSignals,
    SamplingPolicy,
    stack_check_budget_cores,
    stack_check_interval_s,
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


def test_a_settled_picture_that_moved_with_its_peers_stays_settled():
    """The sampler says moved_with_peers for a rank whose new picture another rank shows (the job's step caught at
    another moment): it stays at the settled rate and length; a wake still looks closely."""
    policy = adaptive()
    settle(policy, STEP)
    policy.window_finished(TOKENIZE, moved_with_peers=True)
    assert plan(policy) == (SETTLED_RATE_HZ, SETTLED_WINDOW_S) and policy.settled
    policy.window_finished(STEP, moved_with_peers=True)
    assert policy.settled
    policy.window_finished(TOKENIZE)  # a move of its own: a close look
    assert plan(policy) == (DEFAULT_RATE_HZ, FIRST_WINDOW_S)
    policy.wake()
    assert policy.looking_again
    # before it has settled, its peers change nothing: it settles as at first
    fresh = adaptive()
    fresh.window_finished(STEP, moved_with_peers=True)
    assert plan(fresh) == (DEFAULT_RATE_HZ, 2.0)


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


# --- waking on a change of phase -------------------------------------------------------------------------


def test_wake_goes_back_to_the_fast_rate_at_once_and_looks_again_faster():
    policy = adaptive()
    settle(policy, TOKENIZE)
    running = policy.next_window()
    assert (running.rate_hz, running.seconds) == (SETTLED_RATE_HZ, SETTLED_WINDOW_S)
    policy.wake()
    assert not policy.settled and policy.looking_again
    assert policy.dump_wait_s() == DEFAULT_DUMP_EVERY_S
    first = policy.next_window()
    assert (first.rate_hz, first.seconds) == (DEFAULT_RATE_HZ * LOOK_AGAIN_RATE_FACTOR, FIRST_WINDOW_S)
    assert first.epoch == running.epoch + 1
    # The settled window, ended early, straddles the change: it neither settles nor counts as new samples.
    policy.window_finished(TOKENIZE, 9, running.epoch)
    assert policy.looking_again and policy.next_window() == first
    # Short boosted windows until LOOK_AGAIN_SAMPLES new samples are in, then the usual fast windows.
    policy.window_finished(STEP, LOOK_AGAIN_SAMPLES - 3, first.epoch)
    assert policy.next_window() == first
    policy.window_finished(STEP, 3, first.epoch)
    assert not policy.looking_again
    assert (policy.next_window().rate_hz, policy.next_window().seconds) == (DEFAULT_RATE_HZ, FIRST_WINDOW_S)


def test_after_a_wake_it_settles_again_on_the_new_picture():
    policy = adaptive()
    settle(policy, TOKENIZE)
    policy.wake()
    plans = []
    for _ in range(10):
        plan_now = policy.next_window()
        plans.append((plan_now.rate_hz, plan_now.seconds))
        policy.window_finished(STEP, round(plan_now.rate_hz * plan_now.seconds), plan_now.epoch)
        if policy.settled:
            break
    assert policy.settled and plan(policy) == (SETTLED_RATE_HZ, SETTLED_WINDOW_S)
    assert plans == [(20.0, 1.0), (5.0, 1.0), (5.0, 2.0), (5.0, 4.0)]


def test_wake_while_fast_starts_short_windows_again_and_a_fixed_rate_stays_fixed():
    policy = adaptive()
    for _ in range(3):
        policy.window_finished(STEP)  # 5 s windows, not settled (only one agreeing window so far)
    policy.wake()
    assert policy.next_window().seconds == FIRST_WINDOW_S
    fixed = SamplingPolicy(7.0)
    for _ in range(4):
        fixed.window_finished(STEP)
    fixed.wake()
    window = fixed.next_window()
    assert window.seconds == FIRST_WINDOW_S and window.rate_hz == 28.0  # looks again, then 7 Hz
    fixed.window_finished(STEP, 20, window.epoch)
    assert fixed.next_window().rate_hz == 7.0 and not fixed.settled


# --- checking the stacks while settled (issue 19: a change of phase only the stacks show) ---------------------

PREPARE = ("prepare_dataset", "/app/data.py")
FORWARD = ("Linear.forward", "/torch/nn/modules/linear.py")


def checked(picture=TOKENIZE, positions=frozenset({TOKENIZE, PREPARE})) -> SamplingPolicy:
    """A policy with stack checks on, settled on windows whose main thread sat at ``positions``."""
    policy = SamplingPolicy(DEFAULT_RATE_HZ, SETTLED_RATE_HZ, stack_check_every_s=STACK_CHECK_EVERY_S)
    for _ in range(10):
        policy.window_finished(picture, main_positions=positions)
        if policy.settled:
            return policy
    raise AssertionError("never settled")


def test_dumps_come_every_check_interval_once_two_windows_are_in_and_not_while_looking_again():
    policy = SamplingPolicy(DEFAULT_RATE_HZ, SETTLED_RATE_HZ, stack_check_every_s=STACK_CHECK_EVERY_S)
    assert not policy.checking_stacks and policy.dump_wait_s() == DEFAULT_DUMP_EVERY_S
    assert policy.stack_check(FORWARD) is None  # no window yet: nothing to compare with
    settle(policy)  # windows that say nothing of the main thread: nothing to compare with either
    assert not policy.checking_stacks and policy.dump_wait_s() == SETTLED_DUMP_EVERY_S
    policy = checked()
    assert policy.checking_stacks and policy.dump_wait_s() == STACK_CHECK_EVERY_S
    policy.wake()
    # not checked while looking again, but dumped at the checks' cadence, so the first check follows the windows
    # since the wake within a second (issue 31)
    assert not policy.checking_stacks and policy.dump_wait_s() == STACK_CHECK_EVERY_S
    looking = policy.next_window()
    policy.window_finished(FORWARD, LOOK_AGAIN_SAMPLES, looking.epoch, frozenset({FORWARD}))
    assert not policy.looking_again and not policy.checking_stacks  # one window since the wake
    policy.window_finished(FORWARD, 5, policy.next_window().epoch, frozenset({FORWARD}))
    assert not policy.settled and policy.checking_stacks  # fast, and checked: a change now is cut at once
    assert policy.dump_wait_s() == STACK_CHECK_EVERY_S
    assert unseen_in_a_row(policy, TOKENIZE) is not None


def test_a_dump_where_the_windows_saw_the_main_thread_holds():
    policy = checked()
    for position in [TOKENIZE, PREPARE, TOKENIZE, None] * 5:  # None: the main thread had no frames
        assert policy.stack_check(position) is None
        assert policy.dump_wait_s() == STACK_CHECK_EVERY_S


def test_unseen_dumps_in_a_row_say_the_stack_moved_and_each_is_confirmed_soon():
    policy = checked()
    for _ in range(STACK_CHECK_CONFIRMATIONS - 1):  # one unseen dump may be a rare leaf of the same loop
        assert policy.stack_check(FORWARD) is None
        assert policy.dump_wait_s() == CONFIRM_AFTER_S  # so the next dump comes soon, to confirm
    moved = policy.stack_check(("_engine_run_backward", "/torch/autograd/graph.py"))
    assert moved == "main thread's stack moved (tokenize_text (data.py) → _engine_run_backward (graph.py), " \
                    f"{STACK_CHECK_CONFIRMATIONS} dumps in a row)"
    assert policy.dump_wait_s() == STACK_CHECK_EVERY_S  # the sampler wakes it; until then the usual cadence


def test_an_unseen_dump_followed_by_a_seen_one_is_forgotten():
    policy = checked()
    for _ in range(5):
        for _ in range(STACK_CHECK_CONFIRMATIONS - 1):
            assert policy.stack_check(FORWARD) is None
        assert policy.stack_check(TOKENIZE) is None
        assert policy.dump_wait_s() == STACK_CHECK_EVERY_S


def unseen_in_a_row(policy: SamplingPolicy, position) -> str | None:
    return [policy.stack_check(position) for _ in range(STACK_CHECK_CONFIRMATIONS)][-1]


def test_functions_of_recent_windows_count_until_they_age_out_or_a_wake_forgets_them():
    policy = checked(positions=frozenset({TOKENIZE}))
    policy.window_finished(TOKENIZE, 10, main_positions=frozenset({TOKENIZE, PREPARE}))
    assert unseen_in_a_row(policy, PREPARE) is None
    # a window whose picture moved sends it back to the fast rate, still checked; its functions join the recent ones
    policy.window_finished(FORWARD, 10, main_positions=frozenset({FORWARD}))
    assert not policy.settled and policy.checking_stacks
    assert unseen_in_a_row(policy, FORWARD) is None and unseen_in_a_row(policy, PREPARE) is None
    for _ in range(SEEN_WINDOWS):  # settled again on FORWARD, and long enough for the older windows to age out
        policy.window_finished(FORWARD, 10, main_positions=frozenset({FORWARD}))
    assert policy.checking_stacks
    assert unseen_in_a_row(policy, FORWARD) is None
    assert unseen_in_a_row(policy, PREPARE) is not None
    policy = checked()
    policy.wake()  # a wake forgets them: the phase before says nothing of the next one
    for _ in range(4):
        policy.window_finished(FORWARD, 10, main_positions=frozenset({FORWARD}))
    assert policy.checking_stacks and unseen_in_a_row(policy, TOKENIZE) is not None


def test_no_checks_for_a_fixed_rate_for_workers_or_when_turned_off():
    fixed = SamplingPolicy(5.0, stack_check_every_s=STACK_CHECK_EVERY_S)  # --rate 5: never settles
    for _ in range(10):
        fixed.window_finished(TOKENIZE, main_positions=frozenset({TOKENIZE}))
    assert not fixed.checking_stacks
    worker = checked()
    worker.check_stacks = False  # the sampler found it is a DataLoader worker
    assert unseen_in_a_row(worker, FORWARD) is None
    assert worker.dump_wait_s() == SETTLED_DUMP_EVERY_S
    off = SamplingPolicy(DEFAULT_RATE_HZ, SETTLED_RATE_HZ)  # stack_check_every_s None
    for _ in range(5):
        off.window_finished(TOKENIZE, main_positions=frozenset({TOKENIZE}))
    assert off.settled and not off.checking_stacks


def test_stack_checks_stay_within_their_cpu_budget_however_many_processes():
    assert stack_check_interval_s(None, 1) == STACK_CHECK_EVERY_S  # no dump measured yet
    assert stack_check_interval_s(0.01, 1) == STACK_CHECK_EVERY_S  # a one-thread loop: every second
    assert stack_check_interval_s(0.04, 1) == 2.0  # beside 100 idle threads
    assert stack_check_interval_s(0.04, 8) == pytest.approx(8 * 0.04 / 0.01125)  # eight such ranks: ~28 s each
    assert stack_check_interval_s(0.01, 0, every_s=3.0) == 3.0
    assert stack_check_budget_cores(1) == STACK_CHECK_CPU_BUDGET  # one process has the whole budget
    assert stack_check_budget_cores(9) == pytest.approx(0.0111, abs=1e-4)  # a node's eight ranks and launcher
    budgets = [stack_check_budget_cores(n) for n in range(1, 80)]
    assert budgets == sorted(budgets, reverse=True) and budgets[-1] > NODE_STACK_CHECK_CPU_BUDGET
    for dump_cpu_s in (0.005, 0.02, 0.04, 0.3):
        for processes in (1, 4, 73):
            interval = stack_check_interval_s(dump_cpu_s, processes)
            cores = processes * dump_cpu_s / interval
            assert cores <= stack_check_budget_cores(processes) + 1e-9 or interval == STACK_CHECK_EVERY_S


def signals(cpu=100.0, main=98.0, wakeups=3.0, io=0.0) -> PhaseSignals:
    return PhaseSignals(cpu_pct=cpu, main_thread_cpu_pct=main, wakeups_per_s=wakeups, io_bytes_per_s=io)


def feed(detector: PhaseChangeDetector, ticks, start: float = 0.0) -> list[tuple[float, str]]:
    """Observe one tick a second; the (time, reason) of every wake."""
    fired = []
    for i, tick in enumerate(ticks):
        now = start + i
        reason = detector.observe(now, tick)
        if reason is not None:
            fired.append((now, reason))
    return fired


def test_steady_noisy_signals_seldom_wake_it():
    # A wake on a steady job costs little: ten samples at twice the fast rate, then ~17 s at the fast rate
    # before it settles again (~80 samples more than settled sampling would take). The two-tick rule that
    # catches a switch on a crowded machine also fires, on this much jitter (a worker's CPU at 85% +/- 10 each
    # tick), a few times an hour: 2 to 7 per 3000 ticks over seeds 0-7. Bound it at one per 5 minutes.
    rng = random.Random(8)
    detector = PhaseChangeDetector()
    ticks = []
    for _ in range(3000):  # close to an hour, one tick a second
        cpu = min(200.0, max(0.0, rng.gauss(120.0, 8.0)))  # a DataLoader-fed loop: busy, jittery
        worker = max(0.0, rng.gauss(85.0, 10.0))
        ticks.append({
            1: signals(cpu=cpu, main=min(100.0, cpu * rng.uniform(0.6, 0.8)),
                       wakeups=rng.lognormvariate(math.log(400.0), 0.35),  # 1.4x either way, one time in three
                       io=rng.lognormvariate(math.log(30e6), 0.3)),
            2: signals(cpu=worker, main=worker, wakeups=rng.uniform(20.0, 80.0), io=rng.uniform(0.0, 2e6)),
        })
    fired = feed(detector, ticks)
    assert len(fired) <= 3000 / 300, fired


def test_tick_quantised_cpu_and_idle_flicker_never_wake_it():
    # A sleepy process: CPU% moves in 10 ms kernel ticks, wake-ups and I/O flicker near zero.
    rng = random.Random(3)
    ticks = [{7: signals(cpu=rng.choice([0.0, 1.0, 2.0, 4.0]), main=rng.uniform(0, 3), wakeups=rng.uniform(0, 40),
                         io=rng.choice([0.0, 4096.0, 500e3]))} for _ in range(2000)]
    assert feed(PhaseChangeDetector(), ticks) == []


def test_main_thread_leaving_a_python_loop_for_torch_threads_on_a_crowded_machine_wakes_it():
    # Measured (2 saturated cores): the process stays at ~60% while the main thread's CPU halves and its time
    # queued for a core doubles; neither alone is beyond its jitter, both together are.
    detector = PhaseChangeDetector()
    before = [(59.0, 59.3, 40.7), (65.0, 65.1, 34.9), (64.9, 64.6, 35.6), (73.0, 72.9, 27.0), (64.0, 64.0, 35.8),
              (72.1, 71.9, 27.7), (63.6, 64.6, 35.6), (64.4, 63.5, 36.3), (64.0, 54.6, 44.7)]
    ticks = [{1: PhaseSignals(cpu_pct=c, main_thread_cpu_pct=m, main_thread_runqueue_pct=q)} for c, m, q in before]
    assert feed(detector, ticks) == []
    after = PhaseSignals(cpu_pct=54.0, main_thread_cpu_pct=27.6, main_thread_runqueue_pct=71.5)
    reason = detector.observe(9.0, {1: after})
    # both moved, and the main thread's share of the process more than either
    assert reason == "PID 1: main thread's share of the process's CPU moved (100% → 51%)"


def test_a_level_shift_just_inside_the_one_tick_rules_wakes_it_within_three_ticks():
    # Measured beside two busy processes and other load (2 cores): the main thread on a CPU ~51% +/- 8, then
    # 30%, 26%, 24% after the switch; its time queued for a core the mirror image. Each tick is just inside the
    # one-tick rules; two full ticks running beyond half the step plus half the jitter are not jitter (the
    # first tick after the switch is part-way).
    before = [(54.8, 44.6), (50.3, 48.4), (60.5, 41.5), (44.7, 55.3), (49.8, 50.2), (44.1, 55.9), (57.0, 43.2),
              (50.7, 49.1), (52.1, 48.1)]
    after = [(30.5, 66.8), (26.2, 68.6), (24.2, 71.5)]
    ticks = [{1: PhaseSignals(main_thread_cpu_pct=m, main_thread_runqueue_pct=q)} for m, q in before + after]
    fired = feed(PhaseChangeDetector(), ticks)
    assert fired == [(11.0, "PID 1: main thread CPU moved (50% → 26%, 24%: two ticks)")]


def test_main_thread_handing_work_to_torch_threads_on_a_crowded_machine_wakes_it_by_its_share():
    # Measured with the machine seven times oversubscribed: the process got ~15% of a core before and after the
    # switch, its main thread 14% then 8%: no CPU reading moved a quarter of a core, its share of the process did.
    before = [(14.0, 14.0), (15.0, 14.6), (16.0, 16.0), (14.0, 13.8), (14.0, 14.0), (16.0, 15.8)]
    ticks = [{1: PhaseSignals(cpu_pct=c, main_thread_cpu_pct=m)} for c, m in before]
    detector = PhaseChangeDetector()
    assert feed(detector, ticks) == []
    reason = detector.observe(6.0, {1: PhaseSignals(cpu_pct=16.0, main_thread_cpu_pct=10.0)})
    assert reason == "PID 1: main thread's share of the process's CPU moved (99% → 62%)"


def test_one_tick_excursion_does_not_wake_it():
    steady = [{1: PhaseSignals(cpu_pct=m, main_thread_cpu_pct=m)} for m in (51, 47, 55, 50, 45, 53, 49, 52, 50)]
    detector = PhaseChangeDetector()
    assert feed(detector, steady + [{1: PhaseSignals(cpu_pct=30.0, main_thread_cpu_pct=30.0)},
                                    {1: PhaseSignals(cpu_pct=51.0, main_thread_cpu_pct=51.0)}]) == []


def test_two_kinds_moving_together_wake_it_when_neither_alone_would():
    # The same measurement without the process's CPU (so no share): CPU and time queued, each within its jitter.
    before = [(59.3, 40.7), (65.1, 34.9), (64.6, 35.6), (72.9, 27.0), (64.0, 35.8), (71.9, 27.7), (64.6, 35.6),
              (63.5, 36.3), (54.6, 44.7)]
    detector = PhaseChangeDetector()
    ticks = [{1: PhaseSignals(main_thread_cpu_pct=m, main_thread_runqueue_pct=q)} for m, q in before]
    assert feed(detector, ticks) == []
    reason = detector.observe(9.0, {1: PhaseSignals(main_thread_cpu_pct=27.6, main_thread_runqueue_pct=71.5)})
    assert reason == "PID 1: main thread CPU moved (65% → 28%), main thread queued for a core moved (36% → 72%)"


def test_cpu_jump_wakes_it_within_one_tick_even_half_a_tick_in():
    steady = [{1: signals(cpu=100.0 + d, main=99.0 + d)} for d in (0.0, 1.5, -2.0, 0.5, -1.0, 2.0)]
    detector = PhaseChangeDetector()
    assert feed(detector, steady) == []
    # The switch happened half-way through the tick: it shows half the move, which is enough.
    reason = detector.observe(6.0, {1: signals(cpu=145.0, main=99.0)})
    assert reason == "PID 1: CPU moved (100% → 145%)"


def test_main_thread_cpu_moving_alone_wakes_it():
    # A background thread keeps the process's CPU up while the main thread stops working (or starts).
    detector = PhaseChangeDetector()
    assert feed(detector, [{1: signals(cpu=150.0, main=95.0)}] * 5) == []
    assert detector.observe(5.0, {1: signals(cpu=140.0, main=20.0)}) == "PID 1: main thread CPU moved (95% → 20%)"


def test_wakeups_and_io_wake_it_when_they_move_several_fold():
    detector = PhaseChangeDetector()
    assert feed(detector, [{1: signals(wakeups=20.0, io=0.0)}] * 5) == []
    assert "main thread wake-ups moved" in detector.observe(5.0, {1: signals(wakeups=900.0, io=0.0)})
    detector = PhaseChangeDetector()
    assert feed(detector, [{1: signals(io=200e3)}] * 5) == []
    assert detector.observe(5.0, {1: signals(io=2e6)}) is None  # below the floor: 1 MiB/s
    assert "I/O moved" in detector.observe(6.0, {1: signals(io=80e6)})


def test_processes_appearing_or_going_wake_it():
    detector = PhaseChangeDetector()
    assert feed(detector, [{1: signals()}] * 3) == []
    assert detector.observe(3.0, {1: signals(), 2: signals(), 3: signals()}) == "processes 2, 3 started"
    assert detector.observe(4.0, {1: signals(), 3: signals()}) == "process 2 ended"


def test_after_a_wake_the_new_phase_settling_in_does_not_wake_it_again():
    detector = PhaseChangeDetector()
    ticks = [{1: signals(cpu=100.0)}] * 5 + [{1: signals(cpu=c)} for c in (150.0, 190.0, 185.0, 195.0, 188.0, 191.0)]
    fired = feed(detector, ticks)
    assert [t for t, _ in fired] == [5.0]  # only the first tick of the move
    # and a later move back is seen again, once the new phase has a few ticks of history
    assert detector.observe(11.0, {1: signals(cpu=100.0)}) is not None


def test_first_ticks_and_missing_readings_do_not_wake_it():
    detector = PhaseChangeDetector()
    assert detector.observe(0.0, {1: signals(cpu=0.0)}) is None  # nothing to compare with
    assert detector.observe(1.0, {1: signals(cpu=190.0)}) is None  # one tick of history is too little
    assert detector.observe(2.0, {1: PhaseSignals()}) is None  # unreadable this tick
