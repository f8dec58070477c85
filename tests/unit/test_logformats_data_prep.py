"""A tqdm bar is training progress only when it counts steps: data preparation's bars (litdata's optimize, Hugging
Face datasets' Map/Filter/Generating/Downloading, nanoGPT's prepare.py) drawn before training are no step counter
and no pace. The fixtures are drawn by tqdm itself with each library's own desc and unit
(tests/fixtures/logs/make_pace_logs.py; README.md cites the source of each)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from probes.logformats import FORMATS, parse_line, visible_text
from probes.sensors.progress import LogProgressProbe

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"


def fixture_pieces(name: str) -> list[str]:
    """Each state of each bar, and each line, as a terminal shows them."""
    text = (LOGS / name).read_text(encoding="utf-8")
    return [visible for piece in re.split(r"[\r\n]", text) if (visible := visible_text(piece))]


def data_prep_bars() -> list[str]:
    """Every bar state of tqdm.data_prep.log before its training bar (the last, with no description)."""
    return [piece for piece in fixture_pieces("tqdm.data_prep.log") if "|" in piece and not piece[0].isdigit()]


def test_the_fixture_holds_each_librarys_bars():
    descriptions = {piece.split(":")[0] for piece in data_prep_bars()}
    assert descriptions == {"Resolving data files", "Downloading data", "Downloading", "Generating train split",
                            "Loading dataset shards", "Map (num_proc=8)", "tokenizing the splits (num_proc=8)",
                            "Filter", "writing /data/openwebtext/train.bin", "Indexing progress"}


@pytest.mark.parametrize("piece", data_prep_bars(), ids=lambda piece: piece.split("|")[0])
def test_no_format_reads_a_data_preparation_bar(piece):
    assert [parser.name for parser in FORMATS if parser.parse(piece) is not None] == [], piece


def test_the_training_bar_after_them_is_read():
    training = [piece for piece in fixture_pieces("tqdm.data_prep.log") if piece[0].isdigit()]
    assert [parse_line(piece).iteration for piece in training] == [0, 1667, 3333, 5000]


def test_litdatas_progress_bar_is_not_litgpts_progress():
    """litgpt pretrain on TextFiles: litdata's optimize() draws "Progress: 100%|...| 1/1 [...]", then litgpt's own
    step lines follow. Only the step lines are read."""
    claims = {piece: parse_line(piece) for piece in fixture_pieces("litgpt.textfiles.log")}
    bars = [piece for piece in fixture_pieces("litgpt.textfiles.log") if piece.startswith("Progress:")]
    assert len(bars) == 4 and all(claims[piece] is None for piece in bars), bars  # 0/1 and 1/1, train and val
    assert [record.format for record in claims.values() if record is not None] == ["litgpt"] * 3


def test_the_probe_says_no_pace_until_training_prints(tmp_path):
    """While only data preparation has printed, no pace and no step; then the training's own."""
    text = (LOGS / "litgpt.textfiles.log").read_text(encoding="utf-8")
    log = tmp_path / "train.log"
    training = text.index("Epoch 1 |")
    log.write_text(text[:training], encoding="utf-8")
    probe = LogProgressProbe(1, str(log))
    before = probe.read()
    assert before.iteration is None and before.format is None, before
    assert before.no_pace.startswith("no pace: no step lines recognised yet"), before
    with log.open("a", encoding="utf-8") as out:
        out.write(text[training:])
    after = probe.read()
    assert (after.format, after.iteration) == ("litgpt", 3), after
    probe.close()


def test_the_probe_reads_the_training_bar_after_data_preparation(tmp_path):
    log = tmp_path / "train.log"
    shutil.copy(LOGS / "tqdm.data_prep.log", log)
    reading = LogProgressProbe(1, str(log)).read()
    assert (reading.format, reading.iteration, reading.seconds_per_iter) == ("tqdm", 5000, pytest.approx(1 / 1.92))


@pytest.mark.parametrize(("line", "read"), [
    # training bars: no description, or one a user wrote, in a step's units
    ("Training:  12%|█▏        | 120/1000 [00:30<03:40,  3.99it/s, loss=2.31]", True),
    ("gpt2-124M: 120it [00:30,  3.99it/s]", True),
    ("  5%|▌         | 50/1000 [00:25<07:55,  2.00step/s]", True),
    ("train:   5%|▌         | 50/1000 [00:25<07:55,  2.00batch/s]", True),
    # a datasets map under the user's own description (transformers' run_clm.py) counts examples
    ("Running tokenizer on dataset:  50%|█████     | 500/1000 [00:01<00:01, 500.00 examples/s]", False),
    ("Grouping texts in chunks of 1024: 100%|██████████| 10/10 [00:01<00:00, 9.12 examples/s]", False),
    # huggingface_hub's file download, described by the file's name, counts bytes (unit_scale)
    ("model.safetensors:  50%|█████     | 274M/548M [00:05<00:05, 54.8MB/s]", False),
    ("Fetching 4 files: 100%|██████████| 4/4 [00:10<00:00,  2.50s/it]", False),
    ("Loading checkpoint shards: 100%|██████████| 2/2 [00:03<00:00,  1.62s/it]", False),
    ("Tokenizing: 3.00kit [00:30, 100it/s]", False),  # a scaled counter is no step number either
    ("  5%|▌         | 5120/102400 [00:25<07:55, 204.80samples/s]", False),  # samples, not steps
])
def test_a_bar_is_training_progress_by_its_unit_and_description(line, read):
    record = parse_line(line)
    assert (record is not None and record.format == "tqdm") is read, record
