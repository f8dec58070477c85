"""The step facts hold off the live screen (issue 29's principle, issue 30's StepFacts), end to end:

- A real CPU training step (tests/targets/step_facts_train.py, copied to a folder of its own) whose autocast and
  per-step `.item()` are read from its source lines, watched by the real command (`python -m tui --pid P --snapshot
  --record`). Its folder is then moved away and the recording replayed by the real `gputop replay --snapshot` in a
  fresh process: the replay's verdict.step is the live one, each fact read from a line marked as read on the
  recording machine, and no file listed as not readable.
- A real 2-rank DDP job on gloo under real torchrun (tests/targets/job_torchrun.py): the snapshot's verdict, the
  job's, carries the step facts of the rank it speaks for.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
from support.jobwatch import TIMEOUT_S, settled, watch_job_until
from support.paths import REPO, TARGETS
from support.processes import free_port, start_logged, wait_for
from support.recorded import frames_so_far

from probes.diagnosis.evidence import gather
from probes.diagnosis.step_source import RECORDED_WHERE
from probes.monitoring.monitor import fold
from probes.outputs.recording import read_recording

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2 * TIMEOUT_S + 120)]

ENV = dict(os.environ, PYTHONPATH=str(REPO))


def gputop(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tui", *args], cwd=REPO, env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def read_from_lines(facts) -> bool:
    """The facts this test is about, read from the job's own lines: autocast's `with` and the `.item()` call."""
    return (facts.autocast is not None and facts.autocast.origin == "source"
            and any(s.value == "item" and s.origin == "source" for s in facts.host_syncs))


def test_a_replay_where_the_job_s_files_are_gone_says_what_the_live_run_said(spawn_target, tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    script = job / "train.py"
    shutil.copy(TARGETS / "step_facts_train.py", script)
    target = start_logged(spawn_target, tmp_path, str(script), "--autocast", "--item")
    live, recording = tmp_path / "live.json", tmp_path / "run.jsonl"
    command = gputop("--pid", str(target.pid), "--snapshot", str(live), "--duration", "150", "--record",
                     str(recording), "--no-gpu", "--rate", "20")
    try:
        wait_for(lambda: frames_so_far(recording) and read_from_lines(gather(frames_so_far(recording), 5.0).step),
                 timeout=90.0, interval=1.0)
    finally:
        command.send_signal(signal.SIGTERM)  # headless: stop now and write the snapshot
        _, stderr = command.communicate(timeout=60)
    assert command.returncode == 0, stderr
    live_step = json.loads(live.read_text())["verdict"]["step"]
    assert any("`with …autocast(…)` at train.py:" in line for line in live_step), live_step
    target.kill()
    target.wait(timeout=30)
    job.rename(tmp_path / "moved")  # the job's files are not where its stacks say: as on another machine
    assert not script.exists()

    replayed_path = tmp_path / "replayed.json"
    replay = subprocess.run([sys.executable, "-m", "tui", "replay", str(recording), "--snapshot", str(replayed_path)],
                            cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert replay.returncode == 0, replay.stderr
    replayed = json.loads(replayed_path.read_text())["verdict"]["step"]
    assert [line.replace(RECORDED_WHERE, "") for line in replayed] == live_step, "\n".join(replayed)
    from_recording = [line for line in replayed if RECORDED_WHERE in line]
    assert any(line.startswith("autocast bfloat16 (source: `with …autocast(…)` at train.py:") for line in
               from_recording), replayed
    assert any(line.startswith("host sync item (source: ") for line in from_recording), replayed
    assert not any(line.startswith("not readable here") for line in replayed), replayed
    print("replayed with the job's folder moved away:\n" + "\n".join(replayed))


def test_a_torchrun_job_s_snapshot_carries_the_step_facts_of_the_rank_it_speaks_for(spawn_target, tmp_path):
    out = tmp_path / "torchrun.out"
    with out.open("w") as handle:
        target = spawn_target("job_torchrun.py", str(free_port()), "2", "0", "--workers", "0", stdout=handle,
                              stderr=subprocess.STDOUT, timeout=TIMEOUT_S,
                              ready=lambda proc: out.read_text().count("ready") >= 2)
    document, _, _, _ = watch_job_until(
        target.pid, tmp_path, lambda job: len(job.ranks) == 2 and bool(job.verdict.step) and settled(job),
        extra_args=("--rate", "20"))
    assert document["job"]["kind"] == "torchrun" and len(document["job"]["ranks"]) == 2
    step = document["verdict"]["step"]
    assert step, document["verdict"]
    # The same frames folded here give the same job verdict, whose step is one rank's own, whole.
    job = fold(read_recording(tmp_path / "frames.jsonl"), hang_after_s=5.0).view.job
    assert list(job.verdict.step) == step
    assert step in [list(rank.verdict.step) for rank in job.ranks], (step, [r.verdict.step for r in job.ranks])
    print(f"{job.finding}: verdict.step " + " | ".join(step))
