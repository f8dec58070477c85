"""The diagnosis rules: each reads the Evidence and, when its bottleneck fits, returns a Candidate with a
strength (0-1), short evidence sentences carrying numbers from the frames, and the concrete knobs.

Rules are listed in priority order (RULES): the first one strong enough wins. A phase the main thread is
visibly in (compiling, saving, a collective) outranks the GPU counters; a busy GPU outranks the host-side
rules, because a host-side wait cannot be the limit while the GPU is saturated.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from probes.diagnose_evidence import COMPILE_HISTORY_S, Evidence
from probes.diagnose_stacks import (
    CHECKPOINT,
    COMMS,
    COMPILE,
    COMPUTE,
    DATA_PREP,
    DATA_WAIT,
    IO,
    QUEUE_WAIT,
    WAIT,
    ThreadProfile,
    classify_stack,
    describe,
    format_where,
    is_library,
)
from probes.frame import Bottleneck

ENTER_SCORE = 0.3  # a rule must be at least this strong to become the verdict
# A recompilation storm that takes this share of the main thread's samples over its look-back is the verdict,
# at this score at least, whatever the share of the last window.
STORM_MIN_SHARE = 0.15
STORM_SCORE = 0.4
GPU_BUSY_UTIL_PCT = 80.0
GPU_BUSY_SM_ACTIVE_PCT = 50.0
GPU_BUSY_POWER_FRACTION = 0.5
LAUNCH_BOUND_SM_ACTIVE_PCT = 35.0
LAUNCH_BOUND_POWER_FRACTION = 0.35
GPU_STARVED_UTIL_PCT = 50.0
CLOCK_HELD_FRACTION = 0.9
THROTTLE_REASONS = {
    "sw_power_cap": "software power cap",
    "hw_slowdown": "hardware slowdown",
    "hw_power_brake_slowdown": "hardware power brake",
    "sw_thermal_slowdown": "software thermal slowdown",
    "hw_thermal_slowdown": "hardware thermal slowdown",
    "board_limit": "board limit",
    "reliability": "reliability limit",
}
WORKER_BUSY_CPU_PCT = 70.0
WORKER_BUSY_ACTIVE_SHARE = 0.6
WORKER_STARVED_CPU_PCT = 50.0
SATURATED_FRACTION = 0.85
LONG_CALL_S = 3.0
LONG_CALL_MIN_CPU_PCT = 30.0  # a crowded machine gives a busy call less than a full core
LONG_CALL_MIN_WANTING_PCT = 60.0  # with schedstat: on a CPU or queued for one this share of the time
BUSY_CPU_PCT = 80.0
# The main thread asleep (neither on a CPU nor queued for one) this share of wall time, in a process using less
# than IDLE_MAX_CPU_PCT of a core, waits more than it works whatever py-spy's samples say (see asleep_pct).
MOSTLY_ASLEEP_PCT = 60.0
IDLE_MAX_CPU_PCT = 30.0


@dataclass
class Candidate:
    bottleneck: Bottleneck
    score: float
    evidence: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)
    from_metrics: bool = False  # rests on GPU or cgroup counters rather than on stack samples
    held_over: bool = False  # the previous verdict, kept while too few samples point elsewhere
    # Its finding already spans several sample windows (a recompilation storm): it replaces the previous
    # verdict without the switch margin, which is there for one noisy window.
    sustained: bool = False


# --- formatting ------------------------------------------------------------------------------------


def _pct(fraction: float) -> str:
    return f"{100.0 * fraction:.0f}%"


def _samples(n: int) -> str:
    return f"{n} sample{'s' if n != 1 else ''}"


def _rate(bytes_per_s: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if bytes_per_s >= size:
            return f"{bytes_per_s / size:.1f} {unit}/s"
    return f"{bytes_per_s:.0f} B/s"


def _cpus(value: float) -> str:
    return f"{value:g} CPU" if value == 1 else f"{value:.3g} CPUs"


def _where(profile: ThreadProfile, *activities: str) -> str:
    responsible, user_frame, _ = profile.top(*activities)
    return format_where(responsible, user_frame)


def _main_share_line(ev: Evidence, share: float, doing: str, *activities: str, sep: str = " in") -> str:
    """'main thread: 87% of 40 samples waiting for the next batch in X, called from Y'. When X is not
    nearly all of those samples, 'most often in X (55% of those)'."""
    responsible, user_frame, top_share = ev.main.top(*activities)
    where = format_where(responsible, user_frame)
    head = " ".join(part for part in (f"main thread: {_pct(share)} of {_samples(ev.main.samples)}", doing) if part)
    if top_share >= 0.9:
        return f"{head}{sep} {where}"
    return f"{head}, most often in {where} ({_pct(top_share)} of those)"


def _gpu_line(ev: Evidence) -> str:
    g = ev.gpu
    parts = []
    if g.util_pct is not None:
        parts.append(f"util {g.util_pct:.0f}%")
    if g.sm_clock_mhz is not None:
        top = f"/{g.max_sm_clock_mhz:.0f}" if g.max_sm_clock_mhz else ""
        parts.append(f"SM clock {g.sm_clock_mhz:.0f}{top} MHz")
    if g.power_w is not None:
        top = f"/{g.power_limit_w:.0f}" if g.power_limit_w else ""
        parts.append(f"power {g.power_w:.0f}{top} W")
    if g.sm_active_pct is not None:
        parts.append(f"SM active {g.sm_active_pct:.0f}%")
    if g.tensor_active_pct is not None:
        parts.append(f"tensor active {g.tensor_active_pct:.0f}%")
    assumed = " (NVML's PIDs do not map here, as inside a container: taken to be the target's)" if g.assumed else ""
    return f"{g.label()}{assumed}: " + ", ".join(parts)


def _power_fraction(ev: Evidence) -> float | None:
    g = ev.gpu
    if g.power_w is None or not g.power_limit_w:
        return None
    return g.power_w / g.power_limit_w


def _producer_busy(ev: Evidence) -> bool:
    """Something else in the tree works while the main thread waits: a producer thread or process."""
    if ev.others.samples and ev.others.share(COMPUTE, DATA_PREP, IO) >= 0.3:
        return True
    return any(p.pid != ev.main_pid and (p.cpu_pct or 0.0) >= 20.0 for p in ev.latest.processes if p.alive)


# --- the rules, in priority order --------------------------------------------------------------------


def _compile(ev: Evidence) -> Candidate | None:
    share = ev.main.share(COMPILE)
    workers_busy = (ev.compile_cpu_pct or 0.0) >= 50.0
    storm = ev.recompile_windows >= 2
    # A storm is judged on its whole look-back: one window between compiles must not end it.
    storm_matters = storm and ev.lookback_compile_share >= STORM_MIN_SHARE
    if share < 0.05 and not workers_busy and not storm_matters:
        return None
    score = max(share, 0.5 if workers_busy else 0.0, STORM_SCORE if storm_matters else 0.0)
    responsible, user_frame, _ = ev.main.top(COMPILE)
    lines = []
    if share:
        trigger = f", triggered from {describe(user_frame)}" if user_frame is not None else ""
        where = describe(responsible) if responsible is not None else "torch.compile"
        lines.append(f"main thread: {_pct(share)} of {_samples(ev.main.samples)} compiling in {where}{trigger}")
    if workers_busy:
        lines.append(f"inductor compile workers at {ev.compile_cpu_pct:.0f}% CPU")
    if storm:
        lines.insert(0, f"recompilation storm: compiling again in {ev.recompile_windows} of "
                        f"{ev.compile_windows} sample windows after training steps had run "
                        f"({_pct(ev.lookback_compile_share)} of the main thread's samples over the last "
                        f"{COMPILE_HISTORY_S:.0f} s)")
        advice = [
            ("Find what changes between calls: run with TORCH_LOGS=recompiles (it prints the failing guard, "
            "usually a tensor shape)."),
            ("For varying lengths or batch sizes: torch.compile(..., dynamic=True) or "
            "torch._dynamo.mark_dynamic(x, dim); or pad inputs to a few bucket lengths."),
            ("Each new shape counts against torch._dynamo.config.recompile_limit (8 by default); past it the "
            "function silently runs uncompiled."),
        ]
    else:
        advice = [
            "Compile warm-up is a one-time cost per shape: steady-state speed comes after it.",
            ("Keep the inductor cache between runs (TORCHINDUCTOR_CACHE_DIR on local disk); "
            "mode='max-autotune' makes compiling longer."),
        ]
    # A storm outranks the CPU work around it (that work is the training itself; the compiles are the waste),
    # and it is seen over two windows at least, so it may replace a verdict reached before the storm showed.
    return Candidate("compile_warmup", score, lines, advice, sustained=storm_matters)


def _checkpoint(ev: Evidence) -> Candidate | None:
    share = ev.main.share(CHECKPOINT)
    if share < 0.05:
        return None
    lines = [_main_share_line(ev, share, "saving a checkpoint", CHECKPOINT)]
    if ev.main_write_per_s:
        lines.append(f"main process writing {_rate(ev.main_write_per_s)}")
    return Candidate("checkpoint_save", share, lines, [
        "Save less often, or only what a restart needs (model and optimizer state, not every buffer).",
        ("Save asynchronously: torch.distributed.checkpoint.async_save, or copy the state_dict to CPU and "
        "write it from a background thread or process."),
        "Write to local NVMe first and copy to shared storage in the background.",
    ])


def _comms(ev: Evidence) -> Candidate | None:
    share = ev.main.share(COMMS)
    if share < 0.05:
        return None
    lines = [_main_share_line(ev, share, "in a collective", COMMS, sep=":")]
    g = ev.gpu
    if g.in_use and g.util_pct is not None and g.sm_active_pct is not None and g.util_pct >= 70 \
            and g.sm_active_pct < LAUNCH_BOUND_SM_ACTIVE_PCT:
        lines.append(f"{_gpu_line(ev)}: util is high but few SMs work — NCCL kernels waiting on peers")
    nccl = [t.name for t in ev.latest.stacks.threads if t.name and t.name.startswith("pt_nccl")]
    if nccl:
        lines.append(f"NCCL threads present: {', '.join(sorted(set(nccl)))}")
    return Candidate("comms_bound", share, lines, [
        ("A collective waits for the slowest rank: compare step times across ranks (one straggler, e.g. a "
        "slower data shard or a throttled GPU, makes every rank wait)."),
        ("Overlap communication with compute: DDP bucket_cap_mb, FSDP prefetch; with gradient accumulation "
        "skip the all-reduce on inner steps (model.no_sync())."),
        "Check the interconnect: NCCL_DEBUG=INFO shows whether NVLink/InfiniBand or a TCP fallback is used.",
    ])


def _gpu(ev: Evidence) -> Candidate | None:
    g = ev.gpu
    if not g.in_use or g.util_pct is None or g.util_pct < GPU_BUSY_UTIL_PCT:
        return None
    power = _power_fraction(ev)
    if g.sm_active_pct is not None:
        if g.sm_active_pct < GPU_BUSY_SM_ACTIVE_PCT:
            return None
        strength = 0.9
    elif power is not None:
        if power < GPU_BUSY_POWER_FRACTION:
            return None
        strength = 0.8
    else:
        strength = 0.5  # util% alone: a kernel was running, not necessarily a busy one
    lines = [_gpu_line(ev)]
    if strength == 0.5:
        lines.append("only util% is readable here: it says a kernel was running, not how many SMs were busy")
    if ev.main.samples:
        lines.append(_main_share_line(ev, ev.main.share(COMPUTE, WAIT), "computing or waiting on the GPU",
                                      COMPUTE, WAIT))
        data = ev.main.share(DATA_WAIT, DATA_PREP, IO)
        if data < 0.1:
            lines.append(f"input pipeline: {_pct(data)} of main-thread samples — data loading is not the limit")
    clock_fraction = (g.sm_clock_mhz / g.max_sm_clock_mhz) if g.sm_clock_mhz and g.max_sm_clock_mhz else None
    held = [r for r in g.reasons if r in THROTTLE_REASONS]
    if held and clock_fraction is not None and clock_fraction < CLOCK_HELD_FRACTION:
        names = ", ".join(THROTTLE_REASONS[r] for r in held)
        lines.insert(1, f"SM clock held at {_pct(clock_fraction)} of max by: {names}")
        advice = []
        if "sw_power_cap" in held:
            limit = f" ({g.power_limit_w:.0f} W)" if g.power_limit_w else ""
            advice.append(f"The power limit{limit} caps the clock: nvidia-smi -q -d POWER shows the limit and the "
                          "maximum; raise it with nvidia-smi -pl if the board and the site allow.")
        if any("thermal" in r for r in held):
            temps = [d.temperature_c for d in g.devices if d.temperature_c is not None]
            hot = f" (now {max(temps):.0f} °C)" if temps else ""
            advice.append(f"Thermal slowdown{hot}: check cooling and airflow; nvidia-smi -q -d TEMPERATURE.")
        if any(r in ("hw_slowdown", "hw_power_brake_slowdown", "board_limit", "reliability") for r in held):
            advice.append("Hardware slowdown: check nvidia-smi -q -d PERFORMANCE and the node's power supplies.")
        return Candidate("gpu_throttled", strength, lines, advice, from_metrics=True)
    advice = ["The GPU is the limit — the good case. What is left:"]
    if g.mem_used_bytes and g.mem_total_bytes and g.mem_used_bytes < 0.7 * g.mem_total_bytes:
        advice.append(f"a larger micro-batch ({g.mem_used_bytes / 2**30:.0f} of {g.mem_total_bytes / 2**30:.0f} GiB "
                      "used) for bigger, more efficient kernels;")
    else:
        advice.append("a larger micro-batch if memory allows (activation checkpointing frees some);")
    advice += [
        "torch.compile to fuse elementwise ops;",
        "fused attention (F.scaled_dot_product_attention / FlashAttention);",
        "bf16 autocast (torch.autocast('cuda', dtype=torch.bfloat16)) and TF32 matmuls if still in fp32.",
    ]
    return Candidate("gpu_bound", strength, lines, advice, from_metrics=True)


def _cpu_throttled(ev: Evidence) -> Candidate | None:
    fraction = ev.throttled_fraction
    if fraction is None or fraction < 0.05:
        return None
    cpu = ev.latest.cpu
    quota = f"cgroup quota {_cpus(cpu.quota_cpus)}" if cpu.quota_cpus is not None else "its cgroup's quota"
    source = f" (set on {cpu.quota_source})" if cpu.quota_source else ""
    lines = [f"throttled in {_pct(fraction)} of CPU periods: {quota}{source}"]
    effective = cpu.effective_cpus if cpu.effective_cpus is not None else cpu.quota_cpus
    if cpu.runnable_threads is not None and effective:
        lines.append(f"{cpu.runnable_threads} runnable threads on {_cpus(effective)}")
    if cpu.usage_cpus is not None:
        lines.append(f"using {cpu.usage_cpus:.2f} CPUs")
    environment = ev.latest.target.environment
    if environment is not None:
        omp = environment.get("OMP_NUM_THREADS")
        visible = f"the {cpu.affinity_cpus} visible cores" if cpu.affinity_cpus else "the visible cores"
        lines.append(f"OMP_NUM_THREADS={omp}" if omp else
                     f"OMP_NUM_THREADS is not set: torch sizes its thread pool by {visible}, not by the quota")
    threads = max(1, math.floor(effective)) if effective else 1
    advice = [(f"Cap threads to the quota: torch.set_num_threads({threads}), or OMP_NUM_THREADS={threads} "
              f"MKL_NUM_THREADS={threads} before start.")]
    if ev.worker_cpu:
        advice.append(f"DataLoader num_workers at most {max(0, threads - 1)} under this quota "
                      f"(now {len(ev.worker_cpu)}).")
    advice.append("Or raise the quota: cpu.max (v2) / cpu.cfs_quota_us (v1) of that cgroup, "
                  "or the container's --cpus.")
    return Candidate("cpu_throttled", min(1.0, 0.2 + fraction), lines, advice, from_metrics=True)


def _io(ev: Evidence) -> Candidate | None:
    main_share = ev.main.share(IO)
    worker_share = ev.workers.share(IO) if ev.workers.samples else 0.0
    via_workers = ev.main.share(DATA_WAIT) * worker_share
    score = max(main_share, via_workers)
    if score < 0.05:
        return None
    lines = []
    if main_share >= via_workers:
        lines.append(_main_share_line(ev, main_share, "blocked reading", IO))
    else:
        lines.append(_main_share_line(ev, ev.main.share(DATA_WAIT), "waiting for the next batch", DATA_WAIT))
        lines.append(f"DataLoader workers: {_pct(worker_share)} of their samples blocked reading in "
                     f"{_where(ev.workers, IO)}")
    figures = []
    if ev.read_chars_per_s is not None:
        figures.append(f"reading {_rate(ev.read_chars_per_s)}")
    if ev.tree_cpu_pct is not None:
        figures.append(f"CPU {ev.tree_cpu_pct:.0f}% of a core across the tree")
    if figures:
        lines.append(", ".join(figures) + ": the loop waits on the bytes, not on compute")
    if ev.disk_wait_threads:
        lines.append(f"{ev.disk_wait_threads} threads in uninterruptible disk wait (D state)")
    return Candidate("io_bound", score, lines, [
        "Stage the data on local NVMe (or in RAM) before training instead of reading it remotely.",
        ("Prefetch: read in DataLoader workers (num_workers > 0, prefetch_factor) or a background thread, so "
        "reads overlap the step."),
        "Fewer, bigger shards and larger reads (e.g. 100 MB+ tar shards) amortise per-request latency.",
    ])


def _data(ev: Evidence) -> Candidate | None:
    wait = ev.main.share(DATA_WAIT)
    prep = ev.main.share(DATA_PREP)
    queue = ev.main.share(QUEUE_WAIT) if _producer_busy(ev) else 0.0
    score = wait + prep + queue
    if score < 0.05:
        return None
    lines, advice = [], []
    if prep >= wait + queue:
        lines.append(_main_share_line(ev, prep, "preparing data on the main thread", DATA_PREP))
        advice += [
            ("Move this work off the training loop: a DataLoader with num_workers > 0 runs it in parallel "
            "with the step."),
            ("Or do it once, offline: pre-tokenize the corpus to a binary file (e.g. uint16 token ids in a "
            "np.memmap, as nanoGPT's prepare.py does)."),
        ]
    else:
        lines.append(_main_share_line(ev, wait + queue, "waiting for the next batch", DATA_WAIT, QUEUE_WAIT))
        advice += _worker_findings(ev, lines)
    g = ev.gpu
    if g.in_use and g.util_pct is not None and g.util_pct < GPU_STARVED_UTIL_PCT:
        lines.append(f"{g.label()} util {g.util_pct:.0f}%: starved while the loop waits for input")
    return Candidate("data_bound", score, lines, advice)


def _worker_findings(ev: Evidence, lines: list[str]) -> list[str]:
    """Evidence about the DataLoader workers (appended to `lines`) and the advice that follows."""
    cpus = sorted(ev.worker_cpu.values(), reverse=True)
    if not cpus:
        return ["Use more DataLoader workers (num_workers) or make each sample cheaper to produce."]
    n = len(cpus)
    mean_cpu = sum(cpus) / n
    if max(cpus) - min(cpus) <= 10:
        lines.append(f"{n} DataLoader worker{'s' if n > 1 else ''} at {mean_cpu:.0f}% CPU each")
    else:
        lines.append(f"{n} DataLoader workers at " + ", ".join(f"{c:.0f}%" for c in cpus[:6]) + " CPU")
    # py-spy's "active" means running or waiting for a CPU: a worker active in most samples is busy
    # even when a crowded machine gives it little CPU time.
    active = ev.workers.share(COMPUTE, DATA_PREP, IO) if ev.workers.samples else None
    if active is not None and active >= 0.3:
        lines.append(f"workers busy in {_where(ev.workers, COMPUTE, DATA_PREP)}")
    busy = mean_cpu >= WORKER_BUSY_CPU_PCT or (active is not None and active >= WORKER_BUSY_ACTIVE_SHARE)
    effective = ev.effective_cpus
    tree = (ev.tree_cpu_pct or 0.0) / 100.0
    if busy and effective is not None and tree >= SATURATED_FRACTION * effective:
        lines.append(f"the CPUs are saturated: the tree uses {tree:.1f} of {_cpus(effective)}")
        return [
            ("More workers will not help: every CPU is busy. Make each sample cheaper (the hot frame above), "
             "move decoding/augmentation to the GPU, or pre-process the dataset offline."),
            "Or run where more CPUs are available.",
        ]
    if busy and mean_cpu < WORKER_STARVED_CPU_PCT:
        lines.append(f"the workers are runnable in {_pct(active or 0.0)} of their samples yet get {mean_cpu:.0f}% "
                     f"CPU each: they wait for a CPU (the tree uses {tree:.1f} of "
                     f"{_cpus(effective) if effective else 'the CPUs'}; other processes take the rest)")
        return [
            ("The workers are CPU-starved: more workers will not help until CPUs are free. Make each sample "
            "cheaper (the hot frame above), pre-process the dataset offline, or stop what else runs here."),
        ]
    if busy:
        room = f"; {_cpus(effective)} available" if effective else ""
        return [
            f"Raise DataLoader num_workers (now {n}{room}): the workers are busy and CPU is left.",
            "Make each sample cheaper (the hot frame above), or pre-process the dataset offline.",
        ]
    return [
        ("The workers are mostly idle while the main thread waits: look at IPC of large batches "
         "(pin_memory, shared memory), a slow collate_fn, or prefetch_factor too small."),
    ]


def _cpu(ev: Evidence) -> Candidate | None:
    g = ev.gpu
    compute = ev.main.share(COMPUTE)
    main_cpu = ev.main_cpu_pct
    power = _power_fraction(ev)
    launch_bound = (
        g.in_use and g.util_pct is not None and g.util_pct >= 60 and main_cpu is not None
        and main_cpu >= BUSY_CPU_PCT
        and ((g.sm_active_pct is not None and g.sm_active_pct < LAUNCH_BOUND_SM_ACTIVE_PCT)
             or (g.sm_active_pct is None and power is not None and power < LAUNCH_BOUND_POWER_FRACTION))
    )
    if launch_bound:
        lines = [(f"{_gpu_line(ev)}: util is high but the SMs are mostly idle — small kernels, launched one by "
                 "one (launch-bound)"),
                 f"main process at {main_cpu:.0f}% CPU: the host cannot issue kernels faster"]
        if ev.main.samples:
            lines.append(_main_share_line(ev, compute, "running on the CPU", COMPUTE))
        return Candidate("cpu_bound", max(0.6, compute), lines, [
            "Cut launch overhead with CUDA graphs: torch.compile(model, mode='reduce-overhead').",
            "Give each kernel more work: a larger micro-batch; fuse small ops (torch.compile).",
            "Remove host syncs from the loop (.item(), .cpu(), printing tensors) so the CPU runs ahead.",
        ], from_metrics=True)
    if compute < 0.05:
        return None
    if ev.main.share(WAIT, QUEUE_WAIT) > compute or _mostly_asleep(ev):
        # It waits (sleeps, polls) more than it works: the idle rule's case. On a crowded machine its bursts
        # of work stretch while it queues for a core, which must not turn a sleepy loop into a CPU-bound one.
        return None
    # py-spy's "active" is running or runnable. With schedstat the run queue shows which: a thread that
    # wants the CPU and queues for it is CPU-bound all the same (starved); without it, CPU% weighs the rule.
    running = ev.running_share()
    score = compute if running is not None or main_cpu is None or main_cpu >= 50.0 else 0.8 * compute
    lines = [_main_share_line(ev, compute, "running on the CPU", COMPUTE)]
    if running is not None and running < 0.8:
        lines.append(f"of that, it waited for a free core {_pct(1 - running)} of the time (runnable, not running): "
                     f"{ev.main_thread_runqueue_pct:.0f}% of wall time queued against {ev.main_thread_cpu_pct:.0f}% "
                     "on a CPU")
    if main_cpu is not None:
        available = f" ({_cpus(ev.effective_cpus)} available)" if ev.effective_cpus else ""
        lines.append(f"main process at {main_cpu:.0f}% CPU{available}")
        if main_cpu < 50.0 and compute >= 0.6:
            lines.append("it is runnable most of the time yet gets little CPU: the CPUs are contended")
    advice = []
    innermost = ev.main.top(COMPUTE)[0]
    if ev.unchanged_for_s >= LONG_CALL_S and _busy_in_one_call(ev) and ev.stuck_stack:
        call = describe(ev.stuck_stack[0])
        queued = ev.main_thread_runqueue_pct
        waits = f" (and {queued:.0f}% waiting for a core)" if queued is not None and queued >= 10 else ""
        on_cpu = main_cpu if main_cpu is not None else ev.main_thread_cpu_pct or 0.0
        lines.insert(0, f"one call has run for {ev.unchanged_for_s:.0f} s without returning, {call}, at "
                        f"{on_cpu:.0f}% CPU{waits}: a long native operation — slow, not hung")
        advice.append(f"One native call dominates ({call}): check its sizes and dtype (float64 is several "
                      "times slower than float32) and whether it belongs on the GPU.")
    elif innermost is not None and not is_library(innermost):
        advice.append(f"The hot frame is your own Python ({describe(innermost)}): move the loop into tensor "
                      "operations, or torch.compile it.")
    if not g.in_use:
        lines.append("no GPU in use by the target: the work runs on the CPU" if g.available else
                     f"no GPU readings ({g.reason or 'NVML unavailable'}): the work runs on the CPU")
        advice.append("If a GPU should do this work, move the model and each batch to it "
                      "(model.to('cuda'), batch.to('cuda', non_blocking=True)).")
    if ev.effective_cpus and main_cpu is not None and ev.effective_cpus >= 2 and main_cpu < 100.0 * (
            ev.effective_cpus - 0.5):
        advice.append(f"It uses {main_cpu / 100:.1f} of {_cpus(ev.effective_cpus)}: torch.set_num_threads("
                      f"{math.floor(ev.effective_cpus)}) lets CPU ops use them all.")
    return Candidate("cpu_bound", score, lines, advice)


def _busy_in_one_call(ev: Evidence) -> bool:
    """The main thread wants a CPU most of the time: running, or runnable and queued for a core (a crowded
    machine gives a busy call less than a full core). Without schedstat, its process's CPU% decides."""
    cpu, queued = ev.main_thread_cpu_pct, ev.main_thread_runqueue_pct
    if cpu is not None and queued is not None:
        return cpu + queued >= LONG_CALL_MIN_WANTING_PCT
    return ev.main_cpu_pct is not None and ev.main_cpu_pct >= LONG_CALL_MIN_CPU_PCT


