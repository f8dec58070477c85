"""The GPU check's cases (benchmarks/gpu_check.py): what each one builds, which of gputop's bottlenecks is right
for it, how long it may take on the GPU and in the CPU dry run, and the command that starts it.

The time budgets are constants, each the most its case may take from its start to its last file (its lever's fix
run included); their sum, with the preflight and the packing, must stay under ``TOTAL_LIMIT_S`` (``budget_problem``;
tests/unit/test_gpu_check.py), so that the check is one call of the `device` tool (600 s at most). A watched case
leaves gputop ``watch_s`` seconds plus a margin for its start and its snapshot (``watch_margin``), and ``fix_s`` for
the run of the same job with its lever pulled; the job has the rest to reach its steady state (``steady_lines``
progress lines in its log).

The compile budgets rest on the one cold compile measured on a GPU: the H200 fixtures' nanoGPT GPT-2 XL run
(tests/fixtures/h200/README.md) compiled its evaluation and training graphs from a cold cache in about 130 s (model
built at ~10 s, iterations from ~140 s). The check compiles one graph per run (``eval_iters = 0``), and runs the
compiled probe first, cold; the probe's 60 s compile of that README came after the job had filled the cache and is
no budget. Each run records its compile time (the probe's ``compile_seconds``, the job's first iteration), so the
first GPU run measures them.

Each case says which lever it is built for (``lever``: the one gputop should put first) and which levers its job
already pulls (``pulled``): an offered lever in that set fails the case (gpu_check_levers.py). ``FIXES`` says how
the check pulls a lever on a job of each kind: the same job with one setting changed.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

HERE = Path(__file__).resolve().parent

# Issue 41: one call of the `device` tool, whose commands run 600 s at most: 560 s of check, 30 s to spare for the
# machine's copy of the tree and gpu_check.sh's start (the call's timeout_s is 590).
TOTAL_LIMIT_S = 560.0
DEVICE_TIMEOUT_S = 590
# The preflight (what is missing, installed from PyPI or the carried wheels: a pip install of three small wheels),
# nanoGPT's files copied, the synthetic tokens written (8 MiB), the GPU read.
SETUP_S = 20.0
PACKING_S = 5.0  # the tar of the fixtures (a few MiB of gzipped recordings) and the summary
# The dry run (--cpu), run by a slow test: its budgets are ceilings, not goals, wide enough that a machine with every
# core busy (a CI run beside other suites: a 12 s probe budget was overrun there) still finishes each case.
CPU_TOTAL_LIMIT_S = 320.0
CPU_SETUP_S = 5.0
CPU_PACKING_S = 5.0
WATCH_MARGIN_S = 6.0  # gputop's start before its --duration begins (imports, NVML), its snapshot, the job's stop
CPU_WATCH_MARGIN_S = 4.0  # measured here: 0.5 s beyond --duration 4 on this 2-core machine, loaded

GPT2_XL = {"n_layer": 48, "n_head": 25, "n_embd": 1600, "block_size": 1024}
XL_TOKENS_PER_ITER = 131_072  # as on the H200 fixtures' run: batch 16 × accumulation 8 × block 1024
BIG_GPU_BYTES = 100 * 2**30  # an H200 (141 GB) takes batch 16; an H100 (80 GB) batch 8 (16 filled 82 GB on the H200)
TINY_GPT = {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64}  # the dry run's shape: gputop probe's tiny
# The dry run's vocabulary (its meta.pkl; GPT-2's 50,304 logits would be most of a tiny step on a CPU), and the
# probe's --vocab-size. gputop cannot open meta.pkl (a pickle): it solves the vocabulary from train.py's "number of
# parameters: 0.12M" line, which is rounded to 10,000 parameters, ±78 tokens of a 64-wide model. With the tiny
# preset's 256 the count is 115,008, printed 0.12M, and solved as 334: the probe read as another model and the
# baseline comparison never ran. 334 is the vocabulary whose count (98,624 + 334 × 64 = 120,000) the line prints
# exactly, so the job's model is the probe's and gputop's reading of it is right.
TINY_VOCAB = 334

# What nanoGPT's train.py reads on every case: synthetic tokens (benchmarks/synthetic_tokens.py), no evaluation
# after the first (eval_iters 0: its first estimate_loss then runs no batch, so only the training graph is compiled;
# the H200 fixtures' run compiled an evaluation graph too, about a minute more), no checkpoint written, a line a step.
NANOGPT_COMMON = {"out_dir": "out-gpu-check", "dataset": "synthetic", "eval_interval": 1_000_000, "eval_iters": 0,
                  "log_interval": 1, "always_save_checkpoint": False}

# train.py sets torch.backends.cuda.matmul.allow_tf32 and cudnn.allow_tf32 to True after it runs its config, so a
# config that sets them False is overridden. This one sets them False and puts a guard in front of each that drops the
# later assignment of True (and says so in the log), so the fp32 case runs its matmuls in true fp32 on the CUDA cores.
# The job also runs with NVIDIA_TF32_OVERRIDE=0 (TF32_OFF_ENV), cuBLAS's and cuDNN's own switch, whatever torch says.
TF32_OFF_PATCH = '''\
import torch as _torch
class _Tf32Off:
    def __init__(self, inner, name):
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_name", name)
    def __getattr__(self, key):
        return getattr(self._inner, key)
    def __setattr__(self, key, value):
        if key == "allow_tf32" and value:
            print(f"gpu_check: {self._name}.allow_tf32 = True dropped: this case runs true fp32", flush=True)
            return
        setattr(self._inner, key, value)
_torch.backends.cuda.matmul.allow_tf32 = False
_torch.backends.cudnn.allow_tf32 = False
_torch.backends.cuda.matmul = _Tf32Off(_torch.backends.cuda.matmul, "torch.backends.cuda.matmul")
_torch.backends.cudnn = _Tf32Off(_torch.backends.cudnn, "torch.backends.cudnn")
'''
TF32_OFF_ENV = {"NVIDIA_TF32_OVERRIDE": "0"}

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
    budget_s: float  # the most the case may take, from its start to its last file (its fix run included)
    watch_s: float = 0.0  # gputop's --duration; 0 for a probe, which is not watched
    fix_s: float = 0.0  # of the budget, what the run of the same job with its lever pulled may take


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
    lever: str | None = None  # the lever (probes/diagnosis/levers.py) it is built for: gputop's first, on the GPU

    def timing(self, cpu: bool) -> Timing:
        return self.cpu if cpu else self.gpu


GPU_BOUND = ("gpu_bound", "gpu_throttled")  # a power-capped H100/H200 holds its clock down: throttled is right too
SAME_JOB = "the same train.py at the compiled case's settings (batch B, 131,072 tokens per iteration)"

CASES: tuple[Case, ...] = (
    Case("probe_eager", "probe", "gputop probe, GPT-2 XL, eager",
         "gputop probe --model gpt2-xl --batch-size B --json: the reference training step, eager, bf16 (the CPU: "
         "--model tiny --vocab-size 334 --device cpu)", (), Timing(35), Timing(25)),
    Case("probe_compiled", "probe", "gputop probe, GPT-2 XL, --compile",
         "the same probe with --compile: torch.compile's reference step, compiled first in the check, from a cold "
         "cache", (), Timing(110), Timing(25)),
    Case("xl_compiled", "nanogpt", "nanoGPT train.py, GPT-2 XL, compiled, bf16",
         "karpathy/nanoGPT's train.py, unmodified, on synthetic tokens: GPT-2 XL (48 layers, 25 heads, 1600 embd, "
         "block 1024), 131,072 tokens per iteration, compile=True, bf16, scaled_dot_product_attention (its flash "
         "path), fused AdamW: the job this project exists for, watched at steady state with the compiled probe as "
         "--baseline", GPU_BOUND, Timing(140, 20), Timing(30, 4), baseline="probe_compiled", steady_lines=3),
    Case("xl_eager", "nanogpt", "nanoGPT train.py, GPT-2 XL, eager, bf16",
         f"{SAME_JOB} with compile=False: torch.compile is its lever, measured by the compiled case's run of the "
         "same job; the eager probe as --baseline", GPU_BOUND, Timing(40, 15), Timing(30, 4), baseline="probe_eager",
         lever="compile"),
    Case("xl_checkpointed", "nanogpt", "nanoGPT train.py, GPT-2 XL, eager, checkpointed",
         f"{SAME_JOB}, eager, with every Block's forward under torch.utils.checkpoint (a monkeypatch in its config "
         "file: gpu_check_cases.CHECKPOINT_PATCH), so the backward pass recomputes the forward; eager, so that "
         "torch/utils/checkpoint.py shows in its stacks. Dropping the checkpointing is its lever, measured by the "
         "eager case's run of the same job; the eager probe as --baseline",
         GPU_BOUND, Timing(40, 15), Timing(30, 4), baseline="probe_eager", lever="drop_checkpointing"),
    Case("xl_eager_tf32", "nanogpt", "nanoGPT train.py, GPT-2 XL, eager, fp32 (TF32)",
         "the same train.py with compile=False and dtype='float32', batch 4 × accumulation 4 (16,384 tokens per "
         "iteration): fp32 weights and math, its matmuls on the tensor cores as TF32 (train.py sets allow_tf32); "
         "bf16 autocast is its lever, measured by a run at dtype='bfloat16'; the eager probe (bf16) as --baseline",
         GPU_BOUND, Timing(60, 12, 25), Timing(30, 4, 20), baseline="probe_eager", lever="bf16_autocast"),
    Case("xl_eager_fp32", "nanogpt", "nanoGPT train.py, GPT-2 XL, eager, true fp32 (TF32 off)",
         "the TF32 case with allow_tf32 off for matmuls and cuDNN (gpu_check_cases.TF32_OFF_PATCH in its config, "
         "and NVIDIA_TF32_OVERRIDE=0): every matmul on the FP32 pipes, the tensor cores idle, as FP32_BUSY_PCT "
         "(probes/diagnosis/gpu_limit.py) is meant to see; bf16 autocast is its lever, measured by the TF32 case's "
         "bf16 run (the same job with the lever pulled)", GPU_BOUND, Timing(45, 12), Timing(30, 4),
         baseline="probe_eager", lever="bf16_autocast"),
    Case("launch_bound", "loop", "tiny deep MLP, batch 1: launch-bound",
         "benchmarks/gpu_check_loops.py --mode launch_bound: 24 blocks of Linear+LayerNorm+GELU at width 64, "
         "batch 1, eager AdamW: ~300 kernels of microseconds a step, the main thread launching all the time; CUDA "
         "graphs are its lever, measured by the same loop with its whole step captured in one (--graphs)",
         ("cpu_bound",), Timing(35, 12, 12), Timing(30, 4, 12), lever="cuda_graphs"),
    Case("data_starved", "loop", "DataLoader decoding in Python: data-starved",
         "benchmarks/gpu_check_loops.py --mode data_starved: a small MLP fed by 2 DataLoader workers that decode "
         "each sample in pure Python (milliseconds each, 64 a batch): the GPU idles between batches; no lever of "
         "the step is its fix (the input pipeline is)", ("data_bound",), Timing(25, 12), Timing(30, 4)),
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
        if timing.watch_s and timing.watch_s + watch_margin(cpu) + timing.fix_s >= timing.budget_s:
            return f"{case.name}: watching {timing.watch_s:.0f} s leaves its job no time to start"
    return None


def watch_margin(cpu: bool) -> float:
    return CPU_WATCH_MARGIN_S if cpu else WATCH_MARGIN_S


def xl_batch(gpu_memory_bytes: int | None) -> int:
    return 16 if (gpu_memory_bytes or 0) >= BIG_GPU_BYTES else 8


# --- a job, and the same job with one lever pulled -----------------------------------------------------------------

# The levers the check can pull itself, by the kind of job: the same job with one setting changed. Any other lever
# gputop puts first (the power limit, a fused optimizer, fused attention) is recorded, not measured.
FIXES: dict[Kind, frozenset[str]] = {
    "nanogpt": frozenset({"bf16_autocast", "compile", "drop_checkpointing", "larger_micro_batch"}),
    "loop": frozenset({"cuda_graphs", "launch_batch"}),
    "probe": frozenset(),
}
LAUNCH_BATCH = 8  # the launch-bound loop's larger micro-batch: 8 samples a step for its 1
GPU_ONLY_FIXES = frozenset({"cuda_graphs"})  # CUDA graphs need a GPU: on the CPU the next lever of the loop is run


@dataclass(frozen=True)
class Job:
    """What one run of a nanoGPT case is: its train.py settings and the patches in its config file."""

    settings: tuple[tuple[str, object], ...]
    patches: tuple[str, ...] = ()

    def key(self) -> str:
        """Two runs with the same key are the same job: one's times measure the other's fix."""
        return repr((self.settings, self.patches))

    def get(self, name: str) -> object:
        return dict(self.settings).get(name)


def nanogpt_job(case: Case, cpu: bool, batch: int, fix: str | None = None) -> Job:
    """A nanoGPT case's job, or the same job with `fix` (a lever of FIXES["nanogpt"]) pulled: GPT-2 XL on the GPU;
    on the CPU tiny and eager (a compile there would outlast the dry run's budget: torch.compile of even the tiny
    model takes 15 s on 2 cores, so the compiled case's CPU job is the eager one's and measures its fix), its
    dtype kept (train.py runs fp32 without autocast on the CPU whatever it says)."""
    xl = {**GPT2_XL, "batch_size": batch, "gradient_accumulation_steps": XL_TOKENS_PER_ITER // (batch * 1024),
          "compile": False, "dtype": "bfloat16", "max_iters": 100}  # the same in every job: one's run is another's fix
    if case.name == "xl_compiled":
        xl |= {"compile": True}
    elif case.name in ("xl_eager_tf32", "xl_eager_fp32"):  # batch 4: fp32 activations of 16 would not fit an H100
        xl |= {"batch_size": 4, "gradient_accumulation_steps": 4, "dtype": "float32"}
    patches: tuple[str, ...] = {"xl_checkpointed": ("checkpoint",), "xl_eager_fp32": ("tf32_off",)}.get(case.name, ())
    if fix == "compile":
        xl["compile"] = True
    elif fix == "bf16_autocast":  # the lever's words: autocast, and TF32 for what stays in fp32
        xl["dtype"] = "bfloat16"
        patches = tuple(patch for patch in patches if patch != "tf32_off")
    elif fix == "drop_checkpointing":
        patches = tuple(patch for patch in patches if patch != "checkpoint")
    elif fix == "larger_micro_batch":  # twice the sequences a micro-step, half the micro-steps: the same tokens
        accumulation = int(xl["gradient_accumulation_steps"])  # type: ignore[call-overload]
        xl |= {"batch_size": int(xl["batch_size"]) * 2,  # type: ignore[call-overload]
               "gradient_accumulation_steps": max(1, accumulation // 2)}
    elif fix is not None:
        raise ValueError(f"no fix {fix!r} for a nanoGPT job")
    if cpu:  # the fp32 cases' smaller micro-batch kept, so that their bf16 run is a job of its own here too
        micro = 2 if case.name in ("xl_eager_tf32", "xl_eager_fp32") else 4
        micro *= 2 if fix == "larger_micro_batch" else 1
        tiny = {**TINY_GPT, "device": "cpu", "dtype": xl["dtype"], "batch_size": micro,
                "gradient_accumulation_steps": 8 // micro, "max_iters": 1000, "compile": False}
        return Job(tuple({**NANOGPT_COMMON, **tiny}.items()), patches)
    # max_iters: the job ends by itself a few minutes on, should the check be killed before it stops it
    return Job(tuple({**NANOGPT_COMMON, **xl}.items()), patches)


def nanogpt_settings(case: Case, cpu: bool, batch: int) -> dict[str, object]:
    """The train.py settings of a nanoGPT case's own job."""
    return dict(nanogpt_job(case, cpu, batch).settings)


