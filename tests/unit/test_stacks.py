"""Pure unit tests of probes.sampling.stacks on constructed StackCounts (no processes, no py-spy)."""

from __future__ import annotations

from support.compiled_code import COMPILED_BACKWARD, COMPILING, EAGER_ZERO_GRAD, GENERATED, HASH, TRITON_LAUNCH

from probes.frame import StackCount, StackFrame
from probes.sampling.stacks import (
    call_tree,
    drill_counts,
    frame_matches,
    hot_frames,
    merge_counts,
)

MAIN = StackFrame("<module>", "/app/train.py", 40)
TRAIN = StackFrame("train", "/app/train.py", 30)
STEP = StackFrame("Trainer.step", "/app/train.py", 12)
FORWARD = StackFrame("Model.forward", "/app/model.py", 7)
GET = StackFrame("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py", 122)
FIB = StackFrame("fib", "/app/fib.py", 3)


def count(frames_outer_first, n, *, pid=1, tid=1, idle=False, name="MainThread"):
    return StackCount(pid=pid, tid=tid, thread_name=name, idle=idle,
                      frames=tuple(reversed(frames_outer_first)), count=n)


def test_hot_frames_own_total_and_percentages():
    counts = [
        count([MAIN, TRAIN, STEP, FORWARD], 6),
        count([MAIN, TRAIN, GET], 3),
        count([MAIN, TRAIN], 1),
    ]
    rows = {(r.function, r.line): r for r in hot_frames(counts)}
    assert [r.function for r in hot_frames(counts)][:3] == ["Model.forward", "Queue.get", "train"]
    forward = rows[("Model.forward", 7)]
    assert (forward.own, forward.total, forward.own_pct, forward.total_pct) == (6, 6, 60.0, 60.0)
    train = rows[("train", 30)]
    assert (train.own, train.total, train.own_pct, train.total_pct) == (1, 10, 10.0, 100.0)
    main = rows[("<module>", 40)]
    assert (main.own, main.total) == (0, 10)
    assert len(hot_frames(counts, limit=2)) == 2


def test_recursion_counts_once_towards_total():
    deep = [MAIN, FIB, StackFrame("fib", "/app/fib.py", 3), StackFrame("fib", "/app/fib.py", 3)]
    rows = hot_frames([count(deep, 4), count([MAIN], 4)])
    fib = next(r for r in rows if r.function == "fib")
    assert (fib.own, fib.total, fib.total_pct, fib.own_pct) == (4, 4, 50.0, 50.0)


def test_by_line_false_merges_lines_of_one_function():
    counts = [
        count([MAIN, StackFrame("busy", "/app/x.py", 21)], 3),
        count([MAIN, StackFrame("busy", "/app/x.py", 22)], 5),
    ]
    assert len([r for r in hot_frames(counts) if r.function == "busy"]) == 2
    merged = hot_frames(counts, by_line=False)
    assert (merged[0].function, merged[0].line, merged[0].own, merged[0].own_pct) == ("busy", 0, 8, 100.0)


def test_filters_pid_tid_and_idle():
    counts = [
        count([MAIN, STEP], 2, pid=1, tid=1),
        count([MAIN, GET], 6, pid=1, tid=2, idle=True),
        count([MAIN, FORWARD], 4, pid=2, tid=9),
    ]
    active = hot_frames(counts, include_idle=False)
    assert {r.function for r in active if r.own} == {"Trainer.step", "Model.forward"}
    assert hot_frames(counts, include_idle=False)[0].own_pct == round(100 * 4 / 6, 2)
    only_pid2 = hot_frames(counts, pid=2)
    assert only_pid2[0].function == "Model.forward" and only_pid2[0].own_pct == 100.0
    only_tid2 = hot_frames(counts, pid=1, tid=2)
    assert only_tid2[0].function == "Queue.get" and only_tid2[0].own == 6
    assert hot_frames([], pid=1) == []


def test_empty_stacks_count_in_the_denominator():
    rows = hot_frames([count([MAIN, STEP], 1), count([], 3)])
    assert rows[0].function == "Trainer.step" and rows[0].own_pct == 25.0


def test_merge_counts_sums_identical_stacks_per_thread_and_idleness():
    counts = [
        count([MAIN, STEP], 2, tid=1, name=None),
        count([MAIN, STEP], 3, tid=1, name="MainThread"),
        count([MAIN, STEP], 4, tid=2),
        count([MAIN, STEP], 1, tid=1, idle=True),
    ]
    merged = merge_counts(counts)
    assert len(merged) == 3
    assert merged[0].tid == 1 and merged[0].count == 5 and merged[0].thread_name == "MainThread"
    assert [c.count for c in merged] == [5, 4, 1]
    assert merge_counts([]) == ()


def test_call_tree_root_first_with_totals_and_own():
    counts = [
        count([MAIN, TRAIN, STEP, FORWARD], 6),
        count([MAIN, TRAIN, GET], 3),
        count([MAIN, TRAIN], 1),
        count([], 2),
    ]
    root = call_tree(counts)
    assert (root.total, root.own) == (12, 2)
    (main,) = root.children
    assert main.key == ("<module>", "/app/train.py", 40) and main.total == 10
    (train,) = main.children
    assert (train.total, train.own) == (10, 1)
    assert [c.function for c in train.children] == ["Trainer.step", "Queue.get"]  # by total
    assert train.children[0].children[0].function == "Model.forward"
    assert train.children[0].children[0].own == 6
    assert call_tree(counts, include_idle=False, pid=99).total == 0


