"""The levers (probes/diagnosis/levers.py): each offered only where what the GPU does (GpuLimit) and what the step
already does (StepFacts) say it applies, with the most it can win and its basis; on the real H200 runs
(tests/fixtures/h200) none the job already pulls, and nothing in the step at its reference's rate (issue 30, item
3)."""

from __future__ import annotations

import dataclasses

import pytest
from support.h200 import fixture, recording

from probes.diagnosis.gpu_limit import classify
from probes.diagnosis.gpu_summary import GpuSummary
from probes.diagnosis.levers import LEVERS, Seen, beside_reference, offered
from probes.diagnosis.step_facts import Fact, StepFacts
from probes.frame import GpuDevice
from probes.monitoring.monitor import fold
from probes.outputs.recording import read_recording
from probes.reference.baseline import load_comparison_inputs

GIB = 2**30


def _gpu(**kw) -> GpuSummary:
    device = GpuDevice(index=0, name="NVIDIA H200", in_target=True)
    return GpuSummary(devices=[device], available=True, **{"util_pct": 100.0, **kw})


TENSOR_BOUND = _gpu(sm_active_pct=95.0, tensor_active_pct=64.0, dram_bw_pct=29.0)
NARROW = _gpu(sm_active_pct=83.0, tensor_active_pct=31.0, dram_bw_pct=42.0)
FP32 = _gpu(sm_active_pct=90.0, tensor_active_pct=2.0, dram_bw_pct=30.0, fp32_active_pct=70.0)
CAPPED = _gpu(sm_active_pct=95.0, tensor_active_pct=64.0, dram_bw_pct=29.0, sm_clock_mhz=1662.0,
              max_sm_clock_mhz=1980.0, reasons=("sw_power_cap",), power_limit_w=700.0)
ROOM = Fact((9 * GIB, 140 * GIB), "NVML", "GPU 0: 9 of 140 GiB used")
FULL = Fact((120 * GIB, 140 * GIB), "NVML", "GPU 0: 120 of 140 GiB used")


def seen(gpu: GpuSummary, launch_bound: bool = False, **facts) -> Seen:
    return Seen(StepFacts(samples=40, **facts), classify(gpu), gpu, launch_bound)


def names(s: Seen) -> list[str]:
    return [lever.name for lever in LEVERS if lever.applies(s)]


def stacks(value, where="x.py:1", samples=4):
    return Fact(value, "stacks", where, samples, 40)


# --- each lever: applies where its facts say so, never on an unknown fact ---------------------------------------


def test_compile_only_for_a_model_read_as_eager():
    assert "compile" in names(seen(TENSOR_BOUND, compiled=stacks("eager")))
    assert "compile" not in names(seen(TENSOR_BOUND, compiled=stacks("compiled")))
    assert "compile" not in names(seen(TENSOR_BOUND))  # unknown is not "eager"
    advice = offered(seen(TENSOR_BOUND, compiled=stacks("eager", "Block.forward (model.py:40)")))[0]
    assert advice.startswith("Compile the model: torch.compile(model)")
    assert "it runs eager: stacks: Block.forward (model.py:40) in 4 of 40 main-thread samples" in advice
    assert "most it can win: ~8% on a bf16 GPT-2 XL step" in advice and "(estimate: gputop probe's" in advice


def test_bf16_where_fp32_math_is_measured_or_the_compiled_buffers_are_float32():
    assert "bf16_autocast" in names(seen(FP32))
    float32 = Fact("float32", "generated code", "buffers of the compiled graphs: 40 float32")
    assert "bf16_autocast" in names(seen(TENSOR_BOUND, compute_dtype=float32))
    assert "bf16_autocast" not in names(seen(FP32, autocast=stacks("bfloat16")))  # the job already autocasts
    bf16 = Fact("bfloat16", "generated code", "buffers of the compiled graphs: 30 bfloat16, 10 float32")
    assert "bf16_autocast" not in names(seen(TENSOR_BOUND, compute_dtype=bf16))
    assert "bf16_autocast" not in names(seen(TENSOR_BOUND))  # nothing says fp32: no checklist
    advice = offered(seen(FP32))[0]
    assert advice.startswith("bf16 autocast (FP32 pipe 70% while the tensor cores idle)")
    assert "(estimate: the H200 SXM's dense bf16 tensor-core peak is about 15× its FP32 rate" in advice


