"""A Hugging Face config.json named on a job's command line (probes/models/hf_command_line.py): which
arguments are looked at and in what order, JSON that is not a model config passed over, Hub names never
fetched, the sequence length the job trains at, and nanoGPT's reader asked first (probes/jobs/job_command_line.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from probes.frame import ProgressReading
from probes.jobs.job_command_line import read_job_command_line
from probes.models.hf_command_line import read_command_line
from probes.models.hf_config import load_config
from probes.reference.baseline import compare_progress, load_comparison_inputs

LLAMA = {  # grouped-query attention: 4 query heads share 2 K/V heads
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 128,
}


def write(path, content) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return str(path)


@pytest.fixture
def model_folder(tmp_path):
    write(tmp_path / "model" / "config.json", LLAMA)
    return tmp_path


@pytest.mark.parametrize(("argv", "written"), [
    (["python", "run_clm.py", "--model_name_or_path", "model"], "--model_name_or_path model"),
    (["python", "run_clm.py", "--model_name_or_path=model"], "--model_name_or_path model"),
    (["python", "train.py", "--model-dir", "model", "--bf16"], "--model-dir model"),
    (["python", "train.py", "--output_dir", "./model"], "--output_dir ./model"),
    (["torchrun", "--nproc_per_node=2", "train.py", "--config", "model/config.json"],
     "--config model/config.json"),
    (["python", "train.py", "model", "--lr", "3e-4"], "model"),  # a bare argument naming the folder
])
def test_an_argument_naming_the_model_folder_or_config(model_folder, argv, written):
    stated = read_command_line(argv, str(model_folder))
    path = str(model_folder / "model" / "config.json")
    assert stated.shape == load_config(path) and stated.model == path
    assert stated.source == f"the Hugging Face config.json its command line names: {written} ({path})"
    assert stated.tokens_per_iter is None  # the command line's batch is per device: --tokens-per-iter says it


def test_the_named_flags_come_before_other_arguments_and_config_name_first(model_folder):
    write(model_folder / "other" / "config.json", {**LLAMA, "num_hidden_layers": 4})
    write(model_folder / "base" / "config.json", {**LLAMA, "num_hidden_layers": 6})
    argv = ["python", "run_clm.py", "other", "--model_name_or_path", "base", "--config_name", "model"]
    assert read_command_line(argv, str(model_folder)).shape.num_layers == 2
    assert read_command_line(argv[:-2], str(model_folder)).shape.num_layers == 6  # a flag beats a bare folder


def test_json_that_is_not_a_model_config_is_passed_over(model_folder):
    write(model_folder / "ds_config.json", {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {}})
    write(model_folder / "broken.json", "{not json")
    write(model_folder / "deepseek" / "config.json", {"model_type": "deepseek_v3", "hidden_size": 7168})
    argv = ["deepspeed", "train.py", "--deepspeed", "ds_config.json", "--config", "broken.json",
            "--model_name_or_path", "deepseek", "--output_dir", "model"]
    stated = read_command_line(argv, str(model_folder))
    assert stated.model == str(model_folder / "model" / "config.json")
    assert read_command_line(argv[:-2], str(model_folder)) is None  # no model a family counts: none stated


def test_a_hub_name_is_not_fetched(tmp_path):
    argv = ["python", "run_clm.py", "--model_name_or_path", "meta-llama/Meta-Llama-3-8B", "--output_dir", "out"]
    assert read_command_line(argv, str(tmp_path)) is None


@pytest.mark.parametrize(("flags", "length", "said"), [
    (["--block_size", "64"], 64, "--block_size 64"),
    (["--max_seq_length=32"], 32, "--max_seq_length 32"),
    (["--max-seq-len", "16"], 16, "--max-seq-len 16"),
])
def test_the_sequence_the_job_trains_at_replaces_max_position_embeddings(model_folder, flags, length, said):
    stated = read_command_line(["python", "sft.py", "--model_name_or_path", "model", *flags], str(model_folder))
    config = load_config(str(model_folder / "model" / "config.json"))
    assert stated.shape == dataclasses.replace(config, seq_len=length)
    assert stated.source.endswith(f"; sequence {length} from {said}, not the config's 128")


def test_a_nonsense_sequence_length_is_ignored(model_folder):
    for flags in (["--block_size", "0"], ["--block_size", "auto"], ["--max_length", "128"]):
        stated = read_command_line(["python", "t.py", "model", *flags], str(model_folder))
        assert stated.shape.seq_len == 128 and "; sequence" not in stated.source


def test_nanogpt_is_asked_first(model_folder):
    (model_folder / "train.py").write_text("", encoding="utf-8")
    (model_folder / "configurator.py").write_text("", encoding="utf-8")
    stated = read_job_command_line(["python", "train.py", "--n_layer=4", "--out_dir=model"], str(model_folder))
    assert stated.model == "nanoGPT" and stated.shape.n_layer == 4


def test_the_pace_says_where_the_model_came_from(model_folder):
    stated = read_command_line(["python", "t.py", "--model_name_or_path", "model"], str(model_folder))
    reading = ProgressReading(source="train.log", format="generic", iteration=9, seconds_per_iter=0.5,
                              last_line="step 9 | loss 2.0")
    without_tokens = compare_progress(reading, load_comparison_inputs(None, None, None, stated=stated), None)
    assert "Pass --tokens-per-iter N (and --model, or --baseline) for tokens/s and the MFU." in without_tokens.lines
    inputs = load_comparison_inputs(None, None, 256, stated=stated)
    lines = compare_progress(reading, inputs, None).lines
    assert "512 tokens/s (256 tokens per iteration, --tokens-per-iter)." in lines
    assert lines[-1] == f"Model from {stated.source}: {stated.shape.describe()}."
    assert load_comparison_inputs(None, "llama-3-8b", 256, stated=stated).stated_by is None  # --model wins
