"""The throughput a framework prints about itself, beside gputop's: Megatron-LM's achieved TFLOP/s per GPU
(``--log-throughput``; not an MFU, so set beside gputop's achieved FLOP/s) and Composer's SpeedMonitor MFU (a
fraction, against Composer's own peak table): parsed from their real lines (tests/fixtures/logs/), carried by
the progress probe, compared in the pace's sentences with the reason when they differ, and in pace_line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from probes.compare import load_run
from probes.diagnosis.shown import pace_line
from probes.frame import ProgressReading
from probes.logformats import format_named, parse_line
from probes.logformats.composer import reader as composer_reader
from probes.models import PRESETS, family_of
from probes.reference.baseline import PeakOptions, compare_progress, load_comparison_inputs
from probes.sensors.progress import LogProgressProbe
from probes.view import Pace
from tui.panes.verdict import pace_text

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
H100 = "NVIDIA H100 80GB HBM3"
LLAMA = PRESETS["llama-3-8b"]
TOKENS = 4 * 8192  # one GPU's share of an iteration
SECONDS = 2.0
GPUTOP_TFLOPS = family_of(LLAMA).flops_per_token(LLAMA) * TOKENS / SECONDS / 1e12
# Megatron-LM (since v0.12) counts the causal half of the score matrix: gputop's count less half its attention
# term, 12·L·H·Q·T / 2 = 6·32·32·128·8192 FLOP per token. The same run's achieved TFLOP/s, counted Megatron's way:
MEGATRON_TFLOPS = ((family_of(LLAMA).flops_per_token(LLAMA) - 6 * 32 * 32 * 128 * 8192) * TOKENS / SECONDS / 1e12)


def test_megatron_line_carries_its_tflops_per_gpu():
    line = next(text for text in (LOGS / "megatron.log").read_text().splitlines() if "iteration        3/" in text)
    record = parse_line(line.strip())
    assert (record.format, record.iteration, record.reported_tflops_per_gpu) == ("megatron", 3, 118.3)
    assert record.reported_mfu_pct is None  # Megatron prints no MFU
    without = line.replace("throughput per GPU (TFLOP/s/GPU): 118.3 | ", "")  # no --log-throughput
    assert parse_line(without.strip()).reported_tflops_per_gpu is None


def test_composer_block_carries_its_mfu_as_a_percentage():
    read = composer_reader()
    records = [read(line.strip()) for line in (LOGS / "composer.log").read_text().splitlines() if line.strip()]
    mfus = [(r.iteration, r.reported_mfu_pct) for r in records if r is not None and r.reported_mfu_pct is not None]
    assert mfus == [(18, pytest.approx(43.14))]
    assert read("Train throughput/device/mfu: 0.4314") is None  # outside a block it means nothing


@pytest.mark.parametrize(("name", "mfu", "tflops"), [("megatron.log", None, 118.3), ("composer.log", 43.14, None)])
def test_the_probe_passes_them_on(tmp_path, name, mfu, tflops):
    log = tmp_path / name
    shutil.copy(LOGS / name, log)
    reading = LogProgressProbe(1, str(log)).read()
    assert (reading.reported_mfu_pct, reading.reported_tflops_per_gpu) == (mfu, tflops)


def megatron(printed_tflops: float) -> ProgressReading:
    return ProgressReading(source="train.log", format="megatron", iteration=40, seconds_per_iter=SECONDS,
                           reported_tflops_per_gpu=printed_tflops, last_line="iteration 40/ 500 | ...")


def inputs(tokens: int | None = TOKENS):
    return load_comparison_inputs(None, "llama-3-8b", tokens, peak=PeakOptions(gpu=H100))


def test_megatron_tflops_that_agree_are_said_to():
    # Megatron's figure is compared with gputop's counted Megatron's way, and gputop's own count is said beside it.
    printed = round(MEGATRON_TFLOPS * 1.02, 1)
    result = compare_progress(megatron(printed), inputs(), None)
    assert result.reported_tflops_per_gpu == printed
    assert "causal half" in format_named("megatron").printed_tflops_counts
    assert result.lines[-1] == (
        f"The log's {printed:g} TFLOP/s per GPU is achieved FLOP/s, not an MFU "
        f"({format_named('megatron').printed_tflops_counts}): it agrees with gputop's {MEGATRON_TFLOPS:.1f} TFLOP/s "
        f"counted that way ({GPUTOP_TFLOPS:.1f} TFLOP/s over the whole score matrix, gputop's convention).")


def test_megatron_tflops_of_one_gpu_against_the_whole_jobs_tokens_names_the_gpus():
    result = compare_progress(megatron(round(MEGATRON_TFLOPS / 8, 1)), inputs(), None)
    assert "about 8 GPUs' worth" in result.lines[-1]
    assert f"the {TOKENS:,} tokens per iteration given are the whole job's" in result.lines[-1]


def test_megatron_tflops_far_from_gputops_say_what_to_check():
    result = compare_progress(megatron(round(MEGATRON_TFLOPS / 2.6, 1)), inputs(), None)
    assert result.lines[-1].endswith(f"is 2.6× as much; check the shape and the {TOKENS:,} tokens per iteration "
                                     "given to gputop.")


def test_megatron_tflops_without_tokens_ask_for_them():
    result = compare_progress(megatron(402.1), inputs(None), None)
    assert result.lines[-1].startswith("The log's 402.1 TFLOP/s per GPU is achieved FLOP/s, not an MFU")
    assert result.lines[-1].endswith("pass --model and --tokens-per-iter for gputop's own figure.")


def composer(printed_mfu_pct: float) -> ProgressReading:
    return ProgressReading(source="train.log", format="composer", iteration=18, seconds_per_iter=SECONDS,
                           reported_mfu_pct=printed_mfu_pct, last_line="Train throughput/device/mfu: 0.4314")


def test_composer_mfu_that_differs_names_composers_peak_table():
    result = compare_progress(composer(43.14), inputs(), None)
    ours = result.corrected_mfu_pct
    assert not 0.8 <= 43.14 / ours <= 1.25
    # Composer counts the model's own flops_per_batch: said, with what llm-foundry's MPT counts, never a convention
    # gputop cannot know for this model.
    assert any(line.startswith(f"The log's 43.14% and gputop's {ours:.1f}% differ: Composer's SpeedMonitor counts "
                               "the model's flops_per_batch, attention as the model counts it (llm-foundry's MPT: the "
                               "whole T×T score matrix, as gputop does), against Composer's peak for the device and "
                               "precision (989.5 TFLOP/s for an H100 SXM or H200 in bf16);")
               for line in result.lines), result.lines
    assert "the log printed 43%, counting the model's flops_per_batch." in result.lines[2]


def pace_of(reading: ProgressReading) -> Pace:
    compared = compare_progress(reading, inputs(), None)
    return Pace(iteration=reading.iteration, seconds_per_iter=reading.seconds_per_iter,
                reported_mfu_pct=reading.reported_mfu_pct, reported_tflops_per_gpu=reading.reported_tflops_per_gpu,
                comparison=compared, gpu_name=H100, format=reading.format, source="train.log")


def test_pace_line_sets_megatrons_tflops_beside_gputops_achieved():
    pace = pace_of(megatron(round(MEGATRON_TFLOPS, 1)))
    mfu = pace.comparison.corrected_mfu_pct
    assert pace_line(pace) == (f"2.0 s/iter = {mfu:.0f}% MFU on the {H100}; {GPUTOP_TFLOPS:.1f} TFLOP/s achieved, "
                               f"the log's {round(MEGATRON_TFLOPS, 1):g} TFLOP/s per GPU, counting attention over "
                               "the causal half, gputop the whole matrix")
    assert f"(log {round(MEGATRON_TFLOPS, 1):g} TFLOP/s/GPU)" in pace_text(pace).plain


def test_pace_line_says_what_composers_mfu_is_against():
    pace = pace_of(composer(43.14))
    mfu = pace.comparison.corrected_mfu_pct
    assert pace_line(pace) == (f"2.0 s/iter = {mfu:.0f}% MFU on the {H100}; the log's 43% is against Composer's "
                               "peak for the device and precision (989.5 TFLOP/s for an H100 SXM or H200 in bf16)")


def test_compare_takes_composers_mfu_from_its_own_line(tmp_path):
    run = load_run(str(LOGS / "composer.log"), "A")
    assert run.mfu_pct == pytest.approx(43.14)
    assert run.mfu_from.startswith("as the job printed it, against Composer's peak for the device and precision")


def test_compare_says_llm_c_counts_the_causal_half():
    # llm.c's gpt2_estimate_mfu counts 6·N + 6·L·C·T: half of gputop's attention term, said beside its figure.
    run = load_run(str(LOGS / "llm_c.log"), "A")
    assert run.mfu_pct is not None
    assert run.mfu_from == ("as the job printed it, against llm.c's get_flops_promised for the device, counting "
                            "attention over the causal half, gputop the whole matrix")
