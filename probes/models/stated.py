"""StatedModel: the shape a running job states itself, on its command line or in its log, and where it says it.

Its own module, below the readers that make one (probes/models/nanogpt_config.py, hf_command_line.py), the
module that asks them in turn (probes/jobs/job_command_line.py) and the pace that shows it
(probes/reference/baseline.py, pace_inputs.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from probes.models import ModelShape


@dataclass(frozen=True)
class StatedModel:
    """The shape a job states, what the pace calls it, where it came from, and its tokens per iteration when
    the command line says them."""

    shape: ModelShape
    model: str  # what the pace calls the model: "nanoGPT", a config.json's path
    source: str  # e.g. "nanoGPT's command line: config/x.py --n_layer=4 (vocab from its 'number of parameters' line)"
    tokens_per_iter: int | None = None
    tokens_source: str | None = None  # how tokens_per_iter was worked out from the command line