def _stack(*names: str) -> tuple[StackFrame, ...]:
    """Innermost first, as py-spy lists them."""
    return tuple(StackFrame(function=n, file=f"/src/{n}.py", line=1) for n in names)


def test_drill_counts_feed_callers_and_callees_trees():
    counts = [
        StackCount(pid=1, tid=1, thread_name="MainThread", idle=False, frames=_stack("leaf", "work", "main"), count=3),
        StackCount(pid=1, tid=1, thread_name="MainThread", idle=False, frames=_stack("work", "other", "main"),
                   count=1),
        StackCount(pid=1, tid=1, thread_name="MainThread", idle=False, frames=_stack("unrelated", "main"), count=5),
    ]
    callers, callees = drill_counts(counts, ("work", "/src/work.py", 1), by_line=True)
    assert sum(c.count for c in callers) == 4
    chosen = call_tree(callers).children[0]
    assert chosen.function == "work" and chosen.total == 4
    assert [(n.function, n.total) for n in chosen.children] == [("main", 3), ("other", 1)]
    below = call_tree(callees).children[0]
    assert [(n.function, n.total) for n in below.children] == [("leaf", 3)] and below.own == 1
    by_function_key = ("work", "/src/work.py", 0)
    assert sum(c.count for c in drill_counts(counts, by_function_key, by_line=False)[0]) == 4


def test_recursive_frame_is_cut_at_its_outermost_call():
    counts = [StackCount(pid=1, tid=1, thread_name=None, idle=False,
                         frames=_stack("walk", "walk", "main"), count=2)]
    callers, callees = drill_counts(counts, ("walk", "/src/walk.py", 1), by_line=True)
    assert [f.function for f in callers[0].frames] == ["main", "walk"]  # flipped: the chosen frame is the root
    assert [f.function for f in callees[0].frames] == ["walk", "walk"]


def test_frame_matches_qualnames_and_file_suffix():
    frame = StackFrame("_MultiProcessingDataLoaderIter._next_data",
                       "/site-packages/torch/utils/data/dataloader.py", 1505)
    assert frame_matches(frame, "_next_data")
    assert frame_matches(frame, "_MultiProcessingDataLoaderIter._next_data")
    assert frame_matches(frame, "_next_data", "torch/utils/data/dataloader.py")
    assert frame_matches(frame, "_next_data", "dataloader.py")
    assert not frame_matches(frame, "next_data")
    assert not frame_matches(frame, "_next_data", "loader.py")  # suffix must start at a path boundary
    assert not frame_matches(frame, "_next_data", "worker.py")
    listcomp = StackFrame("fetch.<locals>.<listcomp>", "/x/fetch.py", 54)
    assert frame_matches(listcomp, "<listcomp>") and frame_matches(listcomp, "fetch.<locals>.<listcomp>")
    old_style = StackFrame("_worker_loop", "/torch/utils/data/_utils/worker.py", 300)
    assert frame_matches(old_style, "_worker_loop", "/torch/utils/data/_utils/worker.py")


# --- torch.compile's compiled code running (probes/diagnosis/stacks.py), as py-spy showed it ------------------------
# (the stacks are in tests/support/compiled_code.py)


def test_inductors_generated_code_is_named_as_compiled_code_wherever_its_cache_is():
    from probes.diagnosis.stacks import describe, is_generated_code, is_library

    assert is_generated_code(GENERATED)
    # TORCHINDUCTOR_CACHE_DIR moves the cache; the files keep their layout (<2 chars>/c<those 2><hash>.py).
    moved = StackFrame("call", f"/scratch/alice/inductor-cache/zn/{HASH}.py", 9)
    assert is_generated_code(moved)
    assert not is_generated_code(StackFrame("GPT.forward", "/home/alice/nanogpt/model.py", 180))
    assert not is_generated_code(StackFrame("zn", "/home/alice/zn/czn.py", 1))
    # Not the user's own code: a verdict names the user's call into it, and the frame as compiled code.
    assert is_library(GENERATED)
    assert describe(GENERATED) == "Runner.call (torch.compile's generated code czn2vzoo….py:224)"


def test_running_compiled_code_is_not_compiling():
    from probes.diagnosis.stacks import COMPILE, COMPUTE, classify_stack, runs_compiled_code

    assert runs_compiled_code(COMPILED_BACKWARD) and runs_compiled_code(TRITON_LAUNCH)
    assert not runs_compiled_code(COMPILING) and not runs_compiled_code(EAGER_ZERO_GRAD)
    running = classify_stack(COMPILED_BACKWARD, idle=False)
    assert running.activity == COMPUTE
    assert running.responsible == GENERATED and running.user_frame.function == "train_step"
    assert classify_stack(COMPILING, idle=False).activity == COMPILE
