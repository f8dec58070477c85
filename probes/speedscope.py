"""A recording's stack samples as a speedscope file (https://www.speedscope.app), to share what gputop saw.

A live run gets its flame graph from py-spy itself (`--flamegraph FILE`, probes/pyspy.ProfileRecording); a
recording holds only the samples gputop kept, grouped per tick (each frame's `stacks.counts`), and py-spy
cannot read them back. speedscope's file format is data, not drawing: its "sampled" profile is a list of
stacks (indices into one shared frame table, root first) with a weight each, which is what the counts are.
One profile per thread ("PID 12 · main thread", or the thread's name where a dump gave it), busiest first;
idle samples are kept (a hung or data-starved main thread is mostly idle, and that is the picture to share)
and their weight is the sample count, unit "none", as py-spy's own speedscope output does.

The format, as speedscope documents it: src/lib/file-format-spec.ts in jlfwong/speedscope.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from probes.frame import Frame, StackFrame

SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def speedscope_document(frames: Iterable[Frame], name: str, exporter: str) -> dict[str, Any]:
    """The speedscope file for every stack sample the frames hold."""
    per_thread: dict[tuple[int, int], Counter[tuple[StackFrame, ...]]] = {}
    thread_names: dict[tuple[int, int], str | None] = {}
    for frame in frames:
        for thread in frame.stacks.threads:  # a dump names its threads; py-spy's raw windows may not
            if thread.name:
                thread_names[(thread.pid, thread.tid)] = thread.name
        for count in frame.stacks.counts:
            key = (count.pid, count.tid)
            per_thread.setdefault(key, Counter())[count.frames] += count.count
            thread_names[key] = count.thread_name or thread_names.get(key)
    shared: list[dict[str, Any]] = []
    index_of: dict[StackFrame, int] = {}

    def index(stack_frame: StackFrame) -> int:
        found = index_of.get(stack_frame)
        if found is None:
            found = index_of[stack_frame] = len(shared)
            shared.append({"name": stack_frame.function, "file": stack_frame.file, "line": stack_frame.line})
        return found

    profiles = []
    for (pid, tid), stacks in sorted(per_thread.items(), key=lambda item: -sum(item[1].values())):
        samples, weights = [], []
        for stack, count in stacks.most_common():
            samples.append([index(f) for f in reversed(stack)])  # recorded innermost first; speedscope: root first
            weights.append(count)
        total = sum(weights)
        thread = thread_names.get((pid, tid)) or ("main thread" if tid == pid else f"thread {tid}")
        profiles.append({"type": "sampled", "name": f"PID {pid} · {thread}", "unit": "none", "startValue": 0,
                         "endValue": total, "samples": samples, "weights": weights})
    return {"$schema": SPEEDSCOPE_SCHEMA, "shared": {"frames": shared}, "profiles": profiles, "name": name,
            "activeProfileIndex": 0, "exporter": exporter}
