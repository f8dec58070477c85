"""probes.sampling.pyspy_output: py-spy's raw and JSON formats, on text copied from py-spy 0.4.3 (no py-spy needed)."""

from __future__ import annotations

import json

from probes.frame import StackCount, StackFrame, ThreadStack
from probes.sampling.pyspy_output import (
    dominant_position,
    idle_at_known_waits,
    main_thread_position,
    main_thread_positions,
    other_thread_working,
    parse_dump,
    parse_raw,
    samples_in,
    split_by_activity,
)

TPY = "/usr/lib/python3.11/threading.py"
RAW = "\n".join([
    f"thread (4578): idle-2;Thread._bootstrap ({TPY}:1002);Condition.wait ({TPY}:327) 19",
    "thread (4535): MainThread;<module> (/app/loop.py:44);busy (/app/loop.py:22) 11",
    "thread (0x7F00AA): Thread-1 (_serve);Listener.accept (/usr/lib/python3.11/multiprocessing/connection.py:482) 2",
    "thread (4535): MainThread;0x7facd504524a (/usr/lib/x86_64-linux-gnu/libc.so.6);<module> (/app/loop.py:44);"
    "sock_connect (/tmp/build/Modules/socketmodule.c:3330);thread_run (/usr/lib/libpython3.11.so.1.0) 3",
    'process 77:"python train.py --x;y";thread (78): weird;name;main (/my dir (copy)/t.py:5) 1',
    "thread (79);<module> (<string>:1) 4",
]) + "\n"


def test_parse_raw_real_formats():
    counts = parse_raw(RAW, pid=4535, native=True)
    assert len(counts) == 6
    idle = counts[0]
    assert (idle.tid, idle.thread_name, idle.count, idle.idle) == (4578, "idle-2", 19, False)
    assert idle.frames[0].function == "Condition.wait" and idle.frames[0].line == 327  # innermost first
    assert idle.frames[-1].function == "Thread._bootstrap"
    assert [f.function for f in counts[1].frames] == ["busy", "<module>"]
    assert counts[2].tid == 0x7F00AA and counts[2].thread_name == "Thread-1 (_serve)"
    native = counts[3].frames
    assert [(f.function, f.line, f.native) for f in native] == [
        ("thread_run", 0, True),
        ("sock_connect", 3330, True),
        ("<module>", 44, False),
        ("0x7facd504524a", 0, True),
    ]
    assert native[0].file == "/usr/lib/libpython3.11.so.1.0"
    odd = counts[4]
    assert (odd.tid, odd.thread_name) == (78, "weird;name")
    assert (odd.frames[0].function, odd.frames[0].file, odd.frames[0].line) == ("main", "/my dir (copy)/t.py", 5)
    nameless = counts[5]
    assert (nameless.tid, nameless.thread_name, nameless.frames[0].file) == (79, None, "<string>")
    assert not nameless.frames[0].native
    assert not any(f.native for c in parse_raw(RAW, pid=1) for f in c.frames)  # only with --native
    assert samples_in(counts) == 19  # the thread seen most often (idle-2) was in every sample


def test_parse_dump_json():
    text = """[{"pid": 5, "thread_id": 140, "thread_name": "MainThread", "os_thread_id": 5, "active": false,
      "owns_gil": false, "frames": [{"name": "Condition.wait", "filename": "/t.py", "line": 327,
      "module": null, "short_filename": "t.py", "locals": null, "is_entry": false}], "process_info": null},
      {"pid": 5, "thread_id": 141, "thread_name": null, "os_thread_id": null, "active": true,
      "owns_gil": true, "frames": [], "process_info": null}]"""
    first, second = parse_dump(text, pid=5)
    assert (first.tid, first.name, first.idle, first.owns_gil) == (5, "MainThread", True, False)
    assert first.frames[0].function == "Condition.wait" and first.frames[0].line == 327
    assert (second.tid, second.idle, second.owns_gil) == (141, False, True)


def test_dominant_position_skips_idle_waits():
    busy = StackCount(1, 1, "MainThread", False, (StackFrame("step", "/app/train.py", 9),), 3)
    waiting = StackCount(1, 2, "feeder", False, (StackFrame("Condition.wait", f"{TPY}", 327),), 50)
    assert dominant_position([busy, waiting]) == ("step", "/app/train.py")
    assert dominant_position([waiting]) is None