def _mostly_asleep(ev: Evidence) -> bool:
    asleep = ev.asleep_pct()
    return asleep is not None and asleep >= MOSTLY_ASLEEP_PCT and (
        ev.main_cpu_pct is None or ev.main_cpu_pct < IDLE_MAX_CPU_PCT)


def _idle(ev: Evidence) -> Candidate | None:
    waiting = ev.main.share(WAIT, QUEUE_WAIT)
    asleep = _mostly_asleep(ev)
    if (waiting < 0.3 and not asleep) or (ev.main_cpu_pct is not None and ev.main_cpu_pct >= IDLE_MAX_CPU_PCT):
        return None
    if ev.main.share(QUEUE_WAIT) >= 0.3 and _producer_busy(ev):
        return None  # waiting on a working producer: the data rule's case
    if waiting >= 0.3:
        where = _where(ev.main, WAIT, QUEUE_WAIT)
        lines = [_main_share_line(ev, waiting, "waiting", WAIT, QUEUE_WAIT)]
    else:  # py-spy caught it runnable; schedstat says it slept
        where = _where(ev.main, *ev.main.by_activity)
        waiting = ev.asleep_pct() / 100.0
        lines = [f"main thread asleep {_pct(waiting)} of wall time (on a CPU {ev.main_thread_cpu_pct:.0f}%, queued "
                 f"for one {ev.main_thread_runqueue_pct:.0f}%), most often in {where}: py-spy's samples catch it "
                 "only while it is runnable"]
    if ev.active_tick_share is not None and ev.tree_cpu_pct is not None:
        ticks = len([f for f in ev.stack_frames if f.processes])
        lines.append(f"CPU time in {_pct(ev.active_tick_share)} of {ticks} ticks, {ev.tree_cpu_pct:.0f}% of a "
                     "core on average: it works briefly, then waits")
    return Candidate("idle", waiting, lines, [
        (f"It is not training most of the time: if {where} is a sleep or a polling interval, shorten or remove "
        "it; otherwise find what it waits for (the frames above it)."),
    ])


