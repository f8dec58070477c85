"""tqdm progress bars (``50/1000 [00:25<07:55,  2.00it/s, loss=2.3]``, ``50it [00:25, 2.00it/s]``,
``3/10 [00:30<01:10, 10.0s/it]``), redrawn in place with ``\\r``. Evaluation, test and sanity-check bars are
not training progress and are left alone. Lightning's training bar is a tqdm bar too: ``lightning`` reuses
``BAR`` and ``postfix_loss``.

The bar's rate is tqdm's own moving average of its recent redraws, not the pace over a window: it is the pace only
until the bar's counter has moved, and a cross-check after (probes/pace.py)."""

from __future__ import annotations

import re

from probes.logformats.interface import FormatParser, ProgressLine
from probes.logformats.numbers import NUMBER, number, seconds_per_iter

BAR = re.compile(
    r"(?P<n>\d+)(?:/(?P<total>\d+)|[A-Za-z]+)?\s*\[(?P<elapsed>[\d:]+)(?:<(?P<remaining>[^,\]]*))?,"
    r"\s*(?P<rate>\?|\d+\.?\d*)\s*(?P<unit>[A-Za-z]+/s|s/[A-Za-z]+)"
)
_POSTFIX_LOSS = re.compile(rf"\b(?:train_)?loss(?:_step)?\s*[=:]\s*({NUMBER})")
_NON_TRAINING_BAR = re.compile(r"^\s*(?:validation|validating|evaluat|eval\b|test|predict|sanity)", re.IGNORECASE)


def postfix_loss(rest: str) -> float | None:
    """The loss in a bar's postfix (what follows the rate), if it shows one."""
    match = _POSTFIX_LOSS.search(rest)
    return number(match.group(1)) if match else None


def parse(text: str) -> ProgressLine | None:
    bar = BAR.search(text)
    if not bar or _NON_TRAINING_BAR.match(text):
        return None
    return ProgressLine(
        "tqdm",
        iteration=int(bar["n"]),
        total=int(bar["total"]) if bar["total"] else None,
        seconds_per_iter=seconds_per_iter(bar["rate"], bar["unit"]),
        loss=postfix_loss(text[bar.end():]),
    )


FORMAT = FormatParser(name="tqdm", parse=parse, redraws_in_place=True)
