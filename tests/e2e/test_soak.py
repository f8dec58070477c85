"""A CI-sized soak: benchmarks/soak.py's run_soak for ~40 s against its real DataLoader target.

The hour-long run (``python benchmarks/soak.py``) owns the strict claims (RSS within 5% after
warm-up); this one checks what must already hold after 40 s whatever the machine's load: gputop exits
0 with a snapshot, its fds, threads and py-spy children end no higher than the level they reached in
warm-up (plus a small fixed slack), it never runs more py-spy children than two per sampled process
(probes/sampling/pyspy.py: one record window and one dump each), no zombie child lingers, and no py-spy is
left on the target once gputop has exited.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import soak

pytestmark = pytest.mark.slow

DURATION_S = 40.0
# The sampler keeps at most a record window's pair of `py-spy record`s (with and without --idle: each sample's
# wait measured, issue 39) and a `py-spy dump` per process; gputop also runs `py-spy --version` once as it starts.
PYSPY_PER_PROCESS = 3
CUT_PAIR_ENDING = 2


@pytest.mark.starts_first  # its 40 s of watching wait on the clock, not a CPU
@pytest.mark.timeout(360)  # 40 s of gputop, plus torch's import and the workers' start on a loaded machine
def test_short_soak_nothing_accumulates(tmp_path):
    s = soak.run_soak(DURATION_S, 1.0, tmp_path, record=True, phase_seconds=10.0)
    report = soak.format_summary(s) + f"\n(logs in {tmp_path})"

    assert s["gputop_exit"] == 0, report
    assert s["snapshot_written"], report
    assert s["checks"]["target_alive_throughout"], report
    assert s["post_warmup_samples"] >= 5, report

    for name in ("fds", "threads", "pyspy_children"):
        values = s[name]
        assert values["end"] <= values["warmup_max"] + soak.SLACK[name], f"{name} grew\n{report}"
    target_procs = s["target_procs"]["max"]
    assert target_procs >= 3, report  # the main process and its two DataLoader workers
    # A wake cuts a record window; its pair, writing its output, is waited for by a thread of its own while the next
    # window's pair starts (process_sampler._hand_off_cut): one such pair at a time beside the rest.
    assert s["pyspy_children"]["max_whole_run"] <= PYSPY_PER_PROCESS * target_procs + CUT_PAIR_ENDING + 1, report

    assert s["zombie_children"]["persistent_pids"] == [], report
    assert s["zombie_children"]["end"] <= 2, report
    assert s["pyspy_left_after_exit"] == [], report

    # Only a gross leak: the frame history still fills during this run, so RSS may rise a little.
    assert s["rss_mb"]["end"] < 1.5 * s["rss_mb"]["after_warmup"], report

    series = (tmp_path / "series.csv").read_text().splitlines()
    assert series[0].split(",") == soak.FIELDS
    assert len(series) - 1 == s["samples"] >= DURATION_S / 2