RULES: tuple[Callable[[Evidence], Candidate | None], ...] = (
    _compile, _checkpoint, _comms, _gpu, _cpu_throttled, _io, _data, _cpu, _idle,
)


def _unknown(ev: Evidence) -> Candidate:
    stacks = ev.latest.stacks
    if not ev.main.samples:
        why = stacks.reason if not stacks.available and stacks.reason else "waiting for the first stack samples"
        return Candidate("unknown", 0.0, [f"no samples of the main thread yet: {why}"])
    top = ", ".join(f"{activity} {_pct(n / ev.main.samples)}"
                    for activity, n in ev.main.by_activity.most_common(3))
    return Candidate("unknown", 0.0, [f"no rule fits yet: main thread {top} of {ev.main.samples} samples"])


def evaluate_rules(ev: Evidence) -> list[Candidate]:
    """Every rule that fits: those strong enough first, in priority order, then 'unknown', then the
    weaker ones (kept so that a previous verdict can still be held while its rule weakens)."""
    fitted = [c for c in (rule(ev) for rule in RULES) if c is not None]
    strong = [c for c in fitted if c.score >= ENTER_SCORE]
    weak = [c for c in fitted if c.score < ENTER_SCORE]
    return strong + [_unknown(ev)] + weak


# --- context -----------------------------------------------------------------------------------------