def test_main_thread_positions_of_a_window_and_of_a_dump():
    counts = parse_raw(RAW, pid=4535)
    # Every frame of MainThread's stacks, and of a nameless thread's whose outermost frame is <module>; named
    # threads other than MainThread left out (as probes.diagnosis.stacks.is_main_thread decides)
    assert main_thread_positions(counts, 4535) == {
        ("busy", "/app/loop.py"), ("<module>", "/app/loop.py"), ("<module>", "<string>"),
        ("sock_connect", "/tmp/build/Modules/socketmodule.c"), ("thread_run", "/usr/lib/libpython3.11.so.1.0"),
        ("0x7facd504524a", "/usr/lib/x86_64-linux-gnu/libc.so.6")}
    assert main_thread_positions(counts, 1) == frozenset()
    dump = """[{"thread_id": 140, "thread_name": "Thread-2", "os_thread_id": 6, "active": true, "owns_gil": true,
      "frames": [{"name": "spin", "filename": "/app/t.py", "line": 3}]},
      {"thread_id": 139, "thread_name": null, "os_thread_id": 5, "active": true, "owns_gil": false,
      "frames": [{"name": "tokenize_text", "filename": "/app/data.py", "line": 12}]}]"""
    assert main_thread_position(parse_dump(dump, pid=5), 5) == ("tokenize_text", "/app/data.py")  # tid == PID
    assert main_thread_position(parse_dump(dump, pid=7), 7) is None


def test_a_thread_other_than_the_main_one_working_opens_the_gil_windows():
    pid = 100
    spin = (StackFrame("aggregate_metrics", "/app/telemetry.py", 41),)
    waiting = (StackFrame("wait", "/usr/lib/python3.11/threading.py", 320),)
    main = ThreadStack(pid=pid, tid=pid, name="MainThread", idle=False, frames=spin)
    assert not other_thread_working(pid, [main])  # one thread alone cannot contend for the GIL
    assert not other_thread_working(pid, [main, ThreadStack(pid=pid, tid=101, idle=True, frames=spin)])
    # py-spy may call a thread in a known wait active (caught waking up): still a waiting thread
    assert not other_thread_working(pid, [main, ThreadStack(pid=pid, tid=102, idle=False, frames=waiting)])
    assert other_thread_working(pid, [main, ThreadStack(pid=pid, tid=103, idle=False, frames=spin)])


def test_windows_that_print_the_same_stack_share_its_parsed_frames():
    # The History holds 600 frames of windows; a loop prints the same stacks in each: one parse, shared.
    raw = ("thread (101): MainThread;<module> (train.py:9);step (train.py:4) 7\n"
           "thread (101): MainThread;<module> (train.py:9);load (data.py:2) 3\n")
    first, second = parse_raw(raw, pid=101), parse_raw(raw, pid=101)
    assert [c.frames for c in first] == [c.frames for c in second]
    assert all(a.frames is b.frames for a, b in zip(first, second, strict=True))
    assert first[0].frames[0] == StackFrame("step", "train.py", 4)  # innermost first, as before
    # Sampled natively, the same Python frames are the same frames; a C++ frame of that text is native.
    native = parse_raw(raw.replace("step (train.py:4)", "step (train.py:4);at::mm (libtorch.so)"), pid=101,
                       native=True)
    assert native[0].frames[0] == StackFrame("at::mm", "libtorch.so", native=True)
    assert native[0].frames[1:] == first[0].frames
    assert parse_raw("thread (1): MainThread;at::mm (libtorch.so) 1\n", pid=1)[0].frames[0].native is False


def test_stacks_that_differ_share_the_frames_they_have_in_common():
    # A loop prints new combinations of known frames (its line times the op's): a new stack costs one tuple.
    one = parse_raw("thread (1): MainThread;<module> (t.py:9);step (t.py:4);mm (ops.py:10) 1\n", pid=1)[0].frames
    other = parse_raw("thread (1): MainThread;<module> (t.py:9);step (t.py:5);mm (ops.py:10) 1\n", pid=1)[0].frames
    assert one != other
    assert one[0] is other[0] and one[2] is other[2]
    dumped = parse_dump(json.dumps([{"os_thread_id": 1, "thread_name": "MainThread", "active": True, "frames": [
        {"name": "mm", "filename": "ops.py", "line": 10}, {"name": "step", "filename": "t.py", "line": 4},
        {"name": "<module>", "filename": "t.py", "line": 9}]}]), pid=1)[0].frames
    assert dumped == one  # a dump and a window that saw the same stack hold one tuple
    assert dumped is one


def test_dumps_that_show_the_same_stack_share_its_frames():
    # Each dump is fresh JSON; the History holds hundreds of them: the frames of a stack seen before are shared.
    dump = json.dumps([{"os_thread_id": 7, "thread_name": "MainThread", "active": True, "frames": [
        {"name": "step", "filename": "train.py", "line": 4}, {"name": "<module>", "filename": "train.py", "line": 9}]}])
    first, second = parse_dump(dump, pid=7), parse_dump(dump, pid=7)
    assert first[0].frames is second[0].frames
    assert first[0].frames == (StackFrame("step", "train.py", 4), StackFrame("<module>", "train.py", 9))
    moved = json.loads(dump)
    moved[0]["frames"][0]["line"] = 5
    assert parse_dump(json.dumps(moved), pid=7)[0].frames[0] == StackFrame("step", "train.py", 5)


