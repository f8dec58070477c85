"""probes.reference.gpt_probe and `gputop probe`: the reference GPT trains on the CPU (tiny preset), reports what it
measured, fails cleanly on bad input, out-of-memory and a missing torch, and keeps torch out of imports."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from support.requires import needs_torch

from probes.models import PRESETS
from probes.models.convention import ATTENTION_CONVENTION
from probes.models.gpt2 import PRESETS as GPT_PRESETS
from probes.models.gpt2 import GptShape, count_params, flops_per_token
from probes.reference import gpt_probe
from probes.reference.gpt_probe import (
    ProbeConfig,
    ProbeInputError,
    ProbeOutOfMemory,
    largest_fitting_batch,
    run_probe,
)
from tui import cli

REPO = Path(__file__).resolve().parents[2]
TINY = PRESETS["tiny"]
CLI = "import sys; from tui.cli import main; main(sys.argv[1:])"


@needs_torch
def test_tiny_probe_trains_on_cpu():
    messages = []
    result = run_probe(ProbeConfig(TINY, "tiny", batch_size=8, steps=4, warmup=2, device="cpu",
                                   peak_tflops=0.001), say=messages.append)
    assert len(result.losses) == 6 and all(math.isfinite(loss) for loss in result.losses)
    assert result.losses[0] == pytest.approx(math.log(TINY.vocab_size), rel=0.05)  # untrained: uniform
    assert result.losses[-1] < result.losses[0] - 0.1  # it learns the fixed batch
    assert all(later < earlier for earlier, later in zip(result.losses, result.losses[1:], strict=False))
    assert (result.device, result.dtype, result.timing) == ("cpu", "fp32", "time.perf_counter")
    assert result.params == count_params(TINY)
    assert result.flops_per_token == flops_per_token(TINY)
    assert result.tokens_per_step == result.tokens_per_iter == 8 * TINY.block_size
    assert result.step_seconds_min <= result.step_seconds <= result.step_seconds_max
    # Issue 38, item 13: with one micro-batch an iteration the iteration is the step's own median, not the sum of
    # its parts' medians (which differ: "step time 0.6789 s median" beside "iteration 0.667 s").
    assert result.iter_seconds == result.step_seconds
    assert result.achieved_flops_per_s == pytest.approx(result.flops_per_token * result.tokens_per_s)
    assert (result.peak_source, result.peak_flops_per_s) == ("--peak-tflops", 1e9)
    assert result.mfu == pytest.approx(result.achieved_flops_per_s / 1e9)
    assert result.peak_memory_bytes is None and result.compile_seconds is None
    assert any("timing 4 steps" in m for m in messages)


@needs_torch
def test_grad_accum_predicts_the_iteration():
    result = run_probe(ProbeConfig(TINY, "tiny", batch_size=2, grad_accum=8, steps=2, warmup=1, device="cpu"))
    assert result.tokens_per_iter == 8 * result.tokens_per_step
    assert result.iter_seconds == pytest.approx(8 * result.fwd_bwd_seconds + result.optimizer_seconds)
    assert result.mfu is None and "no CPU peak" in result.peak_source


@needs_torch
def test_module_matches_the_flop_formula_for_every_preset():
    import torch

    for shape in [*GPT_PRESETS.values(), GptShape(3, 4, 32, 16, 100, bias=True)]:
        with torch.device("meta"):  # no memory: gpt2-xl has 1.5B parameters
            model = gpt_probe.gpt_class()(shape)
        assert model.num_params() == count_params(shape)
        assert model.num_params(non_embedding=False) == count_params(shape, include_position_embeddings=True)


def test_largest_fitting_batch_is_a_binary_search():
    tried = []

    def fits(batch):
        tried.append(batch)
        return batch <= 23

    assert largest_fitting_batch(fits, 64) == 23
    assert len(tried) <= 6
    assert largest_fitting_batch(lambda batch: False, 64) == 0
    assert largest_fitting_batch(lambda batch: True, 64) == 63


@needs_torch
def test_out_of_memory_reports_the_largest_batch(monkeypatch):
    """An allocator failure above batch 5 (as CUDA raises it) ends in a message, not a traceback."""
    import torch

    real_step = gpt_probe._Trainer.step

    def step(self, marks=None):
        if self.inputs.shape[0] > 5:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_step(self, marks)

    monkeypatch.setattr(gpt_probe._Trainer, "step", step)
    with pytest.raises(ProbeOutOfMemory) as caught:
        run_probe(ProbeConfig(TINY, "tiny", batch_size=16, steps=1, warmup=1, device="cpu"))
    assert caught.value.largest_fitting_batch == 5
    assert "largest batch that fit is 5" in str(caught.value)
    assert "\n" not in str(caught.value)


@needs_torch
def test_a_batch_fits_only_if_its_second_step_fits(monkeypatch):
    """AdamW's state appears at the end of the first step: a batch whose second step runs out of memory
    (as llama-3-8b's did on an H100) must not be offered as the one that fits."""
    import torch

    real_step = gpt_probe._Trainer.step
    steps_taken: dict[int, int] = {}

    def step(self, marks=None):
        batch = self.inputs.shape[0]
        steps_taken[id(self)] = steps_taken.get(id(self), 0) + 1
        if batch > 5 or (batch > 3 and steps_taken[id(self)] >= 2):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_step(self, marks)

    monkeypatch.setattr(gpt_probe._Trainer, "step", step)
    with pytest.raises(ProbeOutOfMemory) as caught:
        run_probe(ProbeConfig(TINY, "tiny", batch_size=16, steps=1, warmup=1, device="cpu"))
    assert caught.value.largest_fitting_batch == 3


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (ProbeConfig(TINY, dtype="fp16", device="cpu"), "fp16 needs a CUDA GPU"),
        (ProbeConfig(TINY, device="tpu"), "--device must be"),
        (ProbeConfig(GptShape(2, 3, 64, 16, 100)), "multiple of n-head"),
        (ProbeConfig(TINY, warmup=0), "--warmup must be at least 1"),
    ],
)
@needs_torch
def test_bad_config_raises_input_error(config, message):
    with pytest.raises(ProbeInputError, match=message):
        run_probe(config)


def run_cli(argv, capsys):
    code = cli.run(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@needs_torch
def test_cli_asks_for_cuda_on_a_cpu_machine(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, out, err = run_cli(["probe", "--model", "tiny", "--device", "cuda"], capsys)
    assert code == 2 and out == ""
    assert err.startswith("gputop: --device cuda asked for, but torch sees no CUDA GPU")
    assert err.count("\n") == 1


@needs_torch
def test_cli_text_report(capsys):
    code, out, _ = run_cli(["probe", "--model", "tiny", "--steps", "2", "--warmup", "1", "--device", "cpu",
                            "--n-layer", "1"], capsys)
    assert code == 0
    assert "1 layers" in out
    for label in ("FLOP per token", "step time", "throughput", "MFU             n/a", "loss"):
        assert label in out
    # the formula line is followed by the convention it counts attention by
    assert f"= 6·N + 12·L·H·Q·T = 6·{count_params(GptShape(1, 2, 64, 64, 256)):,} + 12·1·2·32·64\nattention       " \
           f"{ATTENTION_CONVENTION}\n" in out
