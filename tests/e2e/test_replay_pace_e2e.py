"""A recording replayed where the job's files are gone shows the MFU the live screen showed (issue 29, item 2).

A small GPT configured and logging as nanoGPT's train.py (tests/targets/nanogpt_config_train.py, run as train.py
with a configurator.py beside it, so gputop reads its shape from its command line as it reads nanoGPT's) is
watched by the real `gputop --pid P --snapshot --record` until its log gives a pace. Then the job's folder (its
train.py, its log) is deleted and the recording replayed from elsewhere: the model gputop resolved live, its
FLOPs per token, the tokens per iteration and the peak asked for travel in the recording's header, so the
replay's MFU line is the live one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from support.jobwatch import watch_until
from support.paths import REPO
from support.processes import stop_process_tree, wait_for
from support.real_jobs import start_nanogpt_like

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SETTINGS = ("--n_layer=2", "--n_embd=32", "--n_head=2", "--batch_size=8", "--gradient_accumulation_steps=2",
            "--block_size=32", "--vocab_size=256")


def paced(view) -> bool:
    progress = view.latest.progress
    return progress is not None and bool(progress.seconds_per_iter)


def test_a_replay_without_the_jobs_files_shows_the_live_mfu(tmp_path):
    job_folder, watched_in, elsewhere = tmp_path / "job", tmp_path / "watch", tmp_path / "elsewhere"
    for folder in (job_folder, watched_in, elsewhere):
        folder.mkdir()
    job, log = start_nanogpt_like(job_folder, SETTINGS)
    try:
        wait_for(lambda: "iter 3:" in log.read_text(), timeout=120)
        # No GPU here: a peak given on the command line makes the MFU, and must travel with the model.
        watched = watch_until(job.pid, watched_in, paced, extra_args=("--peak-tflops", "1", "--no-stacks"))
    finally:
        stop_process_tree(job)
    live = watched.document["progress"]["baseline"]
    assert live["corrected_mfu_pct"] is not None and live["model"] == "nanoGPT"

    recording = elsewhere / "run.jsonl"
    shutil.move(watched_in / "frames.jsonl", recording)
    shutil.rmtree(job_folder)  # its train.py, configurator.py and log: nothing of the job is left to read
    replay = subprocess.run([sys.executable, "-m", "tui", "replay", str(recording), "--snapshot", "-"],
                            capture_output=True, text=True, timeout=120, cwd=elsewhere,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert replay.returncode == 0, replay.stderr
    replayed = json.loads(replay.stdout)["progress"]["baseline"]
    for key in ("model", "flops_per_token", "tokens_per_iter", "peak_flops_per_s", "corrected_mfu_pct"):
        assert replayed[key] == pytest.approx(live[key]), key

    def mfu_line(pace):
        return next(line for line in pace["lines"] if line.startswith("Corrected MFU"))

    assert mfu_line(replayed) == mfu_line(live)
    assert any(line.startswith("Model from nanoGPT's command line: --n_layer=2") for line in replayed["lines"])