# Other processes using at least this many CPUs' worth, and this share of the CPUs the job may use, is
# contention worth a line in any verdict: the job's numbers mean something else on a shared machine.
CONTENTION_MIN_CPUS = 0.5
CONTENTION_MIN_SHARE = 0.25
STEAL_NOTABLE_PCT = 10.0


def contention(ev: Evidence) -> tuple[str, str] | None:
    """(evidence line, advice) when the CPUs the job may use are busy with other work, else None."""
    others, allowed = ev.others_busy_cpus, ev.allowed_cpus
    steal = ev.steal_pct or 0.0
    # Others matter only where they eat into what the job may use: under a quota of 0.2 CPUs on a
    # 2-CPU machine, another process on the other 1.8 takes nothing from it.
    entitled = min(allowed, ev.effective_cpus) if allowed and ev.effective_cpus else allowed
    shared = others is not None and allowed and entitled and others >= CONTENTION_MIN_CPUS and \
        others >= CONTENTION_MIN_SHARE * allowed and allowed - others < entitled - 0.1
    if not shared and steal < STEAL_NOTABLE_PCT:
        return None
    job = ev.job_cpus if ev.job_cpus is not None else 0.0
    parts = []
    if shared:
        parts.append(f"other processes used {others:.1f} of the {allowed} CPUs this job may run on, "
                     f"the job {job:.1f}")
    if steal >= STEAL_NOTABLE_PCT:
        parts.append(f"the hypervisor took {steal:.0f}% of their time (steal)")
    line = "CPUs shared with other work: " + "; ".join(parts)
    if shared:
        advice = (f"The job gets {job:.1f} of its {allowed} CPUs: other processes use the rest. Find them "
                  "(top, sorted by CPU) and move them elsewhere, or give the job CPUs of its own (taskset, a "
                  "cpuset); its figures here are those of a shared machine.")
    else:
        advice = "This VM loses CPU time to its neighbours (steal): a dedicated or larger instance avoids it."
    return line, advice


