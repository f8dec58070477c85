"""The formats of programs that need a GPU, read from lines written with the programs' own f-strings
(tests/support/program_lines.py; fixtures tests/fixtures/logs/modded_nanogpt*.log, nanochat*.log, see their
README.md): modded-nanogpt's time per step worked out from its train_time with validation left out, nanochat's
dt, tok/sec and MFU kept; and the peak a framework with a table of its own (nanochat's and torchtitan's
get_peak_flops) divides by, named for the GPU and flagged where it is not that GPU's. Also: every format that
prints its own tokens/s says whose tokens they are."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from support.program_lines import NanochatRun, modded_nanogpt_log, modded_nanogpt_step, modded_nanogpt_val

from probes.frame import ProgressReading
from probes.logformats import FORMATS, LogReader, format_named, parse_line, visible_text
from probes.reference.baseline import PeakOptions, compare_progress, load_comparison_inputs
from probes.sensors.progress import LogProgressProbe

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def read_all(name: str) -> list:
    """Every record a LogReader makes of a fixture, in order (None for lines no format claims)."""
    reader = LogReader()
    return [reader.read(line) for line in (LOGS / name).read_text(encoding="utf-8").splitlines()]


# --- modded-nanogpt ----------------------------------------------------------------------------------------------


def test_modded_nanogpt_step_and_val_lines_from_its_f_strings():
    step = parse_line(modded_nanogpt_step(41, 1285, 4871.4))
    assert (step.format, step.iteration, step.total, step.loss, step.seconds_per_iter) == \
        ("modded_nanogpt", 42, 1285, None, None)  # alone, the line has no time per step: step_avg is a run's average
    val = parse_line(modded_nanogpt_val(250, 1285, 4.27912, 29180.2))
    assert (val.format, val.iteration, val.loss) == ("modded_nanogpt", 250, None)  # val_loss is no training loss
    old = parse_line("step:1/5100 train_loss:15.9932 train_time:23767ms step_avg:nanms")  # a 2024 record's line
    assert (old.format, old.iteration, old.loss) == ("modded_nanogpt", 1, 15.9932)


def test_modded_nanogpt_time_per_step_leaves_validation_out():
    # 60 steps of 116 ms with a 2.5 s validation every 25 steps: train_time stops over each validation.
    records = [record for record in read_all("modded_nanogpt.log") if record is not None]
    assert {r.format for r in records} == {"modded_nanogpt"}
    timed = [r for r in records if r.seconds_per_iter is not None]
    assert sorted({r.iteration for r in timed}) == list(range(1, 61))  # the val lines at 25 and 50 too
    assert all(r.seconds_per_iter == pytest.approx(0.116, abs=0.001) for r in timed), timed
    assert {r.derived_from for r in timed} == {"train_time between step lines"}


def test_modded_nanogpt_wall_time_with_validation_is_not_its_step_time():
    # The same run's step lines timed by the wall clock would include the validations: 25 steps + one 2.5 s
    # validation take 5.4 s, 0.216 s a step, where train_time says 0.116.
    lines = modded_nanogpt_log(0.116, 2.5, steps=60, val_loss_every=25)
    reader = LogReader()
    last = [record for line in lines if (record := reader.read(line)) is not None][-1]
    assert last.seconds_per_iter == pytest.approx(0.116, abs=0.001)


def test_modded_nanogpt_2024_record_restarting_its_clock():
    # Real lines of a 2024 record: train_time restarts after step 10 (23.8 s of compile before), and its lines
    # jump from step 20 to 123 here; the time per step is train_time over the last ten steps' lines.
    by_step = {r.iteration: r for r in read_all("modded_nanogpt.records2024.log") if r is not None}
    assert by_step[1].seconds_per_iter == pytest.approx(23.767 - 0.387)  # the first step compiles
    assert by_step[12].seconds_per_iter == pytest.approx(0.216 - 0.077)  # not the 25.859 s before the restart
    assert by_step[20].seconds_per_iter == pytest.approx((1.684 - 0.077) / 9)
    # the last 11 entries: steps 15..20, 123, 124, 125 (its val line's synchronized clock), 126, 127
    assert by_step[127].seconds_per_iter == pytest.approx((19.730 - 0.637) / (127 - 15))


def test_the_probe_reads_modded_nanogpts_pace(tmp_path):
    log = tmp_path / "train.log"
    shutil.copy(LOGS / "modded_nanogpt.log", log)
    reading = LogProgressProbe(1, str(log)).read()
    assert (reading.format, reading.iteration) == ("modded_nanogpt", 60)
    assert reading.seconds_per_iter == pytest.approx(0.116, abs=0.001)
    assert reading.derived_from == "train_time between step lines"


# --- nanochat ----------------------------------------------------------------------------------------------------


def h100_run() -> NanochatRun:
    return NanochatRun(num_iterations=21400, total_batch_size=524288, num_flops_per_token=3.0e9,
                       gpu_peak_flops=989e12, ddp_world_size=8)


def test_nanochat_base_train_line_keeps_its_dt_tok_per_sec_and_mfu():
    run = h100_run()
    line = run.step_line(42, 0.5012, train_loss_f=3.1)
    record = parse_line(line)
    assert (record.format, record.iteration, record.total) == ("nanochat", 42, 21400)
    assert record.seconds_per_iter == pytest.approx(0.5012)
    assert record.reported_tokens_per_s == int(524288 / 0.5012)  # every rank's tokens over dt
    mfu = 100 * 3.0e9 * 524288 / 0.5012 / (989e12 * 8)
    assert record.reported_mfu_pct == round(mfu, 2)
    assert format_named("nanochat").printed_tokens_per_s_over.startswith("every rank's tokens")


def test_nanochat_sft_line_and_its_cpu_mfu_of_zero():
    # chat_sft.py: no total, "mfu:"; on CPU the peak is infinity and the MFU prints 0.00: no measurement.
    run = NanochatRun(num_iterations=40, total_batch_size=4096, num_flops_per_token=2.1e7, gpu_peak_flops=float("inf"))
    record = parse_line(run.sft_step_line(3, 1.84, train_loss_f=2.0))
    assert (record.format, record.iteration, record.total) == ("nanochat", 3, None)
    assert (record.seconds_per_iter, record.reported_tokens_per_s) == (pytest.approx(1.84), int(4096 / 1.84))
    assert record.reported_mfu_pct is None


def test_the_probe_reads_nanochats_pace_and_mfu(tmp_path):
    log = tmp_path / "train.log"
    shutil.copy(LOGS / "nanochat.log", log)
    reading = LogProgressProbe(1, str(log)).read()
    last = parse_line((LOGS / "nanochat.log").read_text().splitlines()[-1])
    assert (reading.format, reading.iteration, reading.reported_mfu_pct) == ("nanochat", 20, last.reported_mfu_pct)
    assert reading.seconds_per_iter == pytest.approx(0.5, rel=0.01)


# --- the peak a framework's own table gives ----------------------------------------------------------------------


@pytest.mark.parametrize(("gpu", "nanochat", "torchtitan"), [
    ("NVIDIA H100 80GB HBM3", 989e12, 989e12), ("NVIDIA H100 PCIe", 756e12, 756e12),
    ("NVIDIA H100 NVL", 835e12, 835e12), ("NVIDIA A100-SXM4-80GB", 312e12, 312e12),
    ("NVIDIA H200", 989e12, 989e12), ("NVIDIA L40S", 362e12, None), ("NVIDIA L40", 121e12, None),
    ("NVIDIA H20", None, 148e12), ("NVIDIA GeForce RTX 4090", 165.2e12, None),
])
def test_each_frameworks_table_as_its_source_reads_it(gpu, nanochat, torchtitan):
    # nanochat/common.py lower-cases the name ("l4" is in "nvidia l40"); torchtitan/tools/utils.py does not (its
    # "l40s" row misses "NVIDIA L40S"); None: no row.
    for name, expected in (("nanochat", nanochat), ("torchtitan", torchtitan)):
        row = format_named(name).printed_mfu_peaks.row_for(gpu)
        assert (row.flops_per_s if row is not None else None) == expected, (name, gpu)


def test_a_row_that_is_the_gpus_peak_is_said_to_be():
    assert format_named("nanochat").mfu_peak_sentence("NVIDIA H100 80GB HBM3") == (
        "The log's MFU is against 989 TFLOP/s per GPU, nanochat's get_peak_flops row for the NVIDIA H100 80GB HBM3: "
        "the GPU's own bf16 dense peak.")


def test_a_row_meant_for_another_gpu_is_flagged_with_the_factor():
    assert format_named("nanochat").mfu_peak_sentence("NVIDIA L40") == (
        "The log's MFU is against 121 TFLOP/s per GPU, nanochat's get_peak_flops row for the NVIDIA L40, not this "
        "GPU's peak: its bf16 dense peak is 181.1 TFLOP/s in gputop's table, so the log's figure × 0.668 is its MFU "
        "on this GPU by the log's FLOP count.")


def test_a_gpu_not_in_the_table_is_flagged_as_each_framework_falls_back():
    assert format_named("nanochat").mfu_peak_sentence("NVIDIA A10G", printed_mfu=False) == (
        "The log's MFU: nanochat's get_peak_flops has no row for the NVIDIA A10G and divides by infinity, so its MFU "
        "prints 0.00; the GPU's bf16 dense peak is 70 TFLOP/s in gputop's table.")
    assert format_named("torchtitan").mfu_peak_sentence("NVIDIA L40S") == (
        "The log's MFU is against 312 TFLOP/s per GPU, torchtitan's get_peak_flops fallback for a GPU not in its "
        "table (an A100's; the NVIDIA L40S), not this GPU's peak: its bf16 dense peak is 362.1 TFLOP/s in gputop's "
        "table, so the log's figure × 0.862 is its MFU on this GPU by the log's FLOP count.")


def test_without_a_printed_mfu_only_its_absence_is_explained():
    nanochat = format_named("nanochat")
    assert nanochat.mfu_peak_sentence("NVIDIA H100 80GB HBM3", printed_mfu=False) is None
    assert nanochat.mfu_peak_sentence(None) is None and format_named("nanogpt").mfu_peak_sentence("NVIDIA H200") is None


def test_the_comparison_names_nanochats_peak_for_the_gpu():
    reading = ProgressReading(source="train.log", format="nanochat", iteration=42, seconds_per_iter=0.5,
                              reported_mfu_pct=39.67, last_line="step 00042/21400 (0.20%) | ...")
    named = load_comparison_inputs(None, "gpt2", 524288, peak=PeakOptions(gpu="NVIDIA L40"))
    flagged = ("The log's MFU is against 121 TFLOP/s per GPU, nanochat's get_peak_flops row for the NVIDIA L40, not "
               "this GPU's peak")
    assert any(line.startswith(flagged) for line in compare_progress(reading, named, None).lines)
    assert any(line.startswith(flagged) for line in compare_progress(reading, named, "NVIDIA H20").lines)  # --gpu wins
    # On an H20 (not in nanochat's table) it printed 0.00, read as no MFU: the comparison says why.
    on_h20 = compare_progress(dataclasses.replace(reading, reported_mfu_pct=None),
                              load_comparison_inputs(None, "gpt2", 524288), "NVIDIA H20")
    assert "The log's MFU: nanochat's get_peak_flops has no row for the NVIDIA H20 and divides by infinity, so its " \
           "MFU prints 0.00; the GPU's bf16 dense peak is 148 TFLOP/s in gputop's table." in on_h20.lines
    on_h100 = compare_progress(dataclasses.replace(reading, reported_mfu_pct=None),
                               load_comparison_inputs(None, "gpt2", 524288), "NVIDIA H100 80GB HBM3")
    assert not any("get_peak_flops" in line for line in on_h100.lines)  # no MFU printed, nothing to explain


# --- every format: a printed tokens/s says whose tokens ----------------------------------------------------------


@pytest.mark.parametrize("name", [parser.name for parser in FORMATS])
def test_a_format_that_prints_tokens_per_second_says_whose(name):
    parser = format_named(name)
    read = parser.reader() if parser.reader is not None else parser.parse
    lines = [visible for line in (LOGS / f"{name}.log").read_text(encoding="utf-8").splitlines()
             if (visible := visible_text(line))]
    printed = [r.reported_tokens_per_s for line in lines if (r := read(line)) is not None and r.reported_tokens_per_s]
    assert bool(printed) == (parser.printed_tokens_per_s_over is not None), name


def test_torchtitan_and_llm_c_keep_their_tokens_per_second():
    titan = [r for r in read_all("torchtitan.log") if r is not None and r.reported_tokens_per_s]
    assert [r.reported_tokens_per_s for r in titan][:2] == [1332, 8123]
    llm_c = [r.reported_tokens_per_s for r in read_all("llm_c.log") if r is not None and r.iteration is not None]
    assert llm_c[:4] == [163192, 1023180, 1023780, 163840]