def test_autocast_to_float32_is_no_mixed_precision():
    """nanoGPT's --dtype=float32 still wraps each step in torch.amp.autocast(dtype=torch.float32): autocast's native
    dispatch shows in the stacks, its dtype unread. Read as "the job already autocasts", the bf16 lever was dropped
    for an fp32 job (found preparing the GPU check, issue 41)."""
    said_fp32 = Fact("float32", "command line", "--dtype=float32")
    native = stacks("on", where="native frame at::autocast::WrapFunction_")
    assert "bf16_autocast" in names(seen(FP32, autocast=native, compute_dtype=said_fp32))
    assert "bf16_autocast" not in names(seen(FP32, autocast=native))  # dtype unknown: it may be bf16 already
    assert "bf16_autocast" not in names(seen(FP32, autocast=stacks("bfloat16"), compute_dtype=said_fp32))


def test_drop_checkpointing_when_memory_allows():
    on = Fact("on", "stacks", "checkpoint (torch/utils/checkpoint.py:488)", 3, 40)
    assert "drop_checkpointing" in names(seen(TENSOR_BOUND, checkpointing=on, gpu_memory=ROOM))
    assert "drop_checkpointing" not in names(seen(TENSOR_BOUND, checkpointing=on, gpu_memory=FULL))
    assert "drop_checkpointing" not in names(seen(TENSOR_BOUND, checkpointing=on))  # memory unknown
    assert "drop_checkpointing" not in names(seen(TENSOR_BOUND, gpu_memory=ROOM))
    advice = offered(seen(TENSOR_BOUND, checkpointing=on, gpu_memory=ROOM))[0]
    assert ("most it can win: ~25% (estimate: checkpointing recomputes the forward, about 1/3 more FLOPs: without "
            "it the step does 3/4 of its work)") in advice


def test_larger_micro_batch_when_memory_allows_and_the_tensor_cores_are_under_used():
    assert "larger_micro_batch" in names(seen(NARROW, gpu_memory=ROOM))
    assert "larger_micro_batch" not in names(seen(NARROW, gpu_memory=FULL))
    assert "larger_micro_batch" not in names(seen(NARROW))  # memory unknown
    assert "larger_micro_batch" not in names(seen(TENSOR_BOUND, gpu_memory=ROOM))  # tensor cores already busy


def test_launch_bound_levers_cuda_graphs_batch_and_host_syncs():
    launch = _gpu(sm_active_pct=20.0, tensor_active_pct=5.0, dram_bw_pct=5.0)
    assert names(seen(launch, launch_bound=True)) == ["cuda_graphs", "launch_batch"]
    assert "cuda_graphs" not in names(seen(TENSOR_BOUND))
    sync = Fact("item", "stacks", "Tensor.item (train.py:88)", 6, 40)
    s = seen(launch, launch_bound=True, host_syncs=(sync,), compiled=stacks("compiled"))
    assert names(s) == ["cuda_graphs", "launch_batch", "drop_host_syncs"]
    advice = offered(s)
    assert advice[0].startswith("Cut launch overhead with CUDA graphs: the model already runs compiled")
    assert ("most it can win: the 80% of the SMs' time with no work on them (a bound: SM active 20%, NVML GPM)"
            in advice[0])
    assert advice[2] == ("Remove the per-step host sync .item() (Tensor.item (train.py:88)) so the CPU runs ahead of "
                         "the GPU — most it can win: the 15% of main-thread samples waiting at it (a bound: py-spy's "
                         "samples of this job, over 40 samples).")
    assert [(a.lever, a.gain.kind) for a in advice] == [("cuda_graphs", "bound"), ("launch_batch", "bound"),
                                                        ("drop_host_syncs", "bound")]
    # A sync in a GPU-bound step costs little: the GPU has the queued work to run meanwhile.
    assert "drop_host_syncs" not in names(seen(TENSOR_BOUND, host_syncs=(sync,)))


