"""The frames a running gputop has recorded so far, for tests that wait on them.

gputop creates its --record file and then writes the header line into it; a poll that falls between the two
(seen under load) finds an empty file, which `load_recording` rightly calls "not a gputop recording". For a
poll that means "nothing recorded yet", as a file not yet created does.
"""

from __future__ import annotations

from pathlib import Path

from probes.frame import Frame
from probes.outputs.recording import load_recording


def frames_so_far(path: Path) -> list[Frame]:
    """The whole frames in the recording at `path` now (none while it is missing or still empty)."""
    if not path.exists() or path.stat().st_size == 0:
        return []
    return list(load_recording(path).frames)