# --- hung -------------------------------------------------------------------------------------------

_HUNG_BOTTLENECK: dict[str, Bottleneck] = {
    DATA_WAIT: "data_bound",
    DATA_PREP: "data_bound",
    IO: "io_bound",
    COMMS: "comms_bound",
    CHECKPOINT: "checkpoint_save",
    COMPILE: "compile_warmup",
}


def hung_bottleneck(ev: Evidence, hang_after_s: float) -> Candidate:
    """The verdict's body when nothing has moved for `hang_after_s`: where it is stuck, and why."""
    silent = f"no progress for {ev.stuck_for_s:.0f} s" if ev.progress_seen else \
        f"no progress in the {ev.stuck_for_s:.0f} s watched so far"
    lines = [f"{silent} (hang threshold {hang_after_s:g} s): {_quiet_signals(ev)}"]
    advice = []
    activity = None
    if ev.stuck_stack:
        stuck = classify_stack(ev.stuck_stack, idle=True, peer_wait=ev.peer_wait)
        activity = stuck.activity
        same = f"; same stack for {ev.unchanged_for_s:.0f} s" if ev.unchanged_for_s >= 1.0 else ""
        lines.append(f"main thread ({ev.stuck_thread}, PID {ev.main_pid}) stuck in "
                     f"{format_where(stuck.responsible, stuck.user_frame)}{same}")
    else:
        lines.append("no stack of the main thread was sampled")
    waiting_peers = _other_waiting_threads(ev)
    for name, frame in waiting_peers[:2]:
        lines.append(f"thread {name} also waiting in {describe(frame)}")
    main = ev.latest.process(ev.main_pid)
    if activity == IO and main is not None and main.tcp_peers:
        since = (f"; nothing received for {main.tcp_last_data_recv_s:.0f} s"
                 if main.tcp_last_data_recv_s is not None else "")
        lines.append(f"connected to {', '.join(main.tcp_peers)}{since}: the peer has gone silent")
        advice.append(f"The peer ({main.tcp_peers[0]}) stopped sending: check that server; give reads a timeout "
                      "(socket.settimeout, requests' timeout=) so a dead peer raises instead of hanging.")
    for child in ev.dead_children[:2]:
        feeds = " — the queue it fed will never fill" if activity in (QUEUE_WAIT, DATA_WAIT) else ""
        state = "is a zombie (exited, not reaped)" if child.how == "zombie" else "exited"
        lines.append(f"child PID {child.pid} ({child.name}, {child.role}) {state}{feeds}")
    if ev.disk_wait_threads:
        lines.append(f"{ev.disk_wait_threads} threads in uninterruptible disk wait (D state)")
    if ev.dead_children and activity in (QUEUE_WAIT, DATA_WAIT):
        advice.append("Its producer died: check that process's exit (its log; dmesg for the OOM killer). Use "
                      "get(timeout=...) and check producer.is_alive() so the loop fails instead of hanging.")
    if waiting_peers and activity in (WAIT, QUEUE_WAIT, None):
        advice.append("Threads wait on each other: take locks in one global order, or acquire(timeout=...) to "
                      "surface the cycle.")
    if activity == COMMS:
        advice.append("A collective waits for a rank that never arrives: look at the other ranks; "
                      "TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and a process-group timeout turn the hang into an error.")
    if ev.disk_wait_threads:
        advice.append("Threads are stuck in the kernel on I/O: check the filesystem (NFS/FUSE mounts, dmesg).")
    advice.append(f"py-spy dump --native --pid {ev.main_pid} shows the native frames (locks, CUDA, NCCL) "
                  "under the Python line.")
    bottleneck = _HUNG_BOTTLENECK.get(activity, "unknown") if activity else "unknown"
    return Candidate(bottleneck, 1.0, lines, advice)