PATCHES = {"checkpoint": CHECKPOINT_PATCH, "tf32_off": TF32_OFF_PATCH}


def nanogpt_config(case: Case, settings: dict[str, object] | Job, fix: str | None = None) -> str:
    """The config file train.py is given: one literal assignment a line (gputop reads these with ast, as
    probes/models/nanogpt_config.py does), after the case's patches (checkpointing, TF32 off) where it has them."""
    job = settings if isinstance(settings, Job) else Job(tuple(settings.items()), nanogpt_job(case, True, 4).patches)
    pulled = f", its lever {fix} pulled" if fix else ""
    lines = [f"# Written by benchmarks/gpu_check.py for its case {case.name}{pulled}: karpathy/nanoGPT's train.py "
             "reads it."]
    lines += [PATCHES[patch] for patch in job.patches]
    lines += [f"{key} = {value!r}" for key, value in job.settings]
    return "\n".join(lines) + "\n"


def job_environment(job: Job) -> dict[str, str]:
    """What the job's environment adds: cuBLAS's and cuDNN's own TF32 switch off where the job runs true fp32."""
    return dict(TF32_OFF_ENV) if "tf32_off" in job.patches else {}


def pulled_levers(case: Case, cpu: bool, fix: str | None = None) -> frozenset[str]:
    """The levers a case's job already pulls as it runs (on the GPU, or on the CPU), whose offer fails the case:
    nanoGPT's train.py always uses scaled_dot_product_attention (fused attention) and, on CUDA, fused AdamW; bf16
    autocast where its dtype is bf16 on a GPU; compile where it compiles; no checkpointing unless patched in. The
    loops' AdamW and SGD run foreach (a few kernels over all parameters, not a loop per parameter) on CUDA."""
    if case.kind == "probe":
        return frozenset()
    if case.kind == "loop":
        pulled = set() if cpu else {"fused_optimizer"}
        return frozenset(pulled | ({"cuda_graphs"} if fix == "cuda_graphs" else set()))
    job = nanogpt_job(case, cpu, 16, fix)
    pulled = {"fused_attention"}
    if not cpu:
        pulled.add("fused_optimizer")
        if job.get("dtype") in ("bfloat16", "float16"):
            pulled.add("bf16_autocast")
    if job.get("compile"):
        pulled.add("compile")
    if "checkpoint" not in job.patches:
        pulled.add("drop_checkpointing")
    return frozenset(pulled)


