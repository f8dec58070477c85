"""The levers left to a GPU-bound or launch-bound step, one ordered list (LEVERS): each offered only where what the
GPU does (GpuLimit, gpu_limit.py) and what the step already does (StepFacts, step_facts.py) say it applies and the
job does not already pull it, each with the most it can win and the basis of that figure: a measured share where
gputop has one, else an estimate that says what it rests on.

An unknown fact (None in StepFacts) offers no lever: "if the job does not already compile, compile it" is the
fact-free checklist this list replaces (issue 30). So an
eager model is told to compile only where its stacks or command line show it eager; bf16 only where the GPU's pipes
or the compiled code's buffers show fp32 math and no autocast was seen.

A lever's advice is one sentence a person acts on: what to do, then "most it can win: …" with the gain's kind and
basis (probes/diagnosis/claims.py turns the typed gain into those words).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from probes.diagnosis.claims import Advice, Gain, lever_advice
from probes.diagnosis.gpu_limit import TENSOR_BOUND_PCT, THROTTLE_REASONS, GpuLimit, clock_cap
from probes.diagnosis.gpu_summary import GpuSummary
from probes.diagnosis.step_facts import StepFacts
from probes.diagnosis.step_marks import SYNC_WORDS
from probes.models.peaks import GpuPeak, lookup_gpu

# GPU memory below this share of the total leaves room for more activations (a larger micro-batch, or the
# activations checkpointing frees): the gpu rule's long-standing bound for "memory allows".
MEMORY_ROOM_FRACTION: Final = 0.7
# gputop probe's GPT-2 XL step on an H200, bf16, fused AdamW, batch 16 (tests/fixtures/h200/gpt2xl_probe*.json).
_PROBE_EAGER_S: Final = 0.357
_PROBE_COMPILED_S: Final = 0.330
_HW_SLOWDOWNS: Final = ("hw_slowdown", "hw_power_brake_slowdown", "board_limit", "reliability")
# A limit within this of the board's maximum is at it (NVML reports both in milliwatts; boards round).
POWER_LIMIT_SLACK_W: Final = 1.0
# The GPU whose peaks stand in for the job's where gputop's table does not know it.
_REFERENCE_GPU: Final = "NVIDIA H100 80GB HBM3"
# fp32 math with the tensor cores this busy runs its matmuls as TF32: plain FP32 never touches them.
TF32_TENSOR_ACTIVE_PCT: Final = 10.0


@dataclass(frozen=True)
class Seen:
    """What a lever is judged on: the step's facts, the class inside the GPU, the GPUs' readings (the cap levers
    name the power limit and the temperature) and whether the step is launch-bound (the cpu_bound rule judges it
    also where the GPU gives no GPM, from its power)."""

    step: StepFacts
    limit: GpuLimit | None
    gpu: GpuSummary
    launch_bound: bool = False


@dataclass(frozen=True)
class Lever:
    """One lever: whether it applies, what to do, and its gain. `inside_step`: False for the board's caps, which
    a step at its reference's rate still has (the reference ran under the same cap)."""

    name: str
    inside_step: bool
    applies: Callable[[Seen], bool]
    action: Callable[[Seen], str]
    gain: Callable[[Seen], Gain | None]

    def advice(self, seen: Seen) -> Advice:
        return lever_advice(self.action(seen), self.name, self.gain(seen))


def _gib(value: int) -> str:
    return f"{value / 2**30:.0f}"


def _memory_room(seen: Seen) -> bool:
    memory = seen.step.gpu_memory
    return memory is not None and memory.value[0] < MEMORY_ROOM_FRACTION * memory.value[1]


def _memory_words(seen: Seen) -> str:
    memory = seen.step.gpu_memory
    return "" if memory is None else f"{_gib(memory.value[0])} of {_gib(memory.value[1])} GiB used"


def _figure(seen: Seen, name: str) -> float | None:
    figure = seen.limit.figure(name) if seen.limit is not None else None
    return figure.value if figure is not None else None


def _held(seen: Seen, reasons: tuple[str, ...]) -> bool:
    cap = clock_cap(seen.gpu)
    return cap is not None and any(r in reasons for r in cap.reasons)


