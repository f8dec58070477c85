"""`gputop mfu`, `gputop probe` and the live pace with a model of any family: --config and --model taking a
config.json or any preset, --gpu/--peak-tflops/--dtype on the live comparison, and an MFU above 100% or
below 1% shown with what is wrong (the peak's GPU and the one NVML sees, the accumulation factor, the model),
never with pattern text."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from probes.frame import ProgressReading
from probes.models import PRESETS, family_of
from probes.models.convention import ATTENTION_CONVENTION
from probes.reference.baseline import BaselineError, PeakOptions, compare_progress, load_comparison_inputs
from tui import cli
from tui.commands import mfu as mfu_command

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "configs"
LLAMA_CONFIG = str(CONFIGS / "llama-3-8b.json")
H100 = "NVIDIA H100 80GB HBM3"
# The second nanoGPT run: batch 8 × accumulation 64, n_embd 768, 12 layers, block 1024, 9.3 s/iter,
# given as run on an RTX 3060 (a name the table lists only by pattern, so the entry is the closest one).
RTX_3060_CASE = ["mfu", "--model", "gpt2", "--batch-size", "8", "--grad-accum", "64", "--iter-time", "9.3",
                 "--gpu", "GeForce RTX 3060 12GB"]


def run_cli(argv, capsys):
    code = cli.run(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_mfu_from_a_config_json(capsys):
    code, out, err = run_cli(["mfu", "--config", LLAMA_CONFIG, "--block-size", "8192", "--batch-size", "4",
                              "--grad-accum", "8", "--iter-time", "20", "--gpu", H100, "--json"], capsys)
    assert code == 0 and err == ""
    document = json.loads(out)
    assert (document["family"], document["params"]) == ("llama", 8_030_261_248)
    assert document["tokens_per_iter"] == 4 * 8192 * 8
    # 6·(8.03e9 − 128256·4096) + 12·32·32·128·8192 per token: attention over the whole 8192×8192 score matrix
    assert document["flops_per_token"] == 6 * (8_030_261_248 - 128256 * 4096) + 12 * 32 * 32 * 128 * 8192
    assert document["flops_attention"] == ATTENTION_CONVENTION
    assert document["mfu"] == pytest.approx(document["flops_per_token"] * 262_144 / 20 / 989.5e12)
    assert document["mfu_doubts"] == []


def test_mfu_of_a_moe_preset_counts_the_active_experts(capsys):
    code, out, _ = run_cli(["mfu", "--model", "mixtral-8x7b", "--block-size", "4096", "--tokens-per-iter",
                            "1048576", "--iter-time", "200", "--gpu", "NVIDIA H200"], capsys)
    assert code == 0
    assert "46,702,792,704, 12,879,925,248 active per token" in out
    # the whole 4096×4096 score matrix: T itself on the formula line, not a halved S
    assert "6·N_active + 12·L·H·Q·T = 6·12,748,853,248 + 12·32·32·128·4096\n" in out
    assert f"\nattention       {ATTENTION_CONVENTION}\n" in out


def test_an_mfu_above_100_percent_says_what_is_wrong(capsys, monkeypatch):
    monkeypatch.setattr(mfu_command, "gpu_names", lambda: [H100])
    code, out, err = run_cli(RTX_3060_CASE, capsys)
    assert code == 0 and err == ""
    assert "MFU             189.0% (cannot be right: see below)" in out
    assert "An MFU of 189.0% cannot be: no step runs faster than the GPU's peak, so an input is wrong." in out
    # the peak: which GPU was assumed, in words, and the one NVML sees with its peak
    assert "gputop's table: RTX 3060, the closest entry to 'GeForce RTX 3060 12GB'" in out
    assert f"NVML sees '{H100}' here, whose peak is 989.5 TFLOP/s: pass --gpu '{H100}'" in out
    # tokens per step: the accumulation factor; and the model
    assert "Tokens per iteration: 524,288 with grad-accum 64. If the time (9.3 s) is one micro-step" in out
    assert "The model: 12 layers, 12 heads, 768 embd, block 1024, vocab 50304." in out
    assert "The GPUs: the peak is one GPU's." in out
    assert not re.search(r"\\b|\(\?|\\s", out), "a raw pattern reached the screen"


def test_an_mfu_above_100_percent_in_json_carries_its_doubts(capsys, monkeypatch):
    monkeypatch.setattr(mfu_command, "gpu_names", lambda: [])
    code, out, _ = run_cli([*RTX_3060_CASE, "--json"], capsys)
    assert code == 0
    document = json.loads(out)
    assert document["mfu"] > 1.0
    assert document["mfu_doubts"][0].startswith("An MFU of 189.0% cannot be")
    assert "NVML sees no GPU here" in document["mfu_doubts"][1]


def test_an_mfu_below_1_percent_names_the_time_and_the_accumulation(capsys):
    code, out, _ = run_cli(["mfu", "--model", "tiny", "--tokens-per-iter", "4096", "--iter-time", "2",
                            "--peak-tflops", "100"], capsys)
    assert code == 0
    assert "is below what a training step on a GPU reaches (1%)" in out
    assert "batch × sequence × the accumulation factor" in out
    assert "includes evaluation, checkpoints or start-up" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "gpt2", "--config", LLAMA_CONFIG], "pass --model or --config, not both"),
    (["--config", LLAMA_CONFIG, "--n-layer", "4"], "only nanoGPT's GPT takes --n-layer; edit the config.json"),
    (["--model", "llama-9"], "--model must be a preset"),
    (["--config", str(CONFIGS / "deepseek-v3.json")], "DeepSeek-V3 is not supported"),
    (["--config", "/nonexistent/config.json"], "cannot read /nonexistent/config.json"),
])
def test_model_mistakes_are_one_line(capsys, argv, message):
    code, out, err = run_cli(["mfu", *argv, "--tokens-per-iter", "1", "--iter-time", "1", "--peak-tflops", "1"],
                             capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err


# --- the live comparison -----------------------------------------------------------------------------------


def reading(seconds_per_iter: float) -> ProgressReading:
    return ProgressReading(source="train.log", format="generic", iteration=40,
                           seconds_per_iter=seconds_per_iter, last_line="step 40")


def test_live_monitor_takes_a_config_and_a_gpu():
    inputs = load_comparison_inputs(None, LLAMA_CONFIG, 262_144, peak=PeakOptions(gpu=H100))
    assert inputs.shape == PRESETS["llama-3-8b"]
    result = compare_progress(reading(30.0), inputs, None)
    assert result.peak_flops_per_s == pytest.approx(989.5e12)
    assert f"--gpu '{H100}'" in result.peak_source
    assert any(line.startswith(f"Corrected MFU {result.corrected_mfu_pct:.1f}% (") and f"of {H100}'s" in line
               for line in result.lines)


def test_live_monitor_takes_a_peak_and_a_dtype():
    inputs = load_comparison_inputs(None, "mixtral-8x7b", 1_048_576, peak=PeakOptions(tflops=400, dtype="fp8"))
    result = compare_progress(reading(60.0), inputs, None)
    assert (result.peak_flops_per_s, result.peak_dtype, result.peak_source) == (400e12, "fp8", "--peak-tflops")


def test_live_mfu_above_100_percent_is_flagged_with_the_gpu_nvml_sees():
    inputs = load_comparison_inputs(None, "gpt2", 524_288, peak=PeakOptions(gpu="NVIDIA GeForce RTX 3060"))
    result = compare_progress(reading(9.3), inputs, H100)
    assert result.corrected_mfu_pct > 100
    text = "\n".join(result.lines)
    assert "cannot be: no step runs faster than the GPU's peak" in text
    assert f"NVML sees '{H100}' here, whose peak is 989.5 TFLOP/s" in text


def test_live_model_must_be_a_preset_or_a_config():
    with pytest.raises(BaselineError, match="--model must be a preset"):
        load_comparison_inputs(None, "llama-9", None)


def test_another_frameworks_printed_mfu_is_not_explained_as_nanogpts():
    inputs = load_comparison_inputs(None, "llama-3-8b", 8 * 8192, peak=PeakOptions(gpu=H100))
    torchtitan = ProgressReading(source="train.log", format="torchtitan", iteration=40, seconds_per_iter=10.0,
                                 reported_mfu_pct=12.0, last_line="step: 40  loss: 3.1  tps: 6,554  mfu: 12.00%")
    result = compare_progress(torchtitan, inputs, None)
    text = "\n".join(result.lines)
    assert "312" not in text and "nanoGPT's mfu" not in text
    # 6·(8,030,261,248 − 128,256·4,096) + 12·32·32·128·8192 = 57,914,449,920 FLOP per token × 6,553.6 tokens/s
    # = 379.6 TFLOP/s, 38.4% of the H100's 989.5
    assert round(result.corrected_mfu_pct, 1) == 38.4
    assert ("The log's 12% and gputop's 38.4% differ: torchtitan's get_nparams_and_flops counts 6·N + 12·L·H·Q·T, "
            "attention over the whole T×T score matrix as gputop does, against torchtitan's get_peak_flops row for "
            "the device, so attention is not why;") in text
    assert "Megatron-LM half of it" not in text  # the convention is the format's, not a list said to every log


def test_a_printed_mfu_that_counts_the_causal_half_is_put_in_its_terms():
    # llm.c's gpt2_estimate_mfu: 6·N + 6·L·C·T, half of gputop's 12·L·H·Q·T attention term (C = H·Q).
    inputs = load_comparison_inputs(None, "gpt2", 8 * 64 * 1024, peak=PeakOptions(gpu=H100))
    llm_c = ProgressReading(source="train.log", format="llm_c", iteration=40, seconds_per_iter=1.0,
                            reported_mfu_pct=20.0, last_line="step   40/5000 | loss 3.1 | ... | 20.0% bf16 MFU")
    result = compare_progress(llm_c, inputs, None)
    shape = PRESETS["gpt2"]
    # N: wte 50304·768 + 12 layers × (12·768² + 2·768) + ln_f 768 (nanoGPT's GPT-2 124M, no wpe); L, H, Q, T
    six_n, attention = 6 * (50304 * 768 + 12 * (12 * 768 * 768 + 2 * 768) + 768), 12 * 12 * 12 * 64 * 1024
    assert family_of(shape).flops_per_token(shape) == six_n + attention
    theirs = result.corrected_mfu_pct * (six_n + attention / 2) / (six_n + attention)
    text = "\n".join(result.lines)
    assert (f"The log's 20% and gputop's {result.corrected_mfu_pct:.1f}% differ: llm.c's gpt2_estimate_mfu counts "
            "6·N + 6·L·H·Q·T, attention over the causal half of the score matrix (gputop counts the whole), "
            f"against llm.c's get_flops_promised for the device: counted that way gputop's is {theirs:.1f}%;") in text
    assert "; the log printed 20%, counting attention over the causal half, gputop the whole matrix." in text
