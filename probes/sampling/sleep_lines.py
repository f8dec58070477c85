"""A line of Python that only sleeps is waiting, whatever state a sample caught its thread in.

py-spy calls a thread active when the OS has it running or runnable, except at a few known blocking calls
(threading's wait, selectors' select: KNOWN_WAITS), which it calls idle whatever the state. `time.sleep` is C code
with no Python frame of its own, so a thread that sleeps in a loop shows its own line, and a sample that caught it
just woken, queued for a core on a busy machine, counts it working there: on a loaded machine a sleeper's whole
share came out partly busy (tests/e2e/test_pyspy_e2e.py's sleeper, once under CI load). Such a line is read from
this machine's copy of the file the frame names (probes/sensors/source_lines.py) and its samples count as waiting,
as py-spy counts threading's wait.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from probes.frame import StackCount, StackFrame
from probes.lru import LruCache
from probes.sensors.source_lines import line_in

# A line of Python that does nothing but sleep: time.sleep(…), asyncio's, or a sleep imported bare.
_SLEEP_LINE = re.compile(r"(?:await\s+)?(?:time\.|asyncio\.)?sleep\(")
SLEEP_LINES_KEPT = 4096  # positions remembered: ample for a job's threads, bounded for a long run
_sleeps: LruCache[tuple[str, str, int], bool] = LruCache(SLEEP_LINES_KEPT)


def only_sleeps(frame: StackFrame) -> bool:
    """The frame's line does nothing but sleep (read once per position)."""
    def read() -> bool:
        text = line_in(frame.file, frame.line, frame.function) if frame.line > 0 else None
        return text is not None and _SLEEP_LINE.match(text) is not None
    return _sleeps.get_or_build((frame.function, frame.file, frame.line), read)


def asleep_at_sleep_lines(counts: Sequence[StackCount]) -> list[StackCount]:
    """The counts with the working samples at a line that only sleeps counted waiting."""
    out = []
    for count in counts:
        inner = next((f for f in count.frames if not f.native), None)
        out.append(replace(count, idle=True) if not count.idle and inner is not None and only_sleeps(inner)
                   else count)
    return out