def _clock_gain(seen: Seen) -> Gain:
    cap = clock_cap(seen.gpu)
    fraction = cap.clock_fraction if cap is not None else 1.0
    return Gain(f"~{100 * (1 / fraction - 1):.0f}%",
                f"the SM clock runs at {100 * fraction:.0f}% of its maximum, and a step speeds up at most in "
                "proportion to its clock (less where memory, not math, holds it)", "bound")


def _power_raisable(seen: Seen) -> bool:
    """The limit is below the board's maximum, or the maximum was not read (then the advice says how to read it)."""
    limit, most = seen.gpu.power_limit_w, seen.gpu.power_max_limit_w
    return limit is None or most is None or limit < most - POWER_LIMIT_SLACK_W


def _power_action(seen: Seen) -> str:
    limit, most = seen.gpu.power_limit_w, seen.gpu.power_max_limit_w
    if limit is not None and most is not None:
        return (f"The power limit ({limit:.0f} W) caps the clock and the board allows {most:.0f} W: raise it with "
                f"nvidia-smi -pl {most:.0f} if the site allows")
    at = f" ({limit:.0f} W)" if limit else ""
    return (f"The power limit{at} caps the clock: gputop could not read the board's maximum; nvidia-smi -q -d POWER "
            "shows it (Max Power Limit), and nvidia-smi -pl raises the limit where it is below that")


def _power_gain(seen: Seen) -> Gain | None:
    """A clock gain only where the board's maximum was read above the limit: without it no gain is claimed."""
    return _clock_gain(seen) if seen.gpu.power_max_limit_w is not None else None


def _thermal_action(seen: Seen) -> str:
    temps = [d.temperature_c for d in seen.gpu.devices if d.temperature_c is not None]
    hot = f" (now {max(temps):.0f} °C)" if temps else ""
    return f"Thermal slowdown{hot}: check cooling and airflow; nvidia-smi -q -d TEMPERATURE"


def _sm_idle_gain(seen: Seen) -> Gain:
    sm = _figure(seen, "SM active")
    if sm is None:
        return Gain("the gaps between kernels", "this GPU gives no SM activity, so their share is not read",
                    "estimate")
    # GPM's SM activity is each SM's share of cycles with a warp resident, averaged over the SMs: its rest is SM time
    # with nothing on it, between kernels or beside a kernel too small to fill every SM. Launch levers win at most that.
    return Gain(f"the {100 - sm:.0f}% of the SMs' time with no work on them", f"SM active {sm:.0f}%, NVML GPM",
                "bound")


def _compile_gain(seen: Seen) -> Gain:
    return Gain(f"~{100 * (_PROBE_EAGER_S / _PROBE_COMPILED_S - 1):.0f}% on a bf16 GPT-2 XL step, more where small "
                "kernels dominate",
                f"gputop probe's GPT-2 XL step on an H200 took {_PROBE_EAGER_S:.3f} s eager, "
                f"{_PROBE_COMPILED_S:.3f} s compiled", "estimate")


def _fp32_seen(seen: Seen) -> str:
    if seen.limit is not None and seen.limit.kind == "fp32_math":
        fp32 = _figure(seen, "FP32 pipe")
        return f"FP32 pipe {fp32:.0f}% while the tensor cores idle" if fp32 is not None else "fp32 math"
    dtype = seen.step.compute_dtype
    return f"computes in float32: {dtype.source()}" if dtype is not None else "fp32 math"


def _bf16_applies(seen: Seen) -> bool:
    dtype = seen.step.compute_dtype
    autocast = seen.step.autocast
    # Autocast seen (bf16, fp16, or its dtype unread): the job already does it; except autocast whose dtype is unread
    # in a job that says it computes in float32 (nanoGPT's --dtype=float32 wraps each step in
    # torch.amp.autocast(dtype=torch.float32): autocast's dispatch runs, its precision stays fp32).
    if autocast is not None and not (autocast.value == "on" and dtype is not None and dtype.value == "float32"):
        return False
    if dtype is not None and dtype.value != "float32":
        return False
    return (seen.limit is not None and seen.limit.kind == "fp32_math") or dtype is not None


