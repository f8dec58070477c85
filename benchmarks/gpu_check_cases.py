"""The GPU check's cases (benchmarks/gpu_check.py): what each one builds, which of gputop's bottlenecks is right
for it, how long it may take on the GPU and in the CPU dry run, and the command that starts it.

The time budgets are constants, each the most its case may take from its start to its last file; their sum, with
the setup and the packing, must stay under the issue's 8 minutes (``budget_problem``; tests/unit/test_gpu_check.py).
A watched case leaves gputop ``watch_s`` seconds at its end plus a margin for its start and its snapshot
(``watch_margin``); the job before it has the rest to reach its steady state (``steady_lines`` progress lines in
its log).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

HERE = Path(__file__).resolve().parent

TOTAL_LIMIT_S = 480.0  # issue 30: "one script, under 8 minutes on an H100 or H200"
SETUP_S = 10.0  # nanoGPT's files copied, the synthetic tokens written (8 MiB), the GPU read: about 2 s
PACKING_S = 5.0  # the tar of the fixtures (a few MiB of gzipped recordings) and the summary
# The dry run (--cpu), run by a slow test: its budgets are ceilings, not goals (it takes about 90 s on a quiet 2-core
# machine), wide enough that a machine with every core busy (a CI run beside other suites: a 12 s probe budget was
# overrun there) still finishes each case.
CPU_TOTAL_LIMIT_S = 300.0
CPU_SETUP_S = 5.0
CPU_PACKING_S = 5.0
WATCH_MARGIN_S = 6.0  # gputop's start before its --duration begins (imports, NVML), its snapshot, the job's stop
CPU_WATCH_MARGIN_S = 4.0  # measured here: 0.5 s beyond --duration 4 on this 2-core machine, loaded

GPT2_XL = {"n_layer": 48, "n_head": 25, "n_embd": 1600, "block_size": 1024}
XL_TOKENS_PER_ITER = 131_072  # as on the H200 fixtures' run: batch 16 × accumulation 8 × block 1024
BIG_GPU_BYTES = 100 * 2**30  # an H200 (141 GB) takes batch 16; an H100 (80 GB) batch 8 (16 filled 82 GB on the H200)
TINY_GPT = {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64}  # the dry run's shape
TINY_VOCAB = 256  # the dry run's tokens (its meta.pkl): GPT-2's 50,304 logits would be most of a tiny step on a CPU

# What nanoGPT's train.py reads on every case: synthetic tokens (benchmarks/synthetic_tokens.py), no evaluation
# after the first (eval_iters 0: its first estimate_loss then runs no batch, so only the training graph is compiled;
# the H200 fixtures' run compiled an evaluation graph too, about a minute more), no checkpoint written, a line a step.
NANOGPT_COMMON = {"out_dir": "out-gpu-check", "dataset": "synthetic", "eval_interval": 1_000_000, "eval_iters": 0,
                  "log_interval": 1, "always_save_checkpoint": False}

# nanoGPT has no activation checkpointing. configurator.py execs a config file inside train.py after its
# `from model import GPT`, so a config can reach model.Block: each Block's forward then runs under
# torch.utils.checkpoint, its activations dropped and recomputed in the backward pass, as a job that checkpoints
# every layer does (Hugging Face's gradient_checkpointing_enable() wraps each decoder layer the same way).
CHECKPOINT_PATCH = '''\
import sys as _sys
import torch.utils.checkpoint as _checkpoint
_Block = _sys.modules["model"].Block
_plain_forward = _Block.forward
def _checkpointed_forward(self, x):
    return _checkpoint.checkpoint(_plain_forward, self, x, use_reentrant=False)
_Block.forward = _checkpointed_forward
'''

Kind = Literal["probe", "nanogpt", "loop"]


@dataclass(frozen=True)
class Timing:
    budget_s: float  # the most the case may take, from its start to its last file
    watch_s: float = 0.0  # gputop's --duration; 0 for a probe, which is not watched


@dataclass(frozen=True)
class Case:
    name: str
    kind: Kind
    summary: str  # what was built in, in a few words (the summary table)
    built: str  # what was built in, in full
    expected: tuple[str, ...]  # the bottlenecks (probes/frame.py's Bottleneck) right for it; () for a probe
    gpu: Timing
    cpu: Timing
    baseline: str | None = None  # the probe case whose JSON gputop gets as --baseline
    # Progress lines in the job's log before gputop starts: the first iteration holds the warm-up (CUDA's and
    # cuBLAS's first calls, the optimizer's state, torch.compile's graph), so 2 lines means steady.
    steady_lines: int = 2

    def timing(self, cpu: bool) -> Timing:
        return self.cpu if cpu else self.gpu


GPU_BOUND = ("gpu_bound", "gpu_throttled")  # a power-capped H100/H200 holds its clock down: throttled is right too

CASES: tuple[Case, ...] = (
    Case("probe_eager", "probe", "gputop probe, GPT-2 XL, eager",
         "gputop probe --model gpt2-xl --batch-size B --json: the reference training step, eager, bf16 (the CPU: "
         "--model tiny --device cpu)", (), Timing(35), Timing(30)),
    Case("probe_compiled", "probe", "gputop probe, GPT-2 XL, --compile",
         "the same probe with --compile: torch.compile's reference step", (), Timing(90), Timing(30)),
    Case("xl_compiled", "nanogpt", "nanoGPT train.py, GPT-2 XL, compiled, bf16",
         "karpathy/nanoGPT's train.py, unmodified, on synthetic tokens: GPT-2 XL (48 layers, 25 heads, 1600 embd, "
         "block 1024), 131,072 tokens per iteration, compile=True, bf16, scaled_dot_product_attention (its flash "
         "path), fused AdamW: the job this project exists for, watched at steady state with the compiled probe as "
         "--baseline", GPU_BOUND, Timing(170, 30), Timing(40, 4), baseline="probe_compiled", steady_lines=3),
    Case("xl_eager_fp32", "nanogpt", "nanoGPT train.py, GPT-2 XL, eager, fp32",
         "the same train.py with compile=False and dtype='float32' (train.py still allows TF32 matmuls), batch 4 × "
         "accumulation 4: the math in fp32 on a GPU with bf16 tensor cores; the eager probe (bf16) as --baseline",
         GPU_BOUND, Timing(55, 20), Timing(40, 4), baseline="probe_eager"),
    Case("xl_checkpointed", "nanogpt", "nanoGPT train.py, GPT-2 XL, eager, checkpointed",
         "the same train.py, eager, bf16, accumulation 2, with every Block's forward under torch.utils.checkpoint "
         "(a monkeypatch in its config file: gpu_check_cases.CHECKPOINT_PATCH), so the backward pass recomputes "
         "the forward; eager, so that torch/utils/checkpoint.py shows in its stacks; the eager probe as --baseline",
         GPU_BOUND, Timing(55, 20), Timing(40, 4), baseline="probe_eager"),
    Case("launch_bound", "loop", "tiny deep MLP, batch 1: launch-bound",
         "benchmarks/gpu_check_loops.py --mode launch_bound: 24 blocks of Linear+LayerNorm+GELU at width 64, "
         "batch 1, eager AdamW: ~300 kernels of microseconds a step, the main thread launching all the time",
         ("cpu_bound",), Timing(28, 14), Timing(30, 4)),
    Case("data_starved", "loop", "DataLoader decoding in Python: data-starved",
         "benchmarks/gpu_check_loops.py --mode data_starved: a small MLP fed by 2 DataLoader workers that decode "
         "each sample in pure Python (milliseconds each, 64 a batch): the GPU idles between batches",
         ("data_bound",), Timing(28, 14), Timing(30, 4)),
)
CASE_NAMES = tuple(case.name for case in CASES)


def budget_total(cpu: bool) -> float:
    """Setup, every case's budget, and packing: the most the whole check can take."""
    setup, packing = (CPU_SETUP_S, CPU_PACKING_S) if cpu else (SETUP_S, PACKING_S)
    return setup + sum(case.timing(cpu).budget_s for case in CASES) + packing


