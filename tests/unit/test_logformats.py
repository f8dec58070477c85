"""probes.logformats: each format's parser on its real lines, and the registry walked so that a format without
its companions (a name in LogFormat, a fixture, a row in docs/logformats.md) or a fixture stolen by another
format fails here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from probes.logformats import FORMATS, LogFormat, format_named, parse_line, reported_format, visible_text

REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / "tests" / "fixtures" / "logs"
DOCS = REPO / "docs" / "logformats.md"
NAMES = [parser.name for parser in FORMATS]
NOISE = "noise.log"
FIXTURES = sorted(path.name for path in LOGS.glob("*.log"))


def segments(name: str) -> list[str]:
    """A fixture log split the way a terminal shows its updates (bars redraw with \\r), as parsers see lines."""
    text = (LOGS / name).read_text(encoding="utf-8")
    return [visible for piece in re.split(r"[\r\n]", text) if (visible := visible_text(piece))]


def owner(fixture: str) -> str:
    """``<name>.log`` and ``<name>.<variant>.log`` belong to format <name>."""
    return fixture.split(".")[0]


def parsed(name: str):
    return [(line, record) for line in segments(name) if (record := parse_line(line)) is not None]


# --- the registry ----------------------------------------------------------------------------------------


def test_every_name_in_the_literal_has_one_parser_and_no_parser_lacks_one():
    assert len(NAMES) == len(set(NAMES)), NAMES
    assert set(NAMES) == set(get_args(LogFormat))


def test_generic_is_tried_last():
    assert NAMES[-1] == "generic"  # it takes any step number with a time or a loss


def test_superseded_formats_are_other_registered_formats():
    for parser in FORMATS:
        assert set(parser.supersedes) <= set(NAMES) - {parser.name}, parser.name


@pytest.mark.parametrize("name", NAMES)
def test_every_format_has_a_fixture(name):
    assert (LOGS / f"{name}.log").is_file(), f"add tests/fixtures/logs/{name}.log: real lines of {name}"


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_fixture_belongs_to_a_format(fixture):
    assert fixture == NOISE or owner(fixture) in NAMES, f"{fixture} names no format in FORMATS"


@pytest.mark.parametrize("fixture", [name for name in FIXTURES if name != NOISE])
def test_fixture_is_claimed_by_its_own_format_only(fixture):
    """A line is *claimed* by the first format in FORMATS whose ``parse`` answers for it (what ``parse_line``
    returns). Every line of ``<name>.log`` that some format parses must be claimed by <name> itself or by a
    format <name> supersedes (those lines count as <name>'s: HF Trainer's tqdm bars), and the claiming parser
    must answer with its own name. So no format placed earlier steals one of the fixture's lines, and the
    fixture has at least one line that <name> itself claims."""
    name = owner(fixture)
    allowed = {name, *format_named(name).supersedes}
    claimed_by_own = 0
    for line in segments(fixture):
        answers = [(parser.name, record) for parser in FORMATS if (record := parser.parse(line)) is not None]
        if not answers:
            continue
        claimer, record = answers[0]
        assert record.format == claimer, f"{claimer}'s parser answered {record.format} for {line!r}"
        assert claimer in allowed, f"{fixture}: {line!r} is claimed by {claimer}, not {name}"
        claimed_by_own += claimer == name
    assert claimed_by_own, f"no line of {fixture} is claimed by {name}"


def test_noise_is_claimed_by_no_format():
    """Not just unclaimed: no format, early or late in FORMATS, parses any line of noise.log."""
    for line in segments(NOISE):
        assert [parser.name for parser in FORMATS if parser.parse(line) is not None] == [], line


def docs_rows() -> dict[str, list[str]]:
    """The table in docs/logformats.md: format name -> its cells (lines it reads, example, how tested)."""
    rows = {}
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 4 and re.fullmatch(r"`\w+`", cells[0]):
            rows[cells[0].strip("`")] = cells[1:]
    return rows


@pytest.mark.parametrize("name", NAMES)
def test_every_format_has_a_docs_row_whose_example_it_claims(name):
    rows = docs_rows()
    assert name in rows, f"add a row for {name} to docs/logformats.md"
    _, example, how_tested = rows[name]
    record = parse_line(example.strip("`"))
    assert record is not None and record.format == name, example
    assert f"{name}.log" in how_tested


def test_docs_table_has_no_row_without_a_format():
    assert set(docs_rows()) <= set(NAMES)


def printed_figures(parser) -> bool:
    """Whether the format's fixture log prints an MFU or an achieved FLOP/s of the framework's own, read the way
    LogReader reads it (a format with a reader needs its earlier lines)."""
    read = parser.reader() if parser.reader is not None else parser.parse
    records = [read(line) for line in segments(f"{parser.name}.log")]
    return any(record is not None and (record.reported_mfu_pct is not None
                                       or record.reported_tflops_per_gpu is not None) for record in records)


@pytest.mark.parametrize("name", NAMES)
def test_every_format_that_prints_an_mfu_says_how_it_counts_attention(name):
    """A job's own MFU (or achieved TFLOP/s) is never set beside gputop's without how its FLOPs count
    attention: the whole T×T score matrix (gputop's convention) or the causal half, or the model's own count.
    And a format that says so prints one in its fixture."""
    parser = format_named(name)
    counts = parser.printed_mfu_counts
    assert (counts is not None) == printed_figures(parser), (
        f"{name}: printed_mfu_counts must be set exactly when its log prints an MFU or TFLOP/s")
    if counts is not None:
        assert counts.attention in ("whole", "causal", None)
        assert counts.words().startswith(counts.by) and counts.formula in counts.words()


def test_each_frameworks_convention_is_its_source_code():
    """From each framework's own source: nanoGPT's estimate_mfu and torchtitan's get_nparams_and_flops count the
    whole matrix (12·L·H·Q·T); Megatron-LM's num_floating_point_operations (since v0.12) and llm.c's
    gpt2_estimate_mfu (6·N + 6·L·C·T) the causal half; Composer's SpeedMonitor the model's flops_per_batch."""
    conventions = {name: format_named(name).printed_mfu_counts.attention
                   for name in ("nanogpt", "torchtitan", "megatron", "llm_c", "composer")}
    assert conventions == {"nanogpt": "whole", "torchtitan": "whole", "megatron": "causal", "llm_c": "causal",
                           "composer": None}
    assert "as gputop does" in format_named("torchtitan").printed_mfu_counts.words()
    assert "gputop counts the whole" in format_named("llm_c").printed_mfu_counts.words()


def test_a_superseding_format_takes_lines_only_once_seen():
    assert reported_format("tqdm", set()) == "tqdm"
    assert reported_format("tqdm", {"tqdm", "hf_trainer"}) == "hf_trainer"
    assert reported_format("generic", {"hf_trainer"}) == "generic"


# --- nanogpt -----------------------------------------------------------------------------------------------


def test_nanogpt_iteration_line():
    record = parse_line("iter 10: loss 3.2451, time 21034.12ms, mfu 164.21%")
    assert record.format == "nanogpt"
    assert record.iteration == 10
    assert record.loss == pytest.approx(3.2451)
    assert record.seconds_per_iter == pytest.approx(21.03412)
    assert record.reported_mfu_pct == pytest.approx(164.21)


def test_nanogpt_placeholder_mfu_and_eval_line():
    early = parse_line("iter 0: loss 10.9876, time 98432.55ms, mfu -100.00%")
    assert early.reported_mfu_pct is None  # nanoGPT's "not measured yet"
    assert early.seconds_per_iter == pytest.approx(98.43255)
    evaluation = parse_line("step 2000: train loss 2.8512, val loss 2.9034")
    assert (evaluation.format, evaluation.iteration, evaluation.seconds_per_iter) == ("nanogpt", 2000, None)


def test_nanogpt_fixture_every_iter_line_parses():
    records = parsed("nanogpt.log")
    iters = [r for _, r in records if r.seconds_per_iter is not None]
    assert [r.iteration for r in iters] == list(range(11))
    assert all(r.format == "nanogpt" for _, r in records)
    assert [r.reported_mfu_pct is not None for r in iters] == [False] * 5 + [True] * 6


# --- hf_trainer --------------------------------------------------------------------------------------------


def test_hf_trainer_log_dict():
    record = parse_line("{'loss': 2.1, 'grad_norm': 1.2345, 'learning_rate': 4.75e-05, 'epoch': 0.5}")
    assert record.format == "hf_trainer"
    assert record.loss == pytest.approx(2.1)
    assert record.epoch == pytest.approx(0.5)
    assert (record.seconds_per_iter, record.derived_from) == (None, None)
    summary = parse_line("{'train_runtime': 500.0, 'train_samples_per_second': 16.0, "
                         "'train_steps_per_second': 2.0, 'train_loss': 2.2, 'epoch': 1.0}")
    assert summary.seconds_per_iter == pytest.approx(0.5)
    assert summary.derived_from == "train_steps_per_second"  # worked out, not printed: and it says from what
    assert summary.loss == pytest.approx(2.2)


# --- tqdm --------------------------------------------------------------------------------------------------


def test_tqdm_rates_both_ways():
    fast = parse_line("  5%|▌         | 50/1000 [00:25<07:55,  2.00it/s]")
    assert (fast.format, fast.iteration, fast.total) == ("tqdm", 50, 1000)
    assert fast.seconds_per_iter == pytest.approx(0.5)
    slow = parse_line("  1%|          | 2/200 [00:05<08:15,  2.50s/it]")
    assert slow.seconds_per_iter == pytest.approx(2.5)
    starting = parse_line("  0%|          | 0/1000 [00:00<?, ?it/s]")
    assert (starting.iteration, starting.seconds_per_iter) == (0, None)
    unbounded = parse_line("120it [00:30,  3.99it/s]")
    assert (unbounded.iteration, unbounded.total) == (120, None)


# --- lightning ---------------------------------------------------------------------------------------------


def test_lightning_bars():
    record = parse_line("Epoch 0:  12%|█▏        | 120/1000 [00:30<03:40, 3.99it/s, v_num=0, loss=2.31]")
    assert record.format == "lightning"
    assert record.iteration == 120
    assert record.loss == pytest.approx(2.31)
    assert record.seconds_per_iter == pytest.approx(1 / 3.99)
    second_epoch = parse_line("Epoch 1:  12%|█▏        | 120/1000 [00:30<03:40, 3.99it/s, v_num=0, loss=2.01]")
    assert second_epoch.iteration == 1120  # keeps counting across epochs
    assert second_epoch.total is None  # so the epoch's bar length bounds nothing
    rich = parse_line("Epoch 0/9  ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 120/1000 0:00:30 • 0:03:40 3.99it/s "
                      "v_num: 0 loss: 2.31")
    assert (rich.format, rich.iteration) == ("lightning", 120)
    assert rich.seconds_per_iter == pytest.approx(1 / 3.99)
    assert parse_line("Validation DataLoader 0:  40%|████      | 20/50 [00:01<00:01, 15.20it/s]") is None


# --- generic -----------------------------------------------------------------------------------------------


def test_generic_lines():
    record = parse_line("2024-05-01 12:00:10,400 INFO train.py: step 120/5000 | loss 2.2876 | step_time 520ms")
    assert (record.format, record.iteration, record.total) == ("generic", 120, 5000)
    assert record.seconds_per_iter == pytest.approx(0.52)
    assert record.timestamp is not None
    assert parse_line("global_step=300 loss=1.95 time=0.25").seconds_per_iter == pytest.approx(0.25)


def test_noise_is_ignored():
    assert parsed(NOISE) == []
    assert parse_line("") is None
    assert parse_line("step 5") is None  # a bare step number is too common in ordinary messages