def fix_to_run(case: Case, lever: str | None, cpu: bool) -> str | None:
    """The lever the check pulls on this case: gputop's first where the check can pull it (FIXES); in the dry run,
    where gputop offers none the check can pull (the CPU is not the GPU it was built for), the case's own lever, or
    on the CPU, for a lever that needs a GPU, the next one of its kind (the loop's larger batch for CUDA graphs)."""
    if lever is not None and lever in FIXES[case.kind] and not (cpu and lever in GPU_ONLY_FIXES):
        return lever
    if not cpu or case.lever is None:
        return None
    if case.lever in GPU_ONLY_FIXES:
        return "launch_batch" if case.kind == "loop" else None
    return case.lever


def probe_arguments(case: Case, cpu: bool, batch: int) -> list[str]:
    """`gputop probe`'s arguments: GPT-2 XL at the job's batch on the GPU; the tiny preset at the dry run's
    vocabulary (TINY_VOCAB), briefly, on the CPU."""
    compiled = case.name == "probe_compiled" and not cpu
    shape = ["--model", "tiny", "--vocab-size", str(TINY_VOCAB), "--device", "cpu", "--steps", "2", "--warmup", "1"] \
        if cpu else ["--model", "gpt2-xl", "--batch-size", str(batch)]
    return [*shape, "--compile" if compiled else "--no-compile", "--json"]


def loop_command(case: Case, cpu: bool, fix: str | None = None) -> list[str]:
    """The loop's command line; with `fix` the same loop with its lever pulled (its whole step in a CUDA graph, or
    LAUNCH_BATCH samples a step)."""
    seconds = case.timing(cpu).budget_s  # its own end, should the check be stopped: the check stops it sooner
    extra = {"cuda_graphs": ["--graphs"], "launch_batch": ["--batch", str(LAUNCH_BATCH)], None: []}[fix]
    return [sys.executable, str(HERE / "gpu_check_loops.py"), "--mode", case.name, "--device",
            "cpu" if cpu else "cuda", "--seconds", f"{seconds:g}", *extra]


def fix_units(case: Case, fix: str | None) -> int:
    """How many of the base job's units of work one progress line of the fixed run holds (its times are divided by
    it): the launch-bound loop's larger batch does 8 samples a step; a nanoGPT iteration keeps its tokens."""
    return LAUNCH_BATCH if fix == "launch_batch" else 1