def _quiet_signals(ev: Evidence) -> str:
    """What was watched and stayed silent, in the words of the finest signal each frame carried."""
    processes = [p for p in ev.latest.processes if p.alive]
    main = ev.latest.process(ev.main_pid)
    if main is not None and main.main_thread_cpu_pct is not None:
        quiet = [f"main thread {main.main_thread_cpu_pct:.2f}% CPU",
                 f"{main.main_thread_wakeups_per_s or 0:.0f} wake-ups/s", "no reads or writes"]
        busy_others = (main.cpu_pct or 0.0) - main.main_thread_cpu_pct
        if busy_others >= 2.0:  # say it, so nobody reads the process's CPU% as progress
            quiet.append(f"while its other threads use {busy_others:.0f}% CPU")
        others = len(processes) - 1
        if others:
            other_cpu = sum(p.cpu_pct or 0.0 for p in processes if p.pid != ev.main_pid)
            quiet.append(f"{other_cpu:.0f}% CPU across {others} other process{'es' if others != 1 else ''}")
    else:
        cpu = "0% CPU" if (ev.tree_cpu_pct or 0.0) < 1.0 else f"{ev.tree_cpu_pct:.1f}% CPU"
        quiet = [cpu, f"no file I/O across {len(processes)} process{'es' if len(processes) != 1 else ''}"]
    if ev.gpu.in_use:
        quiet.append("GPU idle")
    return ", ".join(quiet)


def _other_waiting_threads(ev: Evidence) -> list[tuple[str, object]]:
    """Other threads of the main process that wait inside the user's own code (lock-order suspects)."""
    found = []
    for thread in ev.latest.stacks.threads:
        if thread.pid != ev.main_pid or not thread.idle or thread.frames == ev.stuck_stack:
            continue
        if thread.name == (ev.stuck_thread or "MainThread") or thread.tid == ev.main_pid:
            continue
        user = next((f for f in thread.frames if not is_library(f)), None)
        if user is not None:
            found.append((thread.name or f"tid {thread.tid}", user))
    return found
