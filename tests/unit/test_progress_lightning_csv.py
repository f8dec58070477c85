"""Lightning's CSVLogger metrics.csv: the format on the file a real Trainer wrote (tests/fixtures/logs/
lightning_csv.log), and the progress probe finding the file in a process's working directory and timing its step
as the real CSVLogger flushes rows, rewrites its header, and while stdout shows nothing."""

from __future__ import annotations

import pytest
from support.paths import REPO

from probes.logformats import lightning_csv, parse_line

FIXTURE = REPO / "tests" / "fixtures" / "logs" / "lightning_csv.log"


def test_rows_are_read_against_their_header():
    header, *rows = FIXTURE.read_text().splitlines()
    names = lightning_csv.columns(header)
    assert names == ("epoch", "step", "train_loss", "val_loss")
    assert parse_line(header).format == "lightning_csv"
    records = [lightning_csv.row(names, line) for line in rows]
    assert [r.iteration for r in records] == [49, 99, 99, 149, 199, 199, 249]
    assert records[0].loss == pytest.approx(0.7809491753578186) and records[0].epoch == 0
    assert records[2].loss is None  # a validation row: no training loss
    assert lightning_csv.row(names, header) is None and lightning_csv.row(names, "1,99,0.5") is None
    assert lightning_csv.columns("step,loss") is None  # no epoch: not a Trainer's CSVLogger
