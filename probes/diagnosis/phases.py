"""The phases of a training loop that the main thread's wall time is divided into (probes/diagnosis/shares.py's
time shares, a snapshot's time_shares, `gputop compare`'s rows), with their words.

A vocabulary of its own, below the time shares and the rules, so that a bottleneck's facts can name the phases its
fix removes (probes/diagnosis/rules/rule.py FixRemoves) without the rules importing the time shares, which read
the rules' registry.
"""

from __future__ import annotations

import typing
from typing import Literal

# gpu_wait: blocked in a CUDA synchronisation while its GPU runs kernels (py-spy calls that idle).
Phase = Literal["compute", "data", "checkpoint", "evaluation", "compile", "collectives", "logging", "gpu_wait", "idle"]
PHASES: tuple[Phase, ...] = typing.get_args(Phase)
PHASE_WORDS: dict[Phase, str] = {
    "compute": "computing", "data": "waiting for data", "checkpoint": "saving a checkpoint",
    "evaluation": "evaluating", "compile": "compiling", "collectives": "in collectives", "logging": "logging",
    "gpu_wait": "waiting for the GPU", "idle": "idle",
}
# A phase as a short label beside its share (the shares line, `gputop compare`'s rows), where its key is no word.
PHASE_LABELS: dict[str, str] = {"gpu_wait": "GPU wait"}


def phase_label(phase: str) -> str:
    """'GPU wait' for gpu_wait, the phase's own name otherwise (a recording's stack activity included)."""
    return PHASE_LABELS.get(phase, phase.replace("_", " "))