def budget_problem(cpu: bool) -> str | None:
    """Why the budgets do not fit (the sum over the limit, a watch longer than its case allows), or None."""
    limit = CPU_TOTAL_LIMIT_S if cpu else TOTAL_LIMIT_S
    if (total := budget_total(cpu)) > limit:
        return f"the budgets add up to {total:.0f} s, over the {limit:.0f} s limit"
    for case in CASES:
        timing = case.timing(cpu)
        if (case.kind == "probe") != (timing.watch_s == 0):
            return f"{case.name}: a probe is not watched, every other case is"
        if timing.watch_s and timing.watch_s + watch_margin(cpu) >= timing.budget_s:
            return f"{case.name}: watching {timing.watch_s:.0f} s leaves its job no time to start"
    return None


def watch_margin(cpu: bool) -> float:
    return CPU_WATCH_MARGIN_S if cpu else WATCH_MARGIN_S


def xl_batch(gpu_memory_bytes: int | None) -> int:
    return 16 if (gpu_memory_bytes or 0) >= BIG_GPU_BYTES else 8


def nanogpt_settings(case: Case, cpu: bool, batch: int) -> dict[str, object]:
    """The train.py settings of a nanoGPT case: GPT-2 XL on the GPU; on the CPU tiny, fp32 and eager (a compile
    there would outlast the dry run's budget: torch.compile of even the tiny model takes 15 s on 2 cores)."""
    if cpu:
        settings: dict[str, object] = {**TINY_GPT, "device": "cpu", "dtype": "float32", "batch_size": 4,
                                       "gradient_accumulation_steps": 2, "max_iters": 1000,
                                       "compile": False}
    elif case.name == "xl_compiled":
        settings = {**GPT2_XL, "batch_size": batch, "gradient_accumulation_steps": XL_TOKENS_PER_ITER // (batch * 1024),
                    "compile": True, "dtype": "bfloat16", "max_iters": 60}
    elif case.name == "xl_eager_fp32":  # batch 4: fp32 activations of batch 16 would not fit an H100
        settings = {**GPT2_XL, "batch_size": 4, "gradient_accumulation_steps": 4, "compile": False,
                    "dtype": "float32", "max_iters": 200}
    else:
        settings = {**GPT2_XL, "batch_size": batch, "gradient_accumulation_steps": 2, "compile": False,
                    "dtype": "bfloat16", "max_iters": 200}
    # max_iters: the job ends by itself a few minutes on, should the check be killed before it stops it
    return {**NANOGPT_COMMON, **settings}


