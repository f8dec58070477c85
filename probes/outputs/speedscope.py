"""A recording's stack samples as a speedscope file (https://www.speedscope.app), to share what gputop saw.

A live run gets its flame graph from py-spy itself (`--flamegraph FILE`, probes/sampling/pyspy_binary.py); a
recording holds only the samples gputop kept, grouped per tick (each frame's `stacks.counts`), and py-spy
cannot read them back. speedscope's file format is data, not drawing: its "sampled" profile is a list of
stacks (indices into one shared frame table, root first) with a weight each, which is what the counts are.
One profile per thread ("PID 12 · main thread", or the thread's name where a dump gave it), busiest first;
idle samples are kept (a hung or data-starved main thread is mostly idle, and that is the picture to share)
and their weight is the sample count, unit "none", as py-spy's own speedscope output does.

The format, as speedscope documents it: src/lib/file-format-spec.ts in jlfwong/speedscope.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from probes.frame import Frame, StackCount, StackFrame
from probes.sampling.stacks import merge_counts

SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def speedscope_document(frames: Iterable[Frame], name: str, exporter: str) -> dict[str, Any]:
    """The speedscope file for every stack sample the frames hold."""
    frames = list(frames)
    thread_names: dict[tuple[int, int], str] = {}
    for frame in frames:
        for thread in frame.stacks.threads:  # a dump names its threads; py-spy's raw windows may not
            if thread.name:
                thread_names[(thread.pid, thread.tid)] = thread.name
    per_thread: dict[tuple[int, int], list[StackCount]] = {}
    for count in merge_counts(c for frame in frames for c in frame.stacks.counts):  # largest first
        per_thread.setdefault((count.pid, count.tid), []).append(count)
        if count.thread_name:
            thread_names.setdefault((count.pid, count.tid), count.thread_name)
    shared: list[dict[str, Any]] = []
    index_of: dict[StackFrame, int] = {}

    def index(stack_frame: StackFrame) -> int:
        found = index_of.get(stack_frame)
        if found is None:
            found = index_of[stack_frame] = len(shared)
            shared.append({"name": stack_frame.function, "file": stack_frame.file, "line": stack_frame.line})
        return found

    profiles = []
    for (pid, tid), counts in sorted(per_thread.items(), key=lambda item: -sum(c.count for c in item[1])):
        samples = [[index(f) for f in reversed(c.frames)] for c in counts]  # innermost first; speedscope: root first
        weights = [c.count for c in counts]
        thread_label = thread_names.get((pid, tid)) or ("main thread" if tid == pid else f"thread {tid}")
        profiles.append({"type": "sampled", "name": f"PID {pid} · {thread_label}", "unit": "none", "startValue": 0,
                         "endValue": sum(weights), "samples": samples, "weights": weights})
    return {"$schema": SPEEDSCOPE_SCHEMA, "shared": {"frames": shared}, "profiles": profiles, "name": name,
            "activeProfileIndex": 0, "exporter": exporter}