def _tf32_seen(seen: Seen) -> bool:
    """fp32 math with the tensor cores at work: its matmuls run as TF32 (torch's allow_tf32, nanoGPT sets it)."""
    tensor = _figure(seen, "tensor active")
    return tensor is not None and tensor >= TF32_TENSOR_ACTIVE_PCT


def _bf16_action(seen: Seen) -> str:
    action = (f"bf16 autocast ({_fp32_seen(seen)}): torch.autocast('cuda', dtype=torch.bfloat16) around the "
              "forward")
    if _tf32_seen(seen):
        return action  # TF32 is already on: it is not offered again
    return action + ", and TF32 (torch.backends.cuda.matmul.allow_tf32 = True) for matmuls left in fp32"


def _peaks(seen: Seen) -> GpuPeak:
    """The peaks table's entry for the job's GPU (gputop's table, probes/models/peaks.py), else the H100 SXM's: the
    ratio of two of its dense peaks is the basis of the bf16 lever's estimate."""
    name = seen.gpu.devices[0].name if seen.gpu.devices else None
    match = lookup_gpu(name) or lookup_gpu(_REFERENCE_GPU)
    assert match is not None, _REFERENCE_GPU
    return match.entry


def _bf16_gain(seen: Seen) -> Gain:
    peaks = _peaks(seen)
    bf16, tf32, fp32 = peaks.bf16 or 0.0, peaks.tf32 or 0.0, peaks.fp32 or 0.0
    if _tf32_seen(seen):
        share = "half" if abs(tf32 / bf16 - 0.5) < 0.05 else f"{tf32 / bf16:.0%} of"
        return Gain("up to about half the matmuls' time; the rest of the step does not shrink",
                    f"the tensor cores are at work (tensor active {_figure(seen, 'tensor active'):.0f}%), so the "
                    f"fp32 matmuls already run as TF32, whose dense peak is {share} bf16's ({tf32:.0f} against "
                    f"{bf16:.0f} TFLOP/s on the {peaks.model})", "estimate")
    return Gain("the matmuls' time several-fold; the rest of the step does not shrink",
                f"the {peaks.model}'s dense bf16 tensor-core peak is about {bf16 / fp32:.0f}× its FP32 rate "
                f"({bf16:.0f} against {fp32:.0f} TFLOP/s), with the tensor cores idle now", "estimate")


def _tensor_low(seen: Seen) -> bool:
    tensor = _figure(seen, "tensor active")
    return tensor is not None and tensor < TENSOR_BOUND_PCT


def _outside_tensor_pct(seen: Seen) -> float:
    tensor, sm = _figure(seen, "tensor active"), _figure(seen, "SM active")
    return 100.0 - 100.0 * tensor / sm if tensor is not None and sm else 100.0


def _share_gain(fact_share: float | None, samples: int | None, what: str) -> Gain:
    """The share of the main thread's samples a fix removes: a bound on the step time it wins, where the CPU's time
    is the step's (a launch-bound step; a GPU-bound one hides it behind the GPU's queue)."""
    if fact_share is None:
        return Gain(f"the time {what}", "not sampled often enough to say its share", "estimate")
    return Gain(f"the {100 * fact_share:.0f}% of main-thread samples {what}", "py-spy's samples of this job", "bound",
                samples)


def _optimizer_gain(seen: Seen) -> Gain:
    """A launch-bound step waits on the CPU, so the loop's share of its samples bounds the gain; a step the GPU
    holds hides the CPU's time behind the queued kernels, and the loop's cost is its many small kernels on the
    GPU, which py-spy does not see."""
    optimizer = seen.step.optimizer
    if seen.launch_bound or seen.limit is None:
        return _share_gain(optimizer.share() if optimizer else None, optimizer.of_samples if optimizer else None,
                           "in that loop")
    return Gain("the optimizer's share of the GPU's time", "not measured here: the GPU is busy, so the loop's CPU "
                "time is hidden behind its kernels; a profiler's trace (torch.profiler) times the optimizer's kernels",
                "estimate")


