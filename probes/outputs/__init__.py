"""What gputop writes: the snapshot JSON (snapshot), the JSONL recording (recording), Prometheus metrics
(exporter), speedscope profiles (speedscope), and the 0600 files they go into (private_files).

This package is the front ends' door to them: tui/ imports these names from `probes.outputs`, never from its
modules (tests/unit/test_import_floors.py counts what it imports); a name a front end newly needs goes in the
three lists below.

The door is lazy: each name is imported from its home on first use (`__getattr__`), so reading a recording does
not import the exporter and prometheus_client. The imports under TYPE_CHECKING say to the type checker what
_HOMES says at run time, and __all__ names the same (tests/unit/test_import_floors.py keeps the three equal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from probes.lazy_door import door_getattr

if TYPE_CHECKING:
    from probes.outputs.exporter import GputopCollector, WatchedView
    from probes.outputs.private_files import make_private_dir, write_private_text
    from probes.outputs.recording import (
        Recorder,
        RecordingError,
        json_line,
        load_recording,
        read_header,
        read_recording,
        recording_header,
        skipped_notice,
    )
    from probes.outputs.snapshot import write_json_atomic
    from probes.outputs.speedscope import speedscope_document

_HOMES: dict[str, str] = {
    "GputopCollector": "probes.outputs.exporter",
    "WatchedView": "probes.outputs.exporter",
    "make_private_dir": "probes.outputs.private_files",
    "write_private_text": "probes.outputs.private_files",
    "Recorder": "probes.outputs.recording",
    "RecordingError": "probes.outputs.recording",
    "json_line": "probes.outputs.recording",
    "load_recording": "probes.outputs.recording",
    "read_header": "probes.outputs.recording",
    "read_recording": "probes.outputs.recording",
    "recording_header": "probes.outputs.recording",
    "skipped_notice": "probes.outputs.recording",
    "write_json_atomic": "probes.outputs.snapshot",
    "speedscope_document": "probes.outputs.speedscope",
}

__all__ = [
    "GputopCollector",
    "Recorder",
    "RecordingError",
    "WatchedView",
    "json_line",
    "load_recording",
    "make_private_dir",
    "read_header",
    "read_recording",
    "recording_header",
    "skipped_notice",
    "speedscope_document",
    "write_json_atomic",
    "write_private_text",
]


__getattr__ = door_getattr(__name__, _HOMES)