def test_the_shared_stacks_are_bounded_and_keep_the_stacks_still_seen():
    """_STACK_CACHE_SIZE stacks at most, however many new ones a loop prints, and full once filled (it gives up
    one for each new one, never all at once); a stack seen again and again stays shared, one not seen since
    _STACK_CACHE_SIZE new ones goes."""
    import probes.sampling.pyspy_output as output

    steady = "thread (1): MainThread;<module> (t.py:1);step (t.py:3) 1\n"
    kept = parse_raw(steady, pid=1)[0].frames
    first_new = parse_raw("thread (1): MainThread;<module> (t.py:1);once (t.py:2) 1\n", pid=1)[0].frames
    for i in range(5 * output._STACK_CACHE_SIZE):
        parse_raw(f"thread (1): MainThread;<module> (t.py:1);f{i} (t.py:2) 1\n", pid=1)
        if i % 100 == 0:
            assert parse_raw(steady, pid=1)[0].frames is kept  # still shared
        assert output.stack_cache_size() <= output._STACK_CACHE_SIZE
        if i >= output._STACK_CACHE_SIZE:
            assert output.stack_cache_size() == output._STACK_CACHE_SIZE  # full from then on: no fall and rise
        assert output.frame_cache_size() <= output._FRAME_CACHE_SIZE
    again = parse_raw("thread (1): MainThread;<module> (t.py:1);once (t.py:2) 1\n", pid=1)[0].frames
    assert again == first_new and again is not first_new  # dropped, parsed afresh


# One window of a pair (py-spy 0.4.3's raw text, a line that works and waits): with --idle every sample, without it
# only those py-spy found the thread active in.
PAIR_EVERY = "\n".join([
    "thread (4535): MainThread;<module> (/app/loop.py:44);work_or_wait (/app/loop.py:20);busy (/app/loop.py:9) 101",
    "thread (4535): MainThread;<module> (/app/loop.py:44);work_or_wait (/app/loop.py:21) 398",
    f"thread (4578): idle-2;Thread._bootstrap ({TPY}:1002);Condition.wait ({TPY}:327) 499",
]) + "\n"
PAIR_ACTIVE = "\n".join([
    "thread (4535): MainThread;<module> (/app/loop.py:44);work_or_wait (/app/loop.py:20);busy (/app/loop.py:9) 97",
    "thread (4535): MainThread;<module> (/app/loop.py:44);work_or_wait (/app/loop.py:21) 3",
    "thread (4535): MainThread;<module> (/app/loop.py:44);work_or_wait (/app/loop.py:22) 2",
]) + "\n"


def test_a_pairs_counts_split_each_stack_into_its_working_and_waiting_samples():
    """Working: a stack's count without --idle. Waiting: the thread's count with --idle less its count without
    (499 - 102), spread over the stacks --idle caught more often, by that excess (4 at busy, 395 at line 21: the two
    halves sample at their own moments, and one stack only the active half caught)."""
    counts = split_by_activity(parse_raw(PAIR_EVERY, pid=4535), parse_raw(PAIR_ACTIVE, pid=4535))
    by_place = {(c.tid, c.frames[0].function, c.frames[0].line, c.idle): c.count for c in counts}
    assert by_place == {
        (4535, "busy", 9, False): 97, (4535, "busy", 9, True): 4,
        (4535, "work_or_wait", 21, False): 3, (4535, "work_or_wait", 21, True): 393,
        (4578, "Condition.wait", 327, True): 499,
        (4535, "work_or_wait", 22, False): 2,
    }
    main = [c for c in counts if c.tid == 4535]
    assert sum(c.count for c in main) == 499 and sum(c.count for c in main if c.idle) == 499 - 102


def test_a_thread_active_in_every_sample_has_no_waiting_however_its_samples_fell_among_its_lines():
    every = "\n".join(["thread (7): MainThread;<module> (/app/spin.py:9);spin (/app/spin.py:3) 60",
                        "thread (7): MainThread;<module> (/app/spin.py:9);spin (/app/spin.py:4) 39"]) + "\n"
    active = "\n".join(["thread (7): MainThread;<module> (/app/spin.py:9);spin (/app/spin.py:3) 52",
                         "thread (7): MainThread;<module> (/app/spin.py:9);spin (/app/spin.py:4) 47"]) + "\n"
    counts = split_by_activity(parse_raw(every, pid=7), parse_raw(active, pid=7))
    assert not any(c.idle for c in counts) and sum(c.count for c in counts) == 99


def test_a_pair_with_nothing_active_is_all_waiting_and_one_without_its_active_half_waits_only_at_known_waits():
    assert all(c.idle for c in split_by_activity(parse_raw(PAIR_EVERY, pid=4535), []))
    fallback = idle_at_known_waits(parse_raw(PAIR_EVERY, pid=4535))
    assert [(c.frames[0].function, c.idle) for c in fallback] == [
        ("busy", False), ("work_or_wait", False), ("Condition.wait", True)]
