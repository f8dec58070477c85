"""A line of Python that only sleeps counts waiting whatever state a sample caught its thread in
(probes/sampling/sleep_lines.py), read from the file the frame names."""

from __future__ import annotations

from probes.frame import StackCount, StackFrame
from probes.sampling.sleep_lines import asleep_at_sleep_lines


def test_a_working_sample_at_a_sleep_line_is_waiting_and_others_are_left(tmp_path):
    source = tmp_path / "loop.py"
    source.write_text("import time\n\ndef sleeper():\n    while True:\n        time.sleep(0.5)\n        work()\n")
    at_sleep = (StackFrame("sleeper", str(source), 5),)
    at_work = (StackFrame("sleeper", str(source), 6),)
    counts = [StackCount(pid=1, tid=2, thread_name="s", idle=False, frames=at_sleep, count=3),
              StackCount(pid=1, tid=2, thread_name="s", idle=False, frames=at_work, count=4),
              StackCount(pid=1, tid=2, thread_name="s", idle=True, frames=at_sleep, count=9)]
    marked = asleep_at_sleep_lines(counts)
    assert [(c.frames[0].line, c.idle, c.count) for c in marked] == [(5, True, 3), (6, False, 4), (5, True, 9)]
    # a file not on this disk says nothing: the sample stays as py-spy saw it
    elsewhere = StackCount(pid=1, tid=2, thread_name="s", idle=False,
                           frames=(StackFrame("sleeper", "/nowhere/loop.py", 5),), count=1)
    assert asleep_at_sleep_lines([elsewhere]) == [elsewhere]
