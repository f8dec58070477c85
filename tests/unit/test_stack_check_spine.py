"""The stack check's spine (issue 31): a switch back to a phase the first windows already saw (a warm-up step,
sampled before any check ran) is still followed, because every dump of the new phase runs outside the function
each sample of the current phase ran inside. Driven on constructed stacks and dumps, without py-spy."""

from __future__ import annotations

from probes.frame import StackCount, StackFrame, ThreadStack
from probes.sampling.sampling_policy import (
    DEFAULT_DUMP_EVERY_S,
    DEFAULT_RATE_HZ,
    SETTLED_RATE_HZ,
    SPINE_CONFIRMATIONS,
    SPINE_MIN_SAMPLES,
    STACK_CHECK_CONFIRMATIONS,
    STACK_CHECK_EVERY_S,
    SamplingPolicy,
    main_thread_spine,
    main_thread_stack,
)

PID = 812
SCRIPT = "/app/phase_switch.py"
TORCH = "/venv/lib/python3.11/site-packages/torch/"


def fr(function: str, file: str = SCRIPT) -> StackFrame:
    return StackFrame(function, file, 1)


ROOT = (fr("main"), fr("<module>"))
TOKENIZE = (fr("tokenize_text"), fr("prepare_dataset")) + ROOT
PREPARE_LOOP = (fr("prepare_dataset"),) + ROOT  # between two documents
FORWARD = (fr("Linear.forward", TORCH + "nn/modules/linear.py"), fr("train_step")) + ROOT
BACKWARD = (fr("_engine_run_backward", TORCH + "autograd/graph.py"), fr("Tensor.backward", TORCH + "_tensor.py"),
            fr("train_step")) + ROOT
ADAM = (fr("_single_tensor_adam", TORCH + "optim/adam.py"), fr("train_step")) + ROOT
IMPORTING = (fr("_find_and_load", "<frozen importlib._bootstrap>"), fr("<module>"))
HALF_BUILT = (fr("Linear.forward", TORCH + "nn/modules/linear.py"),)  # a stack py-spy caught mid-change


def counts(*stacks: tuple[StackFrame, ...], n: int = 4) -> list[StackCount]:
    return [StackCount(PID, PID, "MainThread", False, stack, n) for stack in stacks]


def position(stack: tuple[StackFrame, ...]) -> tuple[str, str]:
    return stack[0].function, stack[0].file


def dump(stack: tuple[StackFrame, ...]) -> list[ThreadStack]:
    return [ThreadStack(PID, PID, "MainThread", frames=stack)]


def check(policy: SamplingPolicy, stack: tuple[StackFrame, ...]) -> str | None:
    return policy.stack_check(position(stack), main_thread_stack(dump(stack), PID))


def window(policy: SamplingPolicy, window_counts: list[StackCount]) -> None:
    positions = frozenset((f.function, f.file) for c in window_counts for f in c.frames)
    picture = max(((position(c.frames), c.count) for c in window_counts), key=lambda pc: pc[1])[0]
    policy.window_finished(picture, sum(c.count for c in window_counts), main_positions=positions,
                           main_spine=main_thread_spine(window_counts, PID))


def settled_on_data_after_a_warm_up() -> SamplingPolicy:
    """gputop attached as the job started: its first windows caught the imports and one warm-up training step (no
    check runs before two windows are in), then the data preparation settled the sampling."""
    policy = SamplingPolicy(DEFAULT_RATE_HZ, SETTLED_RATE_HZ, stack_check_every_s=STACK_CHECK_EVERY_S)
    window(policy, counts(IMPORTING))
    window(policy, counts(BACKWARD, FORWARD, ADAM, n=1) + counts(TOKENIZE, n=6))  # the warm-up, then the data
    for _ in range(3):
        window(policy, counts(TOKENIZE, n=18) + counts(PREPARE_LOOP, n=2))
    assert policy.settled and policy.checking_stacks
    return policy


def test_the_spine_is_what_every_whole_sample_ran_inside_outermost_first():
    assert main_thread_spine(counts(TOKENIZE, PREPARE_LOOP), PID) == (
        (("<module>", SCRIPT), ("main", SCRIPT), ("prepare_dataset", SCRIPT)), 8)
    assert main_thread_spine(counts(FORWARD, BACKWARD, ADAM), PID).positions[-1] == ("train_step", SCRIPT)
    # a half-built stack (not reaching the script's outermost frame) does not empty it, nor counts
    assert main_thread_spine(counts(TOKENIZE, PREPARE_LOOP) + counts(HALF_BUILT, n=1), PID) == (
        (("<module>", SCRIPT), ("main", SCRIPT), ("prepare_dataset", SCRIPT)), 8)
    other_thread = [StackCount(PID, PID + 1, "loader", False, FORWARD, 9)]
    assert main_thread_spine(other_thread, PID) == ((), 0)
    assert main_thread_stack(dump(FORWARD), PID)[0] == ("<module>", SCRIPT)


