"""A checkpoint every 12 s of training, named with its share and period while the verdict is the training itself: a real
loop (tests/targets/periodic_checkpoint.py) watched by the real `gputop --pid P --snapshot` command until the view
says so, never for a fixed time; its log's own timestamps give the true period and share."""

from __future__ import annotations

import re
import subprocess
import time

import pytest
from support.jobwatch import watch_until
from support.processes import said_ready

TIMEOUT_S = 150.0
# pytest's own limit covers the bounded wait for the verdict plus the job's start and the command's stop.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(TIMEOUT_S + 90)]
SAVED = re.compile(r"saved step \d+ at ([\d.]+) after ([\d.]+)")


def test_a_periodic_checkpoint_is_named_beside_the_training_verdict(spawn_target, tmp_path):
    began = time.monotonic()
    out = tmp_path / "train.out"
    with out.open("w") as handle:
        trainer = spawn_target("periodic_checkpoint.py", str(tmp_path), stdout=handle, stderr=subprocess.STDOUT,
                               ready=lambda proc: said_ready(out.read_text()))

    def checkpoint_named_beside_training(view) -> bool:
        shares = view.shares
        return (view.verdict.bottleneck not in ("checkpoint_save", "unknown") and shares is not None
                and any(r.phase == "checkpoint" and r.episodes >= 3 for r in shares.recurring)
                and any(line.startswith("also: saving a checkpoint") for line in view.verdict.evidence))

    document = watch_until(trainer.pid, tmp_path, checkpoint_named_beside_training, timeout=TIMEOUT_S).document
    saves = [(float(began_at), float(ended)) for ended, began_at in SAVED.findall(out.read_text())]
    period = (saves[-1][0] - saves[0][0]) / (len(saves) - 1)
    share = sum(end - start for start, end in saves[1:]) / (saves[-1][1] - saves[0][1])
    recurring = {r["phase"]: r for r in document["recurring_phases"]}
    assert "checkpoint" in recurring, document["time_shares"]
    found = recurring["checkpoint"]
    assert 0.5 * period <= found["period_s"] <= 1.5 * period, (found, period)
    assert 0.4 * share <= found["share"] <= 2.0 * share, (found, share)
    assert document["time_shares"]["compute"] > found["share"], document["time_shares"]
    print(f"checkpoint {found['share']:.0%} every {found['period_s']:.1f} s (log: {share:.0%} every {period:.1f} s); "
          f"verdict {document['verdict']['bottleneck']}; test took {time.monotonic() - began:.1f} s")
