"""PyTorch Lightning's training bar: its tqdm bar (``Epoch 0:  12%|...| 120/1000 [00:30<03:40, 3.99it/s, ...]``)
and its RichProgressBar (``Epoch 0/9  ━━━ 120/1000 0:00:30 • 0:03:40 3.99it/s ...``). Lightning restarts the bar
every epoch; the iteration is counted across epochs (epoch × batches per epoch + batch) so it keeps growing.
Its validation bars do not start with ``Epoch`` and are not taken."""

from __future__ import annotations

import re

from probes.logformats import tqdm
from probes.logformats.interface import FormatParser, ProgressLine
from probes.logformats.numbers import seconds_per_iter

_TQDM_EPOCH = re.compile(r"^Epoch (?P<epoch>\d+):")
_RICH_BAR = re.compile(
    r"^Epoch (?P<epoch>\d+)(?:/\d+)?\s+[━╸╺─\- ]*\s*(?P<n>\d+)/(?P<total>\d+)\s+[\d:]+\s*•\s*[\d:\-]+"
    r"\s+(?P<rate>\d+\.?\d*)\s*(?P<unit>it/s|s/it)"
)


def parse(text: str) -> ProgressLine | None:
    # total stays None: the iteration runs on past each epoch's bar, so the bar's length bounds nothing.
    rich = _RICH_BAR.search(text)
    if rich:
        epoch, n, per_epoch = int(rich["epoch"]), int(rich["n"]), int(rich["total"])
        return ProgressLine("lightning", iteration=epoch * per_epoch + n, epoch=float(epoch),
                            seconds_per_iter=seconds_per_iter(rich["rate"], rich["unit"]),
                            loss=tqdm.postfix_loss(text[rich.end():]))
    epoch_bar = _TQDM_EPOCH.match(text)
    bar = tqdm.BAR.search(text) if epoch_bar else None
    if not epoch_bar or not bar:
        return None
    epoch, n = int(epoch_bar["epoch"]), int(bar["n"])
    bar_total = int(bar["total"]) if bar["total"] else None
    return ProgressLine("lightning", iteration=epoch * bar_total + n if bar_total else n, epoch=float(epoch),
                        seconds_per_iter=seconds_per_iter(bar["rate"], bar["unit"]),
                        loss=tqdm.postfix_loss(text[bar.end():]))


FORMAT = FormatParser(name="lightning", parse=parse, redraws_in_place=True)
