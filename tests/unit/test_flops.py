"""probes.models.gpt2 and probes.models.mfu, and `gputop mfu`: counts against hand-computed values and the
nanoGPT/H200 case end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probes.logformats import format_named
from probes.models import PRESETS
from probes.models.convention import ATTENTION_CONVENTION
from probes.models.gpt2 import (
    GptShape,
    count_params,
    explain_nanogpt_mfu,
    flops_per_token,
    formula_with_values,
)
from probes.models.mfu import estimate_mfu
from probes.models.peaks import peak_flops
from tui import cli

REPO = Path(__file__).resolve().parents[2]
XL = PRESETS["gpt2-xl"]
CASE_ARGS = ["mfu", "--model", "gpt2-xl", "--tokens-per-iter", "1048576", "--iter-time", "21",
             "--gpu", "NVIDIA H200"]


def test_gpt2_xl_parameters_by_hand():
    # per layer: 12·d² (attention 4·d², MLP 8·d²) + 2·d (two LayerNorm weights); wte V·d; ln_f d
    d, layers, vocab = 1600, 48, 50304
    by_hand = layers * (12 * d * d + 2 * d) + vocab * d + d
    assert by_hand == 1_555_201_600
    assert count_params(XL) == 1_555_201_600
    assert count_params(XL, include_position_embeddings=True) == 1_555_201_600 + 1024 * 1600


def test_gpt2_xl_flops_per_token_by_hand():
    attention = 12 * 48 * 25 * 64 * 1024  # 12·L·H·Q·T
    assert flops_per_token(XL) == 6 * 1_555_201_600 + attention == 10_274_928_000
    assert flops_per_token(XL) == pytest.approx(1.027e10, rel=1e-3)
    assert formula_with_values(XL) == "6·N + 12·L·H·Q·T = 6·1,555,201,600 + 12·48·25·64·1024"


def test_gpt2_small_matches_nanogpt_printout():
    # nanoGPT prints "number of parameters: 123.59M" for its gpt2 config (vocab 50304, no bias)
    assert count_params(PRESETS["gpt2"]) == 123_587_328


def test_bias_adds_every_bias_vector():
    d, layers = 32, 3
    plain, biased = GptShape(layers, 4, d, 16, 100), GptShape(layers, 4, d, 16, 100, bias=True)
    per_layer_biases = 2 * d + 3 * d + d + 4 * d + d  # two LayerNorms, c_attn, c_proj, c_fc, mlp c_proj
    assert count_params(biased) - count_params(plain) == layers * per_layer_biases + d  # + ln_f


def test_shape_problems():
    assert GptShape(2, 3, 64, 16, 100).problem() == "n-embd (64) must be a multiple of n-head (3)"
    assert "n-layer" in GptShape(0, 2, 64, 16, 100).problem()
    assert PRESETS["gpt2-xl"].problem() is None


def test_the_h200_case():
    estimate = estimate_mfu(XL, 1_048_576, 21.0, peak_flops("NVIDIA H200", "bf16"))
    assert estimate.flops_per_iter == pytest.approx(1.0774e16, rel=1e-4)
    assert estimate.achieved_flops_per_s == pytest.approx(513.05e12, rel=1e-4)
    assert round(estimate.mfu * 100) == 52
    lines = explain_nanogpt_mfu(164, estimate, "NVIDIA H200")
    text = "\n".join(lines)
    assert "312 TFLOP/s" in text and "A100" in text
    assert "511.7 TFLOP/s" in text  # 164% × 312
    assert "51.7% MFU" in text  # 511.7 / 989.5
    assert "cannot be" in text  # above 100% is impossible
    assert "differ" not in text  # nanoGPT's number and ours agree within 10%


def test_explanation_says_nanogpts_count_is_gputops():
    # nanoGPT's estimate_mfu: 6·N + 12·L·H·Q·T, the whole score matrix; gputop counts the same, so only the
    # peak it divides by differs. The words are the nanogpt log format's, not a list of its own.
    counts = format_named("nanogpt").printed_mfu_counts
    assert (counts.formula, counts.attention) == ("6·N + 12·L·H·Q·T", "whole")
    estimate = estimate_mfu(XL, 1_048_576, 21.0, peak_flops("NVIDIA H200", "bf16"))
    text = "\n".join(explain_nanogpt_mfu(164, estimate, "NVIDIA H200"))
    assert counts.words() in text
    assert "nanoGPT's estimate_mfu counts 6·N + 12·L·H·Q·T" in text and "as gputop does" in text


def test_mfu_command_states_how_attention_is_counted(capsys):
    code, out, _ = run_cli(CASE_ARGS, capsys)
    assert code == 0
    lines = out.splitlines()
    formula = next(i for i, line in enumerate(lines) if line.startswith("FLOP per token"))
    assert lines[formula].endswith("6·N + 12·L·H·Q·T = 6·1,555,201,600 + 12·48·25·64·1024")
    assert lines[formula + 1] == f"{'attention':<15} {ATTENTION_CONVENTION}"
    assert len(lines[formula + 1]) <= 80


def test_explanation_flags_a_mismatch_and_missing_peak():
    estimate = estimate_mfu(XL, 1_048_576, 42.0, None)
    text = "\n".join(explain_nanogpt_mfu(164, estimate, None))
    assert "--peak-tflops" in text
    assert "differ by" in text


def run_cli(argv, capsys):
    code = cli.run(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_mfu_command_the_case(capsys):
    code, out, err = run_cli([*CASE_ARGS, "--nanogpt-mfu", "164"], capsys)
    assert code == 0 and err == ""
    assert "513.0 TFLOP/s" in out
    assert "MFU             51.8%" in out
    assert "989.5 TFLOP/s bf16" in out
    assert "nanoGPT's 164%" in out and "312 TFLOP/s" in out


def test_mfu_command_json(capsys):
    code, out, _ = run_cli([*CASE_ARGS, "--nanogpt-mfu", "164", "--json"], capsys)
    document = json.loads(out)
    assert code == 0
    assert document["params"] == 1_555_201_600
    assert document["flops_per_token"] == 10_274_928_000
    assert round(document["mfu"] * 100) == 52
    assert document["nanogpt"]["implied_flops_per_s"] == pytest.approx(164 / 100 * 312e12)
    assert round(document["nanogpt"]["mfu_against_peak"] * 100) == 52


def test_mfu_command_from_batch_and_accum(capsys):
    code, out, _ = run_cli(["mfu", "--model", "gpt2-xl", "--batch-size", "16", "--grad-accum", "64",
                            "--iter-time", "21", "--peak-tflops", "989.5"], capsys)
    assert code == 0
    assert "1,048,576 tokens" in out and "51.8%" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["mfu", "--model", "gpt2-xl", "--iter-time", "21"], "--tokens-per-iter"),
        ([*CASE_ARGS[:-1], "NVIDIA Foo 9000"], "not in gputop's peak table; pass --peak-tflops"),
        (["mfu", "--model", "gpt2", "--tokens-per-iter", "1", "--iter-time", "1", "--gpu", "Tesla T4"],
         "no bf16 peak"),
        (["mfu", "--model", "custom", "--n-layer", "2", "--tokens-per-iter", "1", "--iter-time", "1"],
         "--model custom needs --n-head, --n-embd"),
        (["mfu", "--tokens-per-iter", "1", "--iter-time", "1"], "--model is required"),
        (["mfu", "--model", "gpt2", "--n-head", "7", "--tokens-per-iter", "1", "--iter-time", "1"],
         "multiple of n-head"),
    ],
)
def test_mfu_bad_input_is_one_line(capsys, argv, message):
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err
