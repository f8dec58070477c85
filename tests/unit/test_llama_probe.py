"""`gputop probe` at a Llama-shaped or mixture-of-experts model's shape: the modules
(probes/reference/llama_probe_model.py, probes/reference/moe_probe_model.py) have their family's parameter count, the
Llama one
computes what transformers' own models compute, a tiny config.json trains end to end through the CLI on the
CPU, ``--layers N`` scales and says so, and bad input is one line with exit 2."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from support.requires import needs_torch

from probes.models import FAMILIES, PRESETS
from probes.models.hf_config import shape_from_config
from probes.models.llama import FAMILY, LlamaShape
from probes.models.moe import FAMILY as MOE_FAMILY
from probes.models.moe import MoeShape
from probes.reference.gpt_probe import MODEL_BUILDERS, ProbeConfig, run_probe
from probes.reference.llama_probe_model import ROPE_THETA, llama_class
from probes.reference.moe_probe_model import moe_class
from tui import cli

REPO = Path(__file__).resolve().parents[2]
TINY_LLAMA = {  # two layers, grouped-query attention (4 query heads share 2 K/V heads), untied lm_head
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 32,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
}
FAST = ("--device", "cpu", "--batch-size", "2", "--steps", "3", "--warmup", "1")


def write_config(tmp_path: Path, **changes) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY_LLAMA, **changes}), encoding="utf-8")
    return str(path)


def run_cli(argv, capsys):
    code = cli.run(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


TINY_MIXTRAL = {**TINY_LLAMA, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2}
TINY_QWEN2_MOE = {  # 4 routed experts of 32, top 2, and a shared expert of 64 behind its gate
    **TINY_LLAMA, "model_type": "qwen2_moe", "num_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64, "use_sliding_window": False,
}


def tiny(**changes) -> LlamaShape:
    return shape_from_config({**TINY_LLAMA, **changes}, "the test")


def test_every_model_family_has_a_probe_builder():
    assert set(MODEL_BUILDERS) == {family.name for family in FAMILIES}


@pytest.mark.parametrize("shape", [
    # The presets at two of their layers: every layer is the same, and Qwen3-30B-A3B's 48 layers of 128
    # experts are 18,000 modules that took 78 s to build even on the meta device beside two busy processes.
    *(dataclasses.replace(shape, num_layers=2) for shape in PRESETS.values() if isinstance(shape, MoeShape)),
    shape_from_config(TINY_MIXTRAL, "the test"),
    shape_from_config(TINY_QWEN2_MOE, "the test"),
], ids=lambda shape: shape.describe())
@needs_torch
def test_moe_module_has_the_family_parameter_count(shape):
    import torch

    with torch.device("meta"):
        model = moe_class()(shape)
    assert model.num_params() == MOE_FAMILY.params(shape)


@needs_torch
@pytest.mark.parametrize("config", [TINY_MIXTRAL, TINY_QWEN2_MOE], ids=["mixtral", "qwen2_moe"])
def test_moe_config_trains_through_the_cli(tmp_path, capsys, config):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    code, out, err = run_cli(["probe", "--config", str(path), *FAST, "--layers", "1", "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    shape = shape_from_config(config, "the test")
    assert result["family"] == "moe" and result["scaled_from_layers"] == 1
    assert result["params"] == MOE_FAMILY.params(shape)
    assert result["flops_per_token"] == MOE_FAMILY.flops_per_token(shape)  # the routed experts only
    assert all(math.isfinite(loss) for loss in result["losses"]) and result["losses"][-1] < result["losses"][0]


@pytest.mark.parametrize("shape", [
    *(shape for shape in PRESETS.values() if isinstance(shape, LlamaShape)),
    tiny(tie_word_embeddings=True),
    tiny(model_type="qwen2", use_sliding_window=False),  # biases on q, k and v
    tiny(model_type="qwen3"),  # per-head q and k norms
], ids=lambda shape: shape.describe())
@needs_torch
def test_module_has_the_family_parameter_count(shape):
    import torch

    with torch.device("meta"):  # no memory: the presets have billions of parameters
        model = llama_class()(shape)
    assert model.num_params() == FAMILY.params(shape)


@pytest.mark.parametrize(("model_type", "extra"), [
    ("llama", {}),
    ("mistral", {"sliding_window": 8}),  # the window bites: 8 of 32 positions
    ("qwen2", {"use_sliding_window": False}),
    ("qwen3", {"head_dim": 16}),
])
@needs_torch
def test_module_computes_what_transformers_computes(model_type, extra):
    """Same weights, same tokens: the probe's module gives transformers' logits, so its step is that model's."""
    import torch
    import transformers

    fields = {**TINY_LLAMA, "model_type": model_type, **extra}
    hf_config = transformers.AutoConfig.for_model(**fields)
    hf_config._attn_implementation = "eager"  # the plain reference, independent of SDPA
    torch.manual_seed(0)
    reference = transformers.AutoModelForCausalLM.from_config(hf_config).eval()
    model = llama_class()(shape_from_config(fields, "the test")).eval()
    model.load_state_dict({key.removeprefix("model."): value for key, value in reference.state_dict().items()})
    tokens = torch.randint(0, TINY_LLAMA["vocab_size"], (2, 32))
    with torch.no_grad():
        ours, _ = model(tokens, tokens)
        theirs = reference(tokens).logits
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-4)


