"""tqdm progress bars (``50/1000 [00:25<07:55,  2.00it/s, loss=2.3]``, ``50it [00:25, 2.00it/s]``,
``3/10 [00:30<01:10, 10.0s/it]``), redrawn in place with ``\\r``. Evaluation, test and sanity-check bars are
not training progress and are left alone. Lightning's training bar is a tqdm bar too: ``lightning`` reuses
``BAR`` and ``postfix_loss``.

Only a bar that counts training steps is read: data preparation draws tqdm bars before training starts (litdata's
``optimize``, Hugging Face datasets' ``Map``/``Filter``, downloads, nanoGPT's ``prepare.py``), and their counter is
no step counter. A bar is taken when its unit counts steps and its description names no data preparation:

- the unit first, because it says what the counter counts whatever the description: tqdm's default ``it`` or a
  step's own names (``step``, ``batch``, Composer's ``ba``); ``examples`` (every datasets ``map``, whatever
  ``desc`` the user gave it: ``Running tokenizer on dataset``), bytes (``B`` with ``unit_scale``: downloads, whose
  description is often the file's name), ``files``, ``obj``, ``shards`` are rejected;
- then the description, for preparation bars that keep tqdm's ``it``: litdata's ``Progress`` and ``Indexing
  progress``, datasets' ``Resolving data files``, ``Loading dataset shards``, transformers' ``Loading checkpoint
  shards``, nanoGPT's ``writing train.bin``, a user's ``Tokenizing``.

Any other description (``Training``, a run's name) or none is taken: a description is free text a user writes for
their own loop, so a list of training words would drop real training bars without a word, while the preparation
bars are few and named by their libraries. tests/fixtures/logs/README.md cites where each name is printed.

The bar's rate is tqdm's own moving average of its recent redraws, not the pace over a window: it is the pace only
until the bar's counter has moved, and a cross-check after (probes/pace.py)."""

from __future__ import annotations

import re

from probes.logformats.interface import FormatParser, ProgressLine
from probes.logformats.numbers import NUMBER, number, seconds_per_iter

# The counter is a whole number not inside a scaled one ("5.24M/10.5M", "3.00kit": unit_scale, whose counter
# cannot be read as a step number).
BAR = re.compile(
    r"(?<![\d.])(?P<n>\d+)(?:/(?P<total>\d+)|[A-Za-z]+)?\s*\[(?P<elapsed>[\d:]+)(?:<(?P<remaining>[^,\]]*))?,"
    r"\s*(?P<rate>\?|\d+\.?\d*)\s*(?P<unit>[A-Za-z]+/s|s/[A-Za-z]+)"
)
_POSTFIX_LOSS = re.compile(rf"\b(?:train_)?loss(?:_step)?\s*[=:]\s*({NUMBER})")
_NON_TRAINING_BAR = re.compile(r"^\s*(?:validation|validating|evaluat|eval\b|test|predict|sanity)", re.IGNORECASE)
# What a training bar counts in: tqdm's default, and the names loops give a step (Composer's bar says "ba").
_STEP_UNITS = frozenset({"it", "step", "steps", "iter", "iters", "iteration", "iterations", "batch", "batches", "ba"})
# The description before the percentage: tqdm draws "{desc}: {percentage:3.0f}%|{bar}| " or "{desc}: " unbounded.
_BEFORE_PERCENT = re.compile(r"\s*\d+%\|.*$")
# Descriptions of data preparation, matched at the start, case ignored; each from the program that prints it.
_DATA_PREPARATION = re.compile(
    r"^(?:"
    r"progress$|indexing\b"  # litdata: optimize()'s bar "Progress" (processing/data_processor.py), "Indexing progress"
    r"|map\b|filter\b|generating \w+ split|resolving data files|loading\b|saving\b|download|extracting|uploading"
    r"|casting|stringifying|batching examples|flattening|computing checksums|creating \w+ from arrow|counting rows"
    r"|aligning the labels"  # Hugging Face datasets (arrow_dataset.py, builder.py, download_manager.py, ...)
    r"|fetching \d+ files"  # huggingface_hub's snapshot_download
    r"|writing\b|tokeniz|running tokenizer|grouping texts"  # nanoGPT's prepare.py; transformers' run_clm.py map descs
    r")",
    re.IGNORECASE,
)


def postfix_loss(rest: str) -> float | None:
    """The loss in a bar's postfix (what follows the rate), if it shows one."""
    match = _POSTFIX_LOSS.search(rest)
    return number(match.group(1)) if match else None


def description(text: str, bar: re.Match[str]) -> str:
    """What the bar says before its percentage and counter ("Map (num_proc=4)"; "" for a bare bar)."""
    return _BEFORE_PERCENT.sub("", text[:bar.start()]).strip().removesuffix(":").strip()


def counts_steps(unit: str) -> bool:
    """The bar's unit ("it/s", "s/it", "examples/s", "MB/s") is one a training step is counted in."""
    return unit.removesuffix("/s").removeprefix("s/") in _STEP_UNITS


def prepares_data(text: str, bar: re.Match[str]) -> bool:
    """The bar counts something other than training steps: its unit or its description says data preparation."""
    return not counts_steps(bar["unit"]) or bool(_DATA_PREPARATION.match(description(text, bar)))


def parse(text: str) -> ProgressLine | None:
    bar = BAR.search(text)
    if not bar or _NON_TRAINING_BAR.match(text) or prepares_data(text, bar):
        return None
    return ProgressLine(
        "tqdm",
        iteration=int(bar["n"]),
        total=int(bar["total"]) if bar["total"] else None,
        seconds_per_iter=seconds_per_iter(bar["rate"], bar["unit"]),
        loss=postfix_loss(text[bar.end():]),
    )


FORMAT = FormatParser(name="tqdm", parse=parse, redraws_in_place=True)
