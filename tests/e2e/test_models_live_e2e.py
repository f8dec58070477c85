"""The live monitor on a real job whose model is a Hugging Face config.json: a tiny Llama trained by
tests/targets/hf_llama_job.py from its model folder, watched by the real `gputop --pid P` command
(tests/support/jobwatch.py) until its recording holds timed steps. Given as `--model config.json`, the snapshot's pace
counts the Llama family's FLOPs for that config against the peak given, and an implausible MFU comes with its
doubts; not given, the config.json the job's command line names (`--model_name_or_path model`) is read, at the
sequence its `--block_size` trains, and the pace says where the model came from; an explicit --model wins."""

from __future__ import annotations

import dataclasses
import json

import pytest
from support.jobwatch import watch_until
from support.processes import wait_for

from probes.models.hf_config import load_config
from probes.models.llama import flops_per_token
from tui.cli import build_parser
from tui.commands.shared import comparison_inputs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TINY_LLAMA = {  # grouped-query attention: 4 query heads share 2 K/V heads
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 256,
    "max_position_embeddings": 64, "tie_word_embeddings": False,
}
BATCH, SEQUENCE = 2, 64
WAIT_S = 180.0  # a bound for a loaded machine; each wait ends as soon as its state is reached


def timed_steps(view) -> bool:
    progress = view.latest.progress
    return progress is not None and bool(progress.seconds_per_iter)


def write_model_folder(tmp_path, **changes):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    config = model_dir / "config.json"
    config.write_text(json.dumps({**TINY_LLAMA, **changes}), encoding="utf-8")
    return model_dir, config


def test_live_pace_counts_a_config_json_model(spawn_target, tmp_path):
    model_dir, config = write_model_folder(tmp_path)
    log = tmp_path / "train.log"
    with log.open("w") as stdout:
        job = spawn_target("hf_llama_job.py", str(model_dir), str(BATCH), str(SEQUENCE), stdout=stdout)
    tokens = BATCH * SEQUENCE
    watched = watch_until(job.pid, tmp_path, timed_steps, timeout=WAIT_S, extra_args=(
        "--log", str(log), "--model", str(config), "--tokens-per-iter", str(tokens), "--peak-tflops", "1000",
        "--no-stacks"))
    pace = watched.document["progress"]["baseline"]
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


def test_the_config_json_the_job_names_is_read_without_model(spawn_target, tmp_path):
    # The config allows 128 positions; the job trains at 64 (--block_size), which the attention term must use.
    _, config = write_model_folder(tmp_path, max_position_embeddings=2 * SEQUENCE)
    log = tmp_path / "train.log"
    with log.open("w") as stdout:  # started in tmp_path: the folder is named relative to the job's cwd
        job = spawn_target("hf_llama_job.py", "--model_name_or_path", "model", "--per_device_train_batch_size",
                           str(BATCH), "--block_size", str(SEQUENCE), stdout=stdout, cwd=tmp_path)
    stated = wait_for(lambda: comparison_inputs(build_parser().parse_args(["--pid", str(job.pid)])))
    given = comparison_inputs(build_parser().parse_args(["--pid", str(job.pid), "--model", "llama-3-8b"]))
    assert given.stated_by is None and given.model == "llama-3-8b"  # an explicit --model wins
    trained = dataclasses.replace(load_config(str(config)), seq_len=SEQUENCE)
    assert stated.shape == trained and stated.model == str(config)

    tokens = BATCH * SEQUENCE
    watched = watch_until(job.pid, tmp_path, timed_steps, timeout=WAIT_S, extra_args=(
        "--log", str(log), "--tokens-per-iter", str(tokens), "--peak-tflops", "1000", "--no-stacks"))
    pace = watched.document["progress"]["baseline"]
    assert pace["model"] == str(config)
    assert pace["flops_per_token"] == flops_per_token(trained) != flops_per_token(load_config(str(config)))
    assert pace["achieved_flops_per_s"] == pytest.approx(flops_per_token(trained) * pace["observed_tokens_per_s"])
    assert (f"Model from the Hugging Face config.json its command line names: --model_name_or_path model "
            f"({config}); sequence {SEQUENCE} from --block_size {SEQUENCE}, not the config's {2 * SEQUENCE}: "
            f"{trained.describe()}.") in pace["lines"]
