"""Snapshot files are written atomically, and never by renaming over something that is not a file."""

from __future__ import annotations

import json
import os
import stat
import threading

from probes.outputs.snapshot import write_json_atomic


def test_atomic_write_replaces_a_regular_file_and_leaves_no_temp(tmp_path):
    out = tmp_path / "snap.json"
    out.write_text("old")
    write_json_atomic({"a": 1}, str(out))
    assert json.loads(out.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["snap.json"]


def test_a_fifo_is_written_in_place_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    write_json_atomic({"b": 2}, str(fifo))
    reader.join(timeout=10)
    assert json.loads(received[0]) == {"b": 2}
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still a pipe, not a regular file renamed over it


def test_dev_null_stays_a_device():
    write_json_atomic({"c": 3}, os.devnull)
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