# The levers in the order they are offered: the board's caps first (they hold every kernel), then the step's own
# levers, largest usual gain first. A comment per slot says when it applies.

def _sync_words(value: str) -> str:
    """A host sync as the job's code writes it: ".item()", "print(tensor)"."""
    return SYNC_WORDS.get(value, value)

LEVERS: Final[tuple[Lever, ...]] = (
    # The SM clock held by the power limit (NVML's software power cap, or the power brake).
    # Offered only where the limit can be raised: below the board's maximum (a gain, a bound) or the maximum unread
    # (how to read it, and no gain claimed).
    Lever("power_cap", False, lambda s: _held(s, ("sw_power_cap",)) and _power_raisable(s), _power_action,
          _power_gain),
    # Held by heat.
    Lever("thermal_cap", False, lambda s: _held(s, ("sw_thermal_slowdown", "hw_thermal_slowdown")), _thermal_action,
          _clock_gain),
    # Held by the board or a hardware slowdown.
    Lever("hardware_slowdown", False, lambda s: _held(s, _HW_SLOWDOWNS),
          lambda s: "Hardware slowdown: check nvidia-smi -q -d PERFORMANCE and the node's power supplies", _clock_gain),
    # FP32 math: the GPU's FP32 pipes busy while its tensor cores idle, or the compiled graphs' buffers all float32,
    # and no autocast seen.
    Lever("bf16_autocast", True, _bf16_applies, _bf16_action, _bf16_gain),
    # Activation checkpointing on, and memory to hold the activations it frees.
    Lever("drop_checkpointing", True,
          lambda s: s.step.checkpointing is not None and s.step.checkpointing.value == "on" and _memory_room(s),
          lambda s: (f"Drop activation checkpointing ({_memory_words(s)}; "
                     f"{s.step.checkpointing.source() if s.step.checkpointing else ''})"),
          lambda s: Gain("~25%", "checkpointing recomputes the forward, about 1/3 more FLOPs: without it the step "
                         "does 3/4 of its work", "estimate")),
    # An eager model (its stacks run nn.Module forwards outside compiled code, or its command line says so); a
    # launch-bound one is told of torch.compile with CUDA graphs by the next lever instead.
    Lever("compile", True,
          lambda s: not s.launch_bound and s.step.compiled is not None and s.step.compiled.value == "eager",
          lambda s: (f"Compile the model: torch.compile(model) fuses its elementwise and norm kernels (it runs eager: "
                     f"{s.step.compiled.source() if s.step.compiled else ''})"),
          _compile_gain),
    # Attention written by hand (softmax over a masked matmul), read from the stacks or the lines they name: it
    # writes the whole T×T score matrix to memory and back, which a fused kernel never does.
    Lever("fused_attention", True, lambda s: s.step.attention is not None and s.step.attention.value == "by_hand",
          lambda s: ("Fused attention: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) "
                     "in place of the softmax over a masked matmul "
                     f"({s.step.attention.source() if s.step.attention else ''})"),
          lambda s: Gain("the attention's share of the step, more at long sequences",
                         "not measured here: the T×T scores it writes to memory and reads back are gone in a fused "
                         "kernel; gputop probe --like PID times the same model with fused attention on this GPU",
                         "estimate")),
    # Launch-bound: CUDA graphs replay the step's kernels in one launch.
    Lever("cuda_graphs", True, lambda s: s.launch_bound,
          lambda s: ("Cut launch overhead with CUDA graphs: the model already runs compiled; mode='reduce-overhead' "
                     "in its torch.compile call adds them, where the call does not pass it yet"
                     if s.step.compiled is not None and s.step.compiled.value == "compiled" else
                     "Cut launch overhead with CUDA graphs: torch.compile(model, mode='reduce-overhead')"),
          _sm_idle_gain),
    # Launch-bound: more work per kernel.
    Lever("launch_batch", True, lambda s: s.launch_bound and (s.step.gpu_memory is None or _memory_room(s)),
          lambda s: "Give each kernel more work: a larger micro-batch", _sm_idle_gain),
    # Launch-bound with a host sync sampled in the step: each one stops the CPU from running ahead of the GPU.
    Lever("drop_host_syncs", True, lambda s: s.launch_bound and bool(s.step.host_syncs),
          lambda s: (f"Remove the per-step host sync {_sync_words(s.step.host_syncs[0].value)} "
                     f"({s.step.host_syncs[0].where}) so the CPU runs ahead of the GPU"),
          lambda s: _share_gain(s.step.host_syncs[0].share(), s.step.host_syncs[0].of_samples, "waiting at it")),
    # The optimizer steps one parameter at a time.
    Lever("fused_optimizer", True, lambda s: s.step.optimizer is not None and s.step.optimizer.value == "per_parameter",
          lambda s: ("A fused optimizer: torch.optim.AdamW(..., fused=True) runs every parameter in a few kernels "
                     f"instead of a loop ({s.step.optimizer.source() if s.step.optimizer else ''})"),
          _optimizer_gain),
    # GPU-bound with the tensor cores under-used beside busy SMs (a model too narrow for them) and memory to spare.
    Lever("larger_micro_batch", True,
          lambda s: (not s.launch_bound and s.limit is not None and s.limit.kind in ("busy_outside_tensor_cores",
                                                                                       "unclear")
                     and _tensor_low(s) and _memory_room(s)),
          lambda s: (f"A larger micro-batch ({_memory_words(s)}, tensor active "
                     f"{_figure(s, 'tensor active') or 0:.0f}%): bigger matmuls fill more of the tensor cores"),
          lambda s: Gain(f"less than the {_outside_tensor_pct(s):.0f}% of the SMs' active time spent outside the "
                         "tensor cores: the non-matmul work in it stays",
                         "NVML GPM's tensor and SM activity; a gputop probe at the job's shape with twice its batch "
                         "(--batch-size) measures it on this GPU", "bound")),
)
assert len({lever.name for lever in LEVERS}) == len(LEVERS)
assert set(THROTTLE_REASONS) >= {"sw_power_cap", *_HW_SLOWDOWNS}


