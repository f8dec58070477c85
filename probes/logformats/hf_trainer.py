"""Hugging Face Trainer: the dict it prints every logging step (``{'loss': 2.1, ..., 'epoch': 0.05}``) and the
run's summary dict (with ``train_steps_per_second``). Its progress bar is tqdm's, so it supersedes tqdm."""

from __future__ import annotations

import ast

from probes.logformats.interface import FormatParser, ProgressLine
from probes.logformats.numbers import number

# A dict line must name one of these to be worth evaluating: other dicts (configs, metrics) are common in logs.
_TRAINER_KEYS = ("loss", "eval_loss", "learning_rate", "train_runtime", "grad_norm")


def parse(text: str) -> ProgressLine | None:
    if not (text.startswith("{") and text.endswith("}")) or not any(f"'{k}'" in text for k in _TRAINER_KEYS):
        return None
    try:
        logged = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(logged, dict) or "epoch" not in logged:
        return None

    def value(key: str) -> float | None:
        raw = logged.get(key)
        return number(str(raw)) if isinstance(raw, (int, float, str)) else None

    steps_per_second = value("train_steps_per_second")
    return ProgressLine(
        "hf_trainer",
        loss=value("loss") if "loss" in logged else value("train_loss"),
        epoch=value("epoch"),
        seconds_per_iter=1.0 / steps_per_second if steps_per_second else None,
        derived_from="train_steps_per_second" if steps_per_second else None,
    )


FORMAT = FormatParser(name="hf_trainer", parse=parse, supersedes=("tqdm",))
