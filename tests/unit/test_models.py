"""probes.models: every family in FAMILIES comes with presets, a row in docs/models.md and a fixture of
parameter counts it reproduces; preset names are unique across families; MFU counts through the family."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probes.models import FAMILIES, PRESETS, family_of
from probes.models.convention import ATTENTION_CONVENTION
from probes.models.gpt2 import GptShape
from probes.models.llama import LlamaShape
from probes.models.mfu import estimate_mfu
from probes.models.moe import MoeShape

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "models.md"
FIXTURES = REPO / "tests" / "fixtures" / "models"
DOCS_COLUMNS = ("Family", "Shapes", "FLOP per token", "Not supported", "How tested")

each_family = pytest.mark.parametrize("family", FAMILIES, ids=lambda family: family.name)


def docs_rows() -> dict[str, dict[str, str]]:
    """The rows of the table under "## Families" in docs/models.md, by family name (backticks removed)."""
    lines = DOCS.read_text(encoding="utf-8").splitlines()
    start = lines.index("## Families")
    table = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("|"):
            table.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    header, _separator, *rows = table
    assert tuple(header) == DOCS_COLUMNS
    return {row[0].strip("`"): dict(zip(DOCS_COLUMNS, row, strict=True)) for row in rows}


def test_family_names_are_distinct():
    names = [family.name for family in FAMILIES]
    assert len(names) == len(set(names))


@each_family
def test_family_has_presets_of_its_own_shape(family):
    assert family.presets, f"{family.name} has no presets"
    for name, shape in family.presets.items():
        assert isinstance(shape, family.shape_type), name
        assert shape.problem() is None, name
        assert family_of(shape) is family, name


def test_preset_names_are_unique_across_families():
    names = [name for family in FAMILIES for name in family.presets]
    assert len(names) == len(set(names)), "a preset name is claimed by two families"
    assert list(PRESETS) == names  # in FAMILIES' order: the order --model lists its choices in


@each_family
def test_family_has_a_row_in_the_docs(family):
    row = docs_rows().get(family.name)
    assert row is not None, f"docs/models.md has no row for the {family.name} family"
    for preset in family.presets:
        assert f"`{preset}`" in row["Shapes"], preset
    assert family.formula in row["FLOP per token"]
    for phrase in family.unsupported:
        assert phrase in row["Not supported"], phrase
    assert f"tests/fixtures/models/{family.name}.json" in row["How tested"]


@each_family
def test_family_reproduces_its_published_parameter_counts(family):
    path = FIXTURES / f"{family.name}.json"
    assert path.is_file(), f"the {family.name} family has no fixture {path.relative_to(REPO)}"
    fixture = json.loads(path.read_text(encoding="utf-8"))
    assert fixture["family"] == family.name
    assert set(fixture["presets"]) == set(family.presets), "every preset needs a published count, and only presets"
    for name, expected in fixture["presets"].items():
        assert family.params(family.presets[name]) == expected["params"], f"{name}: {expected['source']}"
    for checkpoint in fixture["checkpoints"]:
        shape = family.shape_type(**checkpoint["shape"])
        assert family.params(shape) == checkpoint["params"], f"{checkpoint['name']}: {checkpoint['source']}"


def test_every_fixture_belongs_to_a_family():
    assert {path.stem for path in FIXTURES.glob("*.json")} == {family.name for family in FAMILIES}


@each_family
def test_mfu_counts_with_the_shapes_own_family(family):
    for name, shape in family.presets.items():
        estimate = estimate_mfu(shape, tokens_per_iter=1000, seconds_per_iter=2.0, peak=None)
        assert estimate.flops_per_token == family.flops_per_token(shape), name
        assert estimate.achieved_flops_per_s == family.flops_per_token(shape) * 500, name
        assert family.formula_with_values(shape).startswith(f"{family.formula} = "), name


def test_every_family_counts_attention_over_the_whole_score_matrix():
    """One MFU convention: the same L, H, Q and T cost the same attention FLOP in every family, the whole T×T
    score matrix (12·L·H·Q·T, as PaLM and nanoGPT count it), never the causal half (6·L·H·Q·T) for some."""
    layers, heads, head_dim, seq, vocab, d = 2, 4, 16, 256, 128, 64
    whole = 12 * layers * heads * head_dim * seq
    gpt = GptShape(n_layer=layers, n_head=heads, n_embd=d, block_size=seq, vocab_size=vocab)
    attention = dict(hidden_size=d, num_layers=layers, num_heads=heads, num_kv_heads=2, head_dim=head_dim,
                     vocab_size=vocab, seq_len=seq)
    llama = LlamaShape(**attention, intermediate_size=96)
    moe = MoeShape(**attention, num_experts=4, experts_per_token=2, expert_intermediate_size=32)
    assert {family_of(shape).name for shape in (gpt, llama, moe)} == {family.name for family in FAMILIES}
    # 6·N is each family's own N: nanoGPT's (no position embeddings, wte once), and every parameter but the
    # input embedding (plus the untied lm_head) for the Llama-shaped ones, the routed experts only for MoE.
    n = {gpt: family_of(gpt).params(gpt),
         llama: family_of(llama).params(llama) - vocab * d,
         moe: family_of(moe).active_params(moe) - vocab * d}
    for shape, matmul_params in n.items():
        family = family_of(shape)
        assert family.flops_per_token(shape) == 6 * matmul_params + whole, family.name
        assert family.attention_flops_per_token(shape) == whole, family.name


def test_the_formula_line_states_the_convention():
    assert "whole T×T score matrix" in ATTENTION_CONVENTION and "Megatron-LM" in ATTENTION_CONVENTION
    assert len(f"{'attention':<15} {ATTENTION_CONVENTION}") <= 80  # a row of `gputop mfu` and `gputop probe`
    for family in FAMILIES:
        assert family.formula.endswith("12·L·H·Q·T"), family.name  # T, not an S that hides a halved T


def test_a_shape_no_family_owns_is_refused():
    class StrangerShape:
        """A shape of an architecture no module in probes/models/ describes."""

    with pytest.raises(TypeError, match="no model family owns a StrangerShape"):
        estimate_mfu(StrangerShape(), tokens_per_iter=8, seconds_per_iter=1.0, peak=None)


def test_a_config_model_type_belongs_to_one_family():
    types = [model_type for family in FAMILIES for model_type in family.hf_model_types]
    assert len(types) == len(set(types)), "two families read the same config.json model_type"