def offered(seen: Seen, *, inside_step: bool | None = None) -> list[str]:
    """The advice of each lever that applies, in LEVERS' order (each an Advice line, with its lever and gain);
    `inside_step` keeps only the step's own levers (True) or only the board's caps (False)."""
    return [lever.advice(seen) for lever in LEVERS
            if (inside_step is None or lever.inside_step == inside_step) and lever.applies(seen)]


# The levers gputop's reference step pulls (probes/reference/gpt_probe.py: bf16, SDPA attention, fused AdamW, no
# activation checkpointing; torch.compile where it was compiled): a step at its rate has their gains already.
_REFERENCE_PULLS: Final = frozenset({"bf16_autocast", "fused_attention", "fused_optimizer", "drop_checkpointing"})


def reference_words(rate_pct: float, compiled: bool | None, settings: str | None) -> str:
    """The step at its reference's rate, as measured: "The step runs at 98% of this GPU's compiled reference step for
    its model (bf16, fused AdamW, …): its levers have nothing left to win; …". The reference is one implementation,
    not a ceiling: what it does not try is said, not ruled out. Three rows at 80 columns: the verdict pane shows the
    first advice line whole."""
    kind = "compiled " if compiled else "eager " if compiled is False else ""
    pulls = f" ({settings})" if settings else ""
    return (f"The step runs at {rate_pct:.0f}% of this GPU's {kind}reference step for its model{pulls}: its levers "
            "have nothing left to win; FP8, CUDA graphs, another batch or attention kernel it does not try.")


def beside_reference(advice: tuple[str, ...], rate_pct: float, compiled: bool | None,
                     settings: str | None) -> tuple[str, ...]:
    """The advice of a step at its reference's rate: that measurement first, then the levers the reference does not
    pull (the board's caps, which held the reference too; compile where the reference ran eager; CUDA graphs, the
    micro-batch), each as the rule offered it."""
    pulled = _REFERENCE_PULLS | ({"compile"} if compiled else set())
    kept = [line for line in advice if isinstance(line, Advice) and line.lever not in pulled]
    return (reference_words(rate_pct, compiled, settings), *kept)