@needs_torch
def test_sliding_window_shape_trains():
    shape = tiny(model_type="mistral", sliding_window=8)
    result = run_probe(ProbeConfig(shape, "mistral-tiny", batch_size=2, steps=2, warmup=1, device="cpu"))
    assert result.family == "llama" and result.scaled_from_layers is None and result.scaling is None
    assert all(math.isfinite(loss) for loss in result.losses) and result.losses[-1] < result.losses[0]


@needs_torch
def test_layers_times_fewer_layers_and_says_it_scaled(tmp_path, capsys):
    config = write_config(tmp_path)
    code, out, err = run_cli(["probe", "--config", config, *FAST, "--layers", "1"], capsys)
    assert code == 0, err
    assert "building 1 of 2 layers of" in err
    scaled_line = next(line for line in out.splitlines() if line.startswith("scaled"))
    assert "built and timed 1 of 2 layers, scaled to 2" in scaled_line
    assert "2 layers" in out  # the model line shows the whole model

    code, out, _ = run_cli(["probe", "--config", config, *FAST, "--layers", "1", "--json"], capsys)
    assert code == 0
    result = json.loads(out)
    full, one_layer = tiny(), tiny(num_hidden_layers=1)
    flop_ratio = FAMILY.flops_per_token(full) / FAMILY.flops_per_token(one_layer)
    param_ratio = FAMILY.params(full) / FAMILY.params(one_layer)
    assert result["scaled_from_layers"] == 1
    assert f"forward+backward × {flop_ratio:.4g}" in result["scaling"]
    assert f"optimizer × {param_ratio:.4g}" in result["scaling"]
    assert result["params"] == FAMILY.params(full) and result["flops_per_token"] == FAMILY.flops_per_token(full)
    assert result["step_seconds"] >= result["step_seconds_min"] > 0


