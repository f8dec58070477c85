"""Copy-on-read named, end to end (issue 40): a real training loop fed by a torch DataLoader of 4 workers over a
dataset held as 3 million Python strings, watched by the real command. The workers' resident bytes hold still (a
copied page was resident already); their smaps_rollup, read by the tree walk every few seconds, shows their private
bytes growing as their shared ones fall. The verdict says so, with the rate, and advises arrays instead of Python
objects; the rate stated is checked against the workers' private bytes as this test reads them itself."""

from __future__ import annotations

import re
import threading
import time

import pytest
from support.jobwatch import watch_until

from probes.sensors.memory_growth import fit_line
from probes.sensors.proc_readers import read_smaps_rollup

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
LINE = re.compile(r"^memory: its (\d+) DataLoader workers grow ([\d.]+) (kB|MB)/s together \(over the last (\d+) s\): "
                  r"their parent's pages turning private as they read them \(copy-on-read: Python's reference counts "
                  r"write to every object a worker touches\); no memory limit read for it$")
UNITS = {"kB": 1e3, "MB": 1e6}


def test_dataloader_workers_copying_their_parents_objects_are_named_copy_on_read(spawn_target, tmp_path):
    target = spawn_target("copy_on_read_loader.py", "--seconds", "240", stdout=-1, text=True)
    line = target.stdout.readline().split()
    assert line and line[0] == "workers", line
    workers = [int(pid) for pid in line[1:]]

    # The truth, read apart from gputop: the workers' private bytes together, every 2 s.
    own: list[tuple[float, float]] = []
    stop = threading.Event()

    def read_workers() -> None:
        while not stop.is_set():
            rollups = [read_smaps_rollup(pid) for pid in workers]
            if all(r is not None for r in rollups):
                own.append((time.time(), float(sum(r.private_bytes for r in rollups if r is not None))))
            stop.wait(2.0)

    reader = threading.Thread(target=read_workers, daemon=True)
    reader.start()
    said: list[tuple[float, str]] = []

    def named(view) -> bool:
        found = [e for e in view.verdict.evidence if LINE.match(e)]
        if found:
            said.append((view.latest.time, found[0]))
        return bool(found)

    try:
        watched = watch_until(target.pid, tmp_path, named, timeout=200)
    finally:
        stop.set()
        reader.join(timeout=5)
    stated_at, words = said[0]
    match = LINE.match(words)
    assert match is not None and int(match.group(1)) == 4, words
    stated = float(match.group(2)) * UNITS[match.group(3)]
    window = float(match.group(4))
    truth = fit_line([p for p in own if stated_at - window <= p[0] <= stated_at])
    assert truth is not None
    print(f"{words}; the workers' own private bytes grew {truth.slope / 1e6:.2f} MB/s over the same window")
    assert stated == pytest.approx(truth.slope, rel=0.25), (words, truth.slope)
    # Their resident bytes held still meanwhile: RSS alone would never have said it.
    rss = [sum(p.rss_bytes or 0 for p in f.processes if p.role == "dataloader_worker") for f in watched.frames
           if f.time >= stated_at - window and len([p for p in f.processes if p.role == "dataloader_worker"]) == 4]
    assert rss and (max(rss) - min(rss)) < 0.2 * stated * window, (min(rss), max(rss))
    advice = watched.document["verdict"]["advice_text"]
    assert any(a.startswith("Hold the dataset in numpy arrays, tensors or a memory map") for a in advice), advice
