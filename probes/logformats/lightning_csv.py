"""PyTorch Lightning's CSVLogger file, ``lightning_logs/version_N/metrics.csv``: what Lightning writes when no
progress bar is (its bar is not drawn when stdout is not a terminal, and with no TensorBoard installed
``Trainer()``'s default logger is this one).

The file (lightning_fabric/loggers/csv_logs.py, ``_ExperimentWriter``; checked with pytorch-lightning 2.6) is a
header of the logged names, sorted (``epoch,step,train_loss,val_loss``), then one row per logged step
(``0,49,0.78,``), flushed every ``flush_logs_every_n_steps`` (100 by default). A row carries no time and means
nothing without its header, so ``parse`` (the registry's one-line interface) recognises the header, which says a
file is this format, and ``row`` reads a row against the header's names. Rows come in bursts at each flush: the
pace is how fast ``step`` moves between them (probes/sensors/progress.py times the sightings).
"""

from __future__ import annotations

import re

from probes.logformats.interface import FormatParser, ProgressLine
from probes.logformats.numbers import number

# Logged names as Lightning writes them: words, "/" and "." from prefixes, "-" from loggers' join characters.
_HEADER = re.compile(r"^[A-Za-z_][\w./-]*(?:,[A-Za-z_][\w./-]*)+$")
# The training loss under the names people log it by (self.log("train_loss"), on_step/on_epoch suffixes).
_LOSS_NAMES = ("train_loss", "train_loss_step", "loss", "train/loss")


def columns(text: str) -> tuple[str, ...] | None:
    """The header's names, when the line is a CSVLogger header (it always logs "step" and, from a Trainer,
    "epoch"); else None."""
    if not _HEADER.match(text):
        return None
    names = tuple(text.split(","))
    return names if "step" in names and "epoch" in names else None


def parse(text: str) -> ProgressLine | None:
    """The header line: this file is Lightning's metrics.csv (no step yet: rows are read by ``row``)."""
    return ProgressLine("lightning_csv") if columns(text) is not None else None


def row(names: tuple[str, ...], text: str) -> ProgressLine | None:
    """One row of a metrics.csv whose header is `names`: its step (the optimizer step), epoch and loss; None for a
    line that is not such a row (the header itself, a half-written row)."""
    values = text.split(",")  # logged values are numbers: no quoting to undo
    if len(values) != len(names):
        return None
    fields = dict(zip(names, values, strict=True))
    step = fields["step"].strip()
    if not step.isdigit():
        return None
    loss = next((value for name in _LOSS_NAMES if (value := number(fields.get(name))) is not None), None)
    return ProgressLine("lightning_csv", iteration=int(step), loss=loss, epoch=number(fields.get("epoch")))


FORMAT = FormatParser(name="lightning_csv", parse=parse)