def nanogpt_config(case: Case, settings: dict[str, object]) -> str:
    """The config file train.py is given: one literal assignment a line (gputop reads these with ast, as
    probes/models/nanogpt_config.py does), after the checkpointing patch where the case has one."""
    lines = [f"# Written by benchmarks/gpu_check.py for its case {case.name}: karpathy/nanoGPT's train.py reads it."]
    if case.name == "xl_checkpointed":
        lines.append(CHECKPOINT_PATCH)
    lines += [f"{key} = {value!r}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def probe_arguments(case: Case, cpu: bool, batch: int) -> list[str]:
    """`gputop probe`'s arguments: GPT-2 XL at the job's batch on the GPU; the tiny preset, briefly, on the CPU."""
    compiled = case.name == "probe_compiled" and not cpu
    shape = ["--model", "tiny", "--device", "cpu", "--steps", "2", "--warmup", "1"] if cpu \
        else ["--model", "gpt2-xl", "--batch-size", str(batch)]
    return [*shape, "--compile" if compiled else "--no-compile", "--json"]


def loop_command(case: Case, cpu: bool) -> list[str]:
    return [sys.executable, str(HERE / "gpu_check_loops.py"), "--mode", case.name, "--device",
            "cpu" if cpu else "cuda", "--seconds", f"{case.timing(cpu).budget_s:g}"]