def test_a_switch_back_to_training_the_first_windows_saw_is_followed():
    """Issue 31: beside two busy processes the warm-up's backward had been sampled, so dumps of the training phase
    caught in it counted as seen, and with a seen one between every two unseen ones the check never fired: the
    verdict waited 10 to 19 s for the settled window's end."""
    policy = settled_on_data_after_a_warm_up()
    said = [check(policy, stack) for stack in (FORWARD, BACKWARD, ADAM, FORWARD)]
    # a dump at a function the windows saw (the warm-up's backward) needs one more in the streak: SPINE_CONFIRMATIONS
    assert said[:-1] == [None] * (SPINE_CONFIRMATIONS - 1)
    assert said[-1] == ("main thread's stack moved (tokenize_text (phase_switch.py) → Linear.forward (linear.py), "
                        f"outside prepare_dataset (phase_switch.py), {SPINE_CONFIRMATIONS} dumps in a row)")
    policy = settled_on_data_after_a_warm_up()  # dumps all caught in the warm-up's own functions: still followed
    assert [check(policy, BACKWARD) for _ in range(SPINE_CONFIRMATIONS)][-1] is not None
    # dumps at functions no window saw need no more than before
    policy = settled_on_data_after_a_warm_up()
    evaluating = (fr("evaluate"),) + ROOT
    assert [check(policy, evaluating) for _ in range(STACK_CHECK_CONFIRMATIONS)][-1] is not None


def test_dumps_inside_the_spine_or_half_built_do_not_wake():
    policy = settled_on_data_after_a_warm_up()
    for stack in (TOKENIZE, PREPARE_LOOP, HALF_BUILT, TOKENIZE, HALF_BUILT, PREPARE_LOOP) * 3:
        assert check(policy, stack) is None
    # a steady training loop: every dump inside train_step, whichever leaf it catches
    steady = SamplingPolicy(DEFAULT_RATE_HZ, SETTLED_RATE_HZ, stack_check_every_s=STACK_CHECK_EVERY_S)
    for _ in range(5):
        window(steady, counts(FORWARD, BACKWARD, ADAM))
    assert steady.checking_stacks
    for stack in (FORWARD, BACKWARD, ADAM, HALF_BUILT) * 3:
        assert check(steady, stack) is None
    # where the windows have no spine beyond the script's main (a loop that also waits for batches outside its
    # step), a dump outside the step is judged by the functions the windows saw, as before
    loop = SamplingPolicy(DEFAULT_RATE_HZ, SETTLED_RATE_HZ, stack_check_every_s=STACK_CHECK_EVERY_S)
    for _ in range(5):
        window(loop, counts(FORWARD, BACKWARD, PREPARE_LOOP))
    assert [check(loop, PREPARE_LOOP) for _ in range(STACK_CHECK_CONFIRMATIONS)][-1] is None


def test_the_latest_window_alone_is_the_spine_once_it_holds_enough_samples():
    """Switched back soon after settling: the window before the latest held the warm-up's end, and only the latest
    one's samples all ran inside prepare_dataset (seen beside two busy processes: no wake at all)."""
    policy = SamplingPolicy(DEFAULT_RATE_HZ, SETTLED_RATE_HZ, stack_check_every_s=STACK_CHECK_EVERY_S)
    window(policy, counts(FORWARD, BACKWARD, ADAM, n=2))
    window(policy, counts(BACKWARD, FORWARD, ADAM, n=1) + counts(TOKENIZE, n=6))
    window(policy, counts(TOKENIZE, n=SPINE_MIN_SAMPLES))
    assert policy.checking_stacks
    assert [check(policy, stack) for stack in (BACKWARD, FORWARD, BACKWARD, ADAM)][-1] is not None
    # on fewer samples only what the window before shares with it counts: here nothing beyond the script's main
    few = SamplingPolicy(DEFAULT_RATE_HZ, SETTLED_RATE_HZ, stack_check_every_s=STACK_CHECK_EVERY_S)
    window(few, counts(FORWARD, BACKWARD, ADAM, n=2))
    window(few, counts(BACKWARD, FORWARD, ADAM, n=1) + counts(TOKENIZE, n=6))
    window(few, counts(TOKENIZE, n=SPINE_MIN_SAMPLES - 1))
    assert [check(few, stack) for stack in (BACKWARD, FORWARD, BACKWARD, ADAM)][-1] is None


