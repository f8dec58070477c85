"""The nanoGPT case of DESIGN.md, constructed: GPT-2 XL, 1,048,576 tokens per iteration (batch 16 × block 1024 ×
grad-accum 64), 21 s/iter on an H200 while the log prints mfu 164%. What `gputop probe` would report for it
(`xl_probe_on_h200`), what the log probe reads (`nanogpt_reading`, `nanogpt_progress`), and frames of the job
bound on its GPU (`gpu_bound_frames`)."""

from __future__ import annotations

from probes.frame import ProgressReading
from probes.models import PRESETS
from probes.models.gpt2 import flops_per_token
from probes.models.peaks import peak_flops
from probes.reference.gpt_probe import ProbeResult
from support.frames import FORWARD, h200, main_count, make_frame

H200 = "NVIDIA H200"
CASE_TOKENS = 1_048_576  # batch 16 × block 1024 × grad-accum 64


def xl_probe_on_h200(**changes) -> ProbeResult:
    """What `gputop probe --model gpt2-xl --batch-size 16 --grad-accum 64` would report on an H200 whose
    predicted iteration is 20.4 s: 64 × 0.3125 s forward+backward + 0.4 s optimizer."""
    shape = PRESETS["gpt2-xl"]
    per_token = flops_per_token(shape)
    peak = peak_flops(H200, "bf16")
    fields = dict(
        model="gpt2-xl", shape=shape, device="cuda:0", device_name=H200, torch_version="2.5.1", dtype="bf16",
        tf32=True, compiled=True, fused_adamw=True, params=1_555_201_600,
        params_with_position_embeddings=1_556_840_000, flops_per_token=per_token, flops_formula="6·N + 12·L·H·Q·T",
        batch_size=16, grad_accum=64, tokens_per_step=16_384, tokens_per_iter=CASE_TOKENS, warmup_steps=3,
        timed_steps=10, timing="CUDA events", first_step_seconds=60.0, compile_seconds=59.7, step_seconds=0.7125,
        step_seconds_min=0.71, step_seconds_max=0.72, fwd_bwd_seconds=0.3125, optimizer_seconds=0.4,
        iter_seconds=20.4, tokens_per_s=CASE_TOKENS / 20.4, achieved_flops_per_s=per_token * CASE_TOKENS / 20.4,
        peak_dtype="bf16", peak_flops_per_s=peak.flops_per_s, peak_source=peak.source,
        mfu=per_token * CASE_TOKENS / 20.4 / peak.flops_per_s, peak_memory_bytes=120 * 2**30, losses=(11.0, 10.5),
    )
    return ProbeResult(**{**fields, **changes})


def nanogpt_reading(seconds_per_iter: float = 21.0, reported_mfu_pct: float | None = 164.0) -> ProgressReading:
    return ProgressReading(source="train.log", format="nanogpt", iteration=40, seconds_per_iter=seconds_per_iter,
                           reported_mfu_pct=reported_mfu_pct, last_line="iter 40: loss 3.1, time 21000.00ms")


NANOGPT_LOG = "/home/alice/nanogpt/out.log"


def nanogpt_progress(i: int, seconds: float = 21.0) -> ProgressReading:
    """What the log probe reads from nanoGPT's "iter N: loss L, time T ms, mfu M%" lines: one per iteration."""
    iteration = i // 21  # a new line every 21 ticks
    return ProgressReading(source=NANOGPT_LOG, format="nanogpt", iteration=iteration, seconds_per_iter=seconds,
                           reported_mfu_pct=164.0, last_update=1_700_000_000.0 + 21.0 * iteration)


def gpu_bound_frames(n: int = 8, seconds: float = 21.0):
    return [make_frame(i, counts=[main_count(FORWARD, n=10)], cpu=35.0, gpu=h200(),
                       progress=nanogpt_progress(i * 21, seconds)) for i in range(n)]
