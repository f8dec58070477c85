"""The live monitor on a real job with a model given as a config.json: a tiny Llama trained by
tests/targets/hf_llama_job.py from its model folder, watched by `gputop --pid P --model config.json
--tokens-per-iter N --peak-tflops X` until its recording holds timed steps; the snapshot's pace counts the
Llama family's FLOPs for that config against the peak given, and an implausible MFU comes with its doubts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import REPO, wait_for

from probes.models.hf_config import load_config
from probes.models.llama import flops_per_token
from probes.recording import load_recording

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TINY_LLAMA = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 256,
    "max_position_embeddings": 64, "tie_word_embeddings": False,
}
BATCH, SEQUENCE = 2, 64
WAIT_S = 180.0  # a bound for a loaded machine; each wait ends as soon as its state is reached


def test_live_pace_counts_a_config_json_model(spawn_target, tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    config = model_dir / "config.json"
    config.write_text(json.dumps(TINY_LLAMA), encoding="utf-8")
    log = tmp_path / "train.log"
    with log.open("w") as stdout:
        job = spawn_target("hf_llama_job.py", str(model_dir), str(BATCH), str(SEQUENCE), stdout=stdout)
    snapshot, recording = tmp_path / "snapshot.json", tmp_path / "frames.jsonl"
    tokens = BATCH * SEQUENCE
    command = subprocess.Popen(
        [sys.executable, "-m", "tui", "--pid", str(job.pid), "--log", str(log), "--model", str(config),
         "--tokens-per-iter", str(tokens), "--peak-tflops", "1000", "--no-gpu", "--no-stacks",
         "--snapshot", str(snapshot), "--record", str(recording), "--duration", str(WAIT_S + 60)],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)

    def timed_steps_recorded() -> bool:
        if command.poll() is not None:
            pytest.fail(f"gputop exited with {command.returncode}: {command.stderr.read()}")
        frames = list(load_recording(recording).frames) if recording.exists() else []
        return any(frame.progress is not None and frame.progress.seconds_per_iter for frame in frames)

    try:
        wait_for(timed_steps_recorded, timeout=WAIT_S, interval=0.5)
    finally:
        command.send_signal(signal.SIGTERM)
        _, stderr = command.communicate(timeout=60)
    assert command.returncode == 0, stderr
    pace = json.loads(snapshot.read_text())["progress"]["baseline"]
    shape = load_config(str(config))
    assert shape.seq_len == SEQUENCE
    assert pace["model"] == str(config)
    assert pace["flops_per_token"] == flops_per_token(shape)
    assert pace["observed_tokens_per_s"] == pytest.approx(tokens / pace["observed_seconds_per_iter"])
    assert pace["achieved_flops_per_s"] == pytest.approx(flops_per_token(shape) * pace["observed_tokens_per_s"])
    assert (pace["peak_flops_per_s"], pace["peak_source"]) == (1000e12, "--peak-tflops")
    assert pace["corrected_mfu_pct"] < 1  # a tiny model on one CPU core against a 1 PFLOP/s peak
    text = "\n".join(pace["lines"])
    assert "is below what a training step on a GPU reaches (1%)" in text
    assert f"The model: {shape.describe()}." in text