def test_after_a_wake_dumps_come_at_the_checks_cadence_so_the_first_check_follows_the_windows():
    """Beside two busy processes a neighbour's load woke the sampler 2 s before a stack-only switch: the next dump came
    5 s after the wake, when the windows since it already held the new phase (seen as the phase, no check fired),
    and the verdict waited 10 s for the new samples to outweigh the old ones."""
    policy = settled_on_data_after_a_warm_up()
    policy.wake()
    assert not policy.checking_stacks and policy.dump_wait_s() == STACK_CHECK_EVERY_S
    window(policy, counts(TOKENIZE, n=19))  # the look-again window: still the data phase
    window(policy, counts(TOKENIZE, n=4))
    assert policy.checking_stacks and policy.dump_wait_s() == STACK_CHECK_EVERY_S
    assert [check(policy, stack) for stack in (FORWARD, BACKWARD, ADAM)][-1] is not None  # none seen since the wake
    # not at the start, where no cadence within the checks' budget is known yet, nor for a process not checked
    assert SamplingPolicy(DEFAULT_RATE_HZ, SETTLED_RATE_HZ, stack_check_every_s=STACK_CHECK_EVERY_S).dump_wait_s() \
        == DEFAULT_DUMP_EVERY_S
    worker = settled_on_data_after_a_warm_up()
    worker.check_stacks = False
    worker.wake()
    assert worker.dump_wait_s() == DEFAULT_DUMP_EVERY_S


def test_a_half_second_excursion_from_the_step_does_not_wake():
    """A loop stepping out of train_step for 0.5 s every 5 s (a slow batch fetched outside it): a window of 8 samples
    all inside train_step puts it in the spine, and three dumps 0.2 s apart fit in the excursion (it woke once in
    150 s); the fourth a wake needs for a function the windows saw falls after it."""
    fetch = (fr("fetch_slow_batch"),) + ROOT
    policy = SamplingPolicy(DEFAULT_RATE_HZ, SETTLED_RATE_HZ, stack_check_every_s=STACK_CHECK_EVERY_S)
    window(policy, counts(FORWARD, BACKWARD, n=4) + counts(fetch, n=1))
    for _ in range(4):
        window(policy, counts(FORWARD, BACKWARD, ADAM, n=3))
    assert policy.checking_stacks
    for _ in range(5):
        said = [check(policy, stack) for stack in (fetch, fetch, fetch, FORWARD)]
        assert said == [None] * 4


def test_a_window_all_in_one_library_function_makes_no_spine_of_it():
    """A steady loop whose latest window of 9 samples all fell in torch's _engine_run_backward: its dumps in forward
    and the optimizer (functions the windows saw) are the same loop, not a new phase (seen once in 150 s)."""
    policy = SamplingPolicy(DEFAULT_RATE_HZ, SETTLED_RATE_HZ, stack_check_every_s=STACK_CHECK_EVERY_S)
    for _ in range(3):
        window(policy, counts(FORWARD, BACKWARD, ADAM, n=3))
    window(policy, counts(BACKWARD, n=9))
    assert main_thread_spine(counts(BACKWARD, n=9), PID).positions[-1] == ("train_step", SCRIPT)
    for _ in range(3):
        assert [check(policy, stack) for stack in (FORWARD, ADAM, FORWARD, ADAM)] == [None] * 4


def test_a_switch_inside_a_settled_window_is_followed_after_that_window_ends():
    """Beside two busy processes a switch from data to training came 8 s into a settled 10 s window: the window
    ended 2.5 s later holding both phases, its dominant still the data's (no go-back), its functions the training's
    too (no dump unseen) and its spine cut to the script's main (no dump outside it); the verdict waited 9.5 s for a
    cheap signal. That window's spine is the one before it, cut short: dumps are judged by that one."""
    policy = settled_on_data_after_a_warm_up()
    window(policy, counts(TOKENIZE, n=7) + counts(FORWARD, BACKWARD, ADAM, n=1))  # the data phase, then training
    assert policy.settled and policy.checking_stacks
    said = [check(policy, stack) for stack in (FORWARD, BACKWARD, ADAM, FORWARD)]
    assert said[:-1] == [None] * (SPINE_CONFIRMATIONS - 1) and said[-1] is not None, said
    assert "outside prepare_dataset (phase_switch.py)" in said[-1]
    # while the data phase goes on, dumps inside its spine stay quiet
    policy = settled_on_data_after_a_warm_up()
    window(policy, counts(TOKENIZE, n=7) + counts(FORWARD, BACKWARD, ADAM, n=1))
    assert [check(policy, stack) for stack in (TOKENIZE, PREPARE_LOOP) * 4] == [None] * 8