def test_fused_attention_only_for_attention_written_by_hand():
    by_hand = Fact("by_hand", "stacks", "F.softmax called from CausalSelfAttention.forward (model.py:61)", 6, 40)
    assert "fused_attention" in names(seen(TENSOR_BOUND, attention=by_hand))
    assert "fused_attention" not in names(seen(TENSOR_BOUND, attention=stacks("sdpa")))
    assert "fused_attention" not in names(seen(TENSOR_BOUND))  # attention not read: no lever
    advice = next(line for line in offered(seen(TENSOR_BOUND, attention=by_hand)) if line.startswith("Fused"))
    assert "scaled_dot_product_attention(q, k, v, is_causal=True)" in advice
    assert "(estimate: not measured here" in advice and "gputop probe --like PID" in advice


def test_fused_optimizer_for_a_per_parameter_loop():
    loop = Fact("per_parameter", "stacks", "_single_tensor_adamw (torch/optim/adamw.py:350)", 8, 40)
    assert "fused_optimizer" in names(seen(TENSOR_BOUND, optimizer=loop))
    assert "fused_optimizer" not in names(seen(TENSOR_BOUND, optimizer=stacks("fused")))
    assert "fused_optimizer" not in names(seen(TENSOR_BOUND))
    # The loop's share of CPU samples is no gain for a step the tensor cores hold: its CPU time hides behind the GPU.
    gpu_bound = offered(seen(TENSOR_BOUND, optimizer=loop))[0]
    assert "main-thread samples in that loop" not in gpu_bound and gpu_bound.gain.kind == "estimate"
    assert "the optimizer's share of the GPU's time (estimate: not measured here" in gpu_bound
    launch = _gpu(sm_active_pct=20.0, tensor_active_pct=5.0, dram_bw_pct=5.0)
    launch_bound = offered(seen(launch, launch_bound=True, optimizer=loop))[-1]
    assert "the 20% of main-thread samples in that loop (a bound: py-spy's samples of this job, over 40 samples)" \
        in launch_bound


def test_the_power_cap_with_its_clock_and_no_step_lever_of_a_compiled_fused_job():
    below = dataclasses.replace(CAPPED, power_limit_w=600.0, power_max_limit_w=700.0)
    s = seen(below, compiled=stacks("compiled"), optimizer=stacks("fused"), gpu_memory=FULL)
    assert names(s) == ["power_cap"]
    assert offered(s, inside_step=True) == []
    advice = offered(s)[0]
    assert advice.startswith("The power limit (600 W) caps the clock and the board allows 700 W: raise it with "
                             "nvidia-smi -pl 700")
    assert "most it can win: ~19% (a bound: the SM clock runs at 84% of its maximum" in advice
    assert (advice.lever, advice.gain.kind) == ("power_cap", "bound")


def test_a_power_limit_at_the_boards_maximum_is_not_offered_to_raise():
    """Issue 38, item 2: 700 W is an H200 SXM's maximum; a limit already there cannot be raised."""
    at_max = dataclasses.replace(CAPPED, power_max_limit_w=700.0)
    assert "power_cap" not in names(seen(at_max))


def test_a_power_limit_whose_maximum_was_not_read_claims_no_gain():
    advice = offered(seen(CAPPED))[0]  # CAPPED: the maximum unread, as on the H200 recordings
    assert advice.startswith("The power limit (700 W) caps the clock: gputop could not read the board's maximum")
    assert "most it can win" not in advice and advice.gain is None