@pytest.mark.parametrize(("argv", "message"), [
    (["--layers", "3"], "--layers must be between 1 and the model's 2 layers (got 3)"),
    (["--layers", "0"], "--layers"),
    (["--head-dim-odd"], "head_dim must be even for rotary positions (got 15)"),
    (["--broken"], "config.json"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    if argv == ["--head-dim-odd"]:
        argv = ["--config", write_config(tmp_path, head_dim=15)]
    elif argv == ["--broken"]:
        path = tmp_path / "config.json"
        path.write_text("{not json", encoding="utf-8")
        argv = ["--config", str(path)]
    else:
        argv = ["--config", write_config(tmp_path), *argv]
    try:
        code, out, err = run_cli(["probe", *argv, "--device", "cpu"], capsys)
    except SystemExit as exit_:  # argparse rejects --layers 0 itself
        code, captured = exit_.code, capsys.readouterr()
        out, err = captured.out, captured.err.splitlines()[-1] + "\n"
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@needs_torch
def test_a_model_too_large_for_host_memory_is_refused_before_it_is_built(monkeypatch):
    """On the CPU the OOM killer ends the process instead of raising: the probe says so first, with --layers."""
    from probes.reference import gpt_probe

    shape = tiny()
    logits_bytes = 2 * 4 * 2 * 32 * TINY_LLAMA["vocab_size"]
    one_layer_bytes = FAMILY.params(tiny(num_hidden_layers=1)) * gpt_probe.BYTES_PER_TRAINED_PARAM + logits_bytes
    monkeypatch.setattr(gpt_probe, "_host_memory_available", lambda: one_layer_bytes)
    with pytest.raises(gpt_probe.ProbeInputError, match=r"GiB available: try --layers 1$"):
        run_probe(ProbeConfig(shape, "tiny", batch_size=2, steps=1, warmup=1, device="cpu"))
    result = run_probe(ProbeConfig(shape, "tiny", batch_size=2, steps=1, warmup=1, device="cpu", layers=1))
    assert result.scaled_from_layers == 1


@needs_torch
def test_llama_3_8b_on_a_small_host_is_one_line(monkeypatch, capsys):
    from probes.reference import gpt_probe

    monkeypatch.setattr(gpt_probe, "_host_memory_available", lambda: 40 * 2**30)
    code, out, err = run_cli(["probe", "--model", "llama-3-8b", "--device", "cpu", "--batch-size", "1"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("gputop: llama-3-8b at batch 1 × block 8192 needs at least 127.5 GiB")
    assert err.endswith("40.0 GiB available: try --layers 5\n")


@needs_torch
def test_a_llama_probe_result_is_a_baseline(tmp_path):
    """`gputop --pid P --baseline probe.json` takes what `gputop probe --config ... --json` wrote."""
    from probes.reference.baseline import BaselineError, load_baseline, load_comparison_inputs

    result = run_probe(ProbeConfig(tiny(), "tiny.json", batch_size=2, steps=1, warmup=1, device="cpu", layers=1))
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(dataclasses.asdict(result)), encoding="utf-8")
    baseline = load_baseline(str(path))
    assert baseline.shape == tiny() and baseline.scaled_from_layers == 1 and baseline.family == "llama"
    assert load_comparison_inputs(str(path), None, 64).shape == tiny()

    path.write_text(json.dumps({**dataclasses.asdict(result), "family": "rwkv"}), encoding="utf-8")
    with pytest.raises(BaselineError, match="family = 'rwkv' \\(one of gpt2, llama, moe expected\\)"):
        load_baseline(str(path))


@needs_torch
def test_moe_module_computes_what_transformers_mixtral_computes():
    """Same weights, same tokens: the routed experts give Mixtral's logits (transformers fuses each layer's
    experts into gate_up_proj, gate rows first, and down_proj tensors; split here into our per-expert MLPs)."""
    import torch
    import transformers

    # Mixtral's rotary base defaults to 1e6; the probe's is 1e4 (the base changes angles, not cost).
    hf_config = transformers.AutoConfig.for_model(
        **TINY_MIXTRAL, rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA})
    hf_config._attn_implementation = "eager"
    torch.manual_seed(0)
    reference = transformers.AutoModelForCausalLM.from_config(hf_config).eval()
    model = moe_class()(shape_from_config(TINY_MIXTRAL, "the test")).eval()
    ours = {}
    for key, value in reference.state_dict().items():
        key = key.removeprefix("model.")
        if key.endswith("experts.gate_up_proj"):
            prefix = key.removesuffix("gate_up_proj")
            for expert, fused in enumerate(value):
                gate, up = fused.chunk(2, dim=0)
                ours[f"{prefix}{expert}.gate_proj.weight"], ours[f"{prefix}{expert}.up_proj.weight"] = gate, up
        elif key.endswith("experts.down_proj"):
            prefix = key.removesuffix("down_proj")
            for expert, down in enumerate(value):
                ours[f"{prefix}{expert}.down_proj.weight"] = down
        else:
            ours[key] = value
    model.load_state_dict(ours)
    tokens = torch.randint(0, TINY_LLAMA["vocab_size"], (2, 32))
    with torch.no_grad():
        logits, _ = model(tokens, tokens)
        torch.testing.assert_close(logits, reference(tokens).logits, atol=1e-5, rtol=1e-4)
