"""Model architecture families: what a model's shape costs in parameters and FLOPs, and MFU from that.

One module per family (``gpt2.py``, ``llama.py``, ``moe.py``) implements ``ModelFamily``; ``FAMILIES`` lists
them in order and ``PRESETS`` gathers every family's named shapes (they are the choices of ``--model``).
Beside them: ``hf_config.py`` (a Hugging Face config.json to the shape of the family that reads its
``model_type``), ``mfu.py`` (achieved FLOP/s and MFU for a shape of any family), ``peaks.py`` (GPUs'
dense peak FLOP/s) and ``convention.py`` (how attention is counted: one convention for every family, the
whole T×T score matrix, and how the frameworks that print an MFU count theirs).

Adding a family is a new module with a ``FAMILY``, one line in ``FAMILIES``, a row in docs/models.md and a
fixture of published parameter counts in tests/fixtures/models/ (tests/unit/test_models.py asks for each).

This package is also the front ends' door to the models: tui/ imports the names in ``__all__`` from
``probes.models``, never from its modules; those of convention, gpt2, peaks and stated_settings are re-exported
here, since none of them imports this package. mfu.py and hf_config.py read the registry here (FAMILIES,
family_of), so re-exporting them would import in a circle (tests/unit/test_import_cycles.py): the front ends
take their names from ``probes.reference``, the floor above, which measures a run's pace against them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import Field
from typing import Any, ClassVar, Protocol

from probes.models import gpt2, llama, moe
from probes.models.convention import ATTENTION_CONVENTION
from probes.models.gpt2 import NANOGPT_PROMISED_FLOPS, GptShape, explain_nanogpt_mfu
from probes.models.peaks import DTYPES, PeakFlops, lookup_gpu, peak_flops, user_peak
from probes.models.stated_settings import SettingName

__all__ = [
    "ATTENTION_CONVENTION",
    "DTYPES",
    "FAMILIES",
    "NANOGPT_PROMISED_FLOPS",
    "PRESETS",
    "GptShape",
    "ModelFamily",
    "ModelShape",
    "PeakFlops",
    "SettingName",
    "explain_nanogpt_mfu",
    "family_of",
    "lookup_gpu",
    "peak_flops",
    "user_peak",
]


class ModelShape(Protocol):
    """What every family's shape (a frozen dataclass) offers the code that checks and prints it."""

    # A dataclass's own mark: dataclasses.replace and asdict take any shape.
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def problem(self) -> str | None:
        """Why this shape cannot be built, or None."""
        ...

    def describe(self) -> str:
        """One line for a person: layers, widths, sequence length."""
        ...

    @property
    def block_size(self) -> int:
        """Tokens per sequence: tokens per iteration are batch × block_size × accumulation."""
        ...

    @property
    def vocab_size(self) -> int:
        """Tokens the embedding and lm_head know: the probe's synthetic batch draws from them."""
        ...


class ModelFamily(Protocol):
    """One architecture family: its shapes and what they cost per token. Its data are read-only (a family sets
    them as class attributes of its own, narrower types)."""

    @property
    def name(self) -> str:
        """Short and unique, e.g. "gpt2"."""
        ...

    @property
    def description(self) -> str:
        """The architecture in one sentence, for docs/models.md."""
        ...

    @property
    def shape_type(self) -> type:
        """The family's ModelShape dataclass; family_of() finds a shape's family by it."""
        ...

    @property
    def presets(self) -> Mapping[str, Any]:
        """Named shapes of shape_type; names are unique across families."""
        ...

    @property
    def formula(self) -> str:
        """FLOP per token in symbols, e.g. "6·N + 12·L·H·Q·T"."""
        ...

    @property
    def unsupported(self) -> tuple[str, ...]:
        """What its counts leave out or its shape cannot say, short phrases."""
        ...

    @property
    def hf_model_types(self) -> tuple[str, ...]:
        """The config.json "model_type" values from_hf_config reads."""
        ...

    def params(self, shape: Any) -> int:
        """Parameters, counted the way the family's published figures count them (tests/fixtures/models/)."""
        ...

    def active_params(self, shape: Any) -> int:
        """Parameters one token's step uses: params() for a dense model, the routed experts only for MoE."""
        ...

    def flops_per_token(self, shape: Any) -> int:
        """FLOP for one token's forward and backward pass, attention over the whole score matrix as every family
        counts it (probes/models/convention.py)."""
        ...

    def attention_flops_per_token(self, shape: Any) -> int:
        """The attention term of flops_per_token, 12·L·H·Q·T: what a count of the causal half (Megatron-LM,
        llm.c) has only half of."""
        ...

    def formula_with_values(self, shape: Any) -> str:
        """The formula with this shape's numbers in it, for showing the work."""
        ...

    def from_hf_config(self, config: Mapping[str, Any]) -> Any:
        """The shape a Hugging Face config.json describes; KeyError for a missing field, ValueError (one
        line) for a shape the family cannot count."""
        ...


FAMILIES: tuple[ModelFamily, ...] = (
    gpt2.FAMILY,  # nanoGPT's GPT-2: the only architecture gputop's probe can build and train
    llama.FAMILY,  # dense Llama-shaped decoders: most of what is trained today
    moe.FAMILY,  # mixture of experts on the same attention: counts only the experts a token is routed to
)

PRESETS: dict[str, ModelShape] = {name: shape for family in FAMILIES for name, shape in family.presets.items()}


def family_of(shape: ModelShape) -> ModelFamily:
    """The family whose shape type this is; TypeError for a shape no family in FAMILIES owns."""
    for family in FAMILIES:
        if isinstance(shape, family.shape_type):
            return family
    raise TypeError(f"no model family owns a {type(shape).__name__}")