def test_tf32_is_not_offered_to_fp32_math_that_already_runs_on_the_tensor_cores():
    """Issue 38, item 5: nanoGPT's fp32 step sets allow_tf32; tensor active 40% shows its matmuls on the tensor
    cores, so bf16's gain is against TF32 (about 2x on the matmuls), not against FP32 (15x)."""
    tf32 = _gpu(sm_active_pct=90.0, tensor_active_pct=40.0, dram_bw_pct=30.0, fp32_active_pct=40.0)
    float32 = Fact("float32", "generated code", "buffers of the compiled graphs: 40 float32")
    advice = next(a for a in offered(seen(tf32, compute_dtype=float32)) if a.lever == "bf16_autocast")
    assert "allow_tf32" not in advice and "15×" not in advice
    assert "already run as TF32, whose dense peak is half bf16's" in advice and advice.gain.kind == "estimate"
    idle = next(a for a in offered(seen(FP32)) if a.lever == "bf16_autocast")
    assert "allow_tf32" in idle and "15×" in idle


# --- the real H200 runs ------------------------------------------------------------------------------------------


CHECKLIST = ("torch.compile", "scaled_dot_product_attention", "FlashAttention", "fused attention", "bf16", "autocast",
             "TF32")


def test_gpt2xl_is_offered_no_lever_it_already_pulls_and_what_its_reference_measured(tmp_path):
    frames = list(read_recording(recording("gpt2xl_s2", tmp_path)))
    alone = fold(frames, replay=True).view.verdict.advice
    assert len(alone) == 1 and alone[0].startswith("The power limit (700 W) caps the clock")
    comparison = load_comparison_inputs(str(fixture("gpt2xl_probe_compile.json")), None, 131_072)
    view = fold(frames, comparison=comparison, replay=True).view
    assert view.pace.comparison.compute_bound_pct == pytest.approx(98, abs=0.5)
    # Issue 38, item 1: the reference is one implementation, not a ceiling: what it pulls, and what it does not try.
    assert view.verdict.advice[0] == (
        "The step runs at 98% of this GPU's compiled reference step for its model (bf16, fused AdamW, SDPA, "
        "micro-batch 16): its levers have nothing left to win; FP8, CUDA graphs, another batch or attention kernel "
        "it does not try.")
    # The board's cap held the reference too: the rule's own line, as offered without the reference.
    assert view.verdict.advice[1:] == alone
    assert not any(word in line for line in view.verdict.advice[1:] for word in CHECKLIST)
    # With a reference, MFU is judged against it, not against a fixed 35%.
    assert not any("as expected for this model" in line for line in view.verdict.evidence)


def test_beside_an_eager_reference_an_eager_job_keeps_the_compile_lever():
    """Issue 38, item 1: a job at 98% of an eager probe has the gains of the eager probe's levers, not compile's."""
    eager = stacks("eager", "Block.forward (model.py:40)")
    advice = tuple(offered(seen(TENSOR_BOUND, compiled=eager)))
    assert [a.lever for a in advice] == ["compile"]
    assert [getattr(a, "lever", None) for a in beside_reference(advice, 98.0, False, "bf16")] == \
        [None, "compile"]
    assert [getattr(a, "lever", None) for a in beside_reference(advice, 98.0, True, "bf16")] == [None]


def test_seed004_a_is_offered_a_larger_micro_batch_with_its_basis(tmp_path):
    frames = list(read_recording(recording("seed004_a_rec", tmp_path)))
    advice = fold(frames, replay=True).view.verdict.advice
    assert advice == (
        "A larger micro-batch (9 of 140 GiB used, tensor active 31%): bigger matmuls fill more of the tensor cores — "
        "most it can win: less than the 63% of the SMs' active time spent outside the tensor cores: the non-matmul "
        "work in it stays (a bound: NVML GPM's tensor and SM activity; a gputop probe at the job's shape with twice "
        "its batch (--batch-size) measures it on this GPU).",)
    assert not any(word in line for line in advice for word in CHECKLIST)
