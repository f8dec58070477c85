"""cpu_bound: the main thread computing on the host, or launching kernels too small to fill the GPU
(launch-bound), or busy on one line for seconds (one long call, or the same call again and again); with how much
CPU it gets and waits for. A model whose stacks show
torch.compile (its generated code running, or a compile) is never told to compile."""

from __future__ import annotations

from probes.diagnosis.evidence import Evidence
from probes.diagnosis.gpu_limit import LAUNCH_MAIN_RUNNING_PCT, LAUNCH_UTIL_PCT, gpu_limit
from probes.diagnosis.levers import Seen, offered
from probes.diagnosis.rules.lines import (
    cpu_amount,
    cpu_share_words,
    gpu_line,
    main_share_line,
    percent,
    threads_per_rank,
)
from probes.diagnosis.rules.rule import BottleneckFacts, Candidate, Rule
from probes.diagnosis.rules.signs import (
    LAUNCH_BOUND_POWER_FRACTION,
    LAUNCH_BOUND_SM_ACTIVE_PCT,
    mostly_asleep,
    power_fraction,
    uses_torch_compile,
)
from probes.diagnosis.stacks import COMPUTE, QUEUE_WAIT, WAIT, describe, is_generated_code, is_library

LONG_CALL_S = 3.0
LONG_CALL_MIN_CPU_PCT = 30.0  # a crowded machine gives a busy call less than a full core
LONG_CALL_MIN_WANTING_PCT = 60.0  # with schedstat: on a CPU or queued for one this share of the time
BUSY_CPU_PCT = 80.0

CPU_BOUND = BottleneckFacts(
    name="cpu_bound",
    words="host-CPU-bound",
    runs_on_host_cpu=True,
    short_of_host_cpu=True,
    hung_in=(),
    badge="worth_fixing",
    fix_removes=None,
    gpu_busy=False,
    kernels_bound=False,
    news_while_starting=False,
)


def evaluate(ev: Evidence) -> Candidate | None:
    g = ev.gpu
    compute = ev.main.share(COMPUTE)
    main_cpu = ev.main_cpu_pct
    power = power_fraction(ev)
    launch_bound = (
        g.in_use and g.util_pct is not None and g.util_pct >= LAUNCH_UTIL_PCT and main_cpu is not None
        and main_cpu >= LAUNCH_MAIN_RUNNING_PCT
        and ((g.sm_active_pct is not None and g.sm_active_pct < LAUNCH_BOUND_SM_ACTIVE_PCT)
             or (g.sm_active_pct is None and power is not None and power < LAUNCH_BOUND_POWER_FRACTION))
    )
    compiled = uses_torch_compile(ev)
    if launch_bound:
        lines = [(f"{gpu_line(ev)}: util is high but the SMs are mostly idle — small kernels, launched one by "
                 "one (launch-bound)"),
                 f"main process at {main_cpu:.0f}% CPU: the host cannot issue kernels faster"]
        if ev.main.samples:
            lines.append(main_share_line(ev, compute, "running on the CPU", COMPUTE))
        # The launch-bound levers the step's facts leave (levers.py): CUDA graphs, a larger batch, and compiling or
        # dropping host syncs only where the stacks or the command line show the model eager or a sync in the step.
        return Candidate("cpu_bound", max(0.6, compute), lines,
                         offered(Seen(ev.step, gpu_limit(ev), g, launch_bound=True), inside_step=True),
                         from_metrics=True)
    if compute < 0.05:
        return None
    if ev.main.share(WAIT, QUEUE_WAIT) > compute or mostly_asleep(ev):
        # It waits (sleeps, polls, or on a busy GPU) more than it works: not host compute. On a crowded machine its
        # bursts of work stretch while it queues for a core, which must not turn a sleepy loop into a CPU-bound one.
        return None
    # py-spy's "active" is running or runnable. With schedstat the run queue shows which: a thread that
    # wants the CPU and queues for it is CPU-bound all the same (starved); without it, CPU% weighs the rule.
    running = ev.running_share()
    score = compute if running is not None or main_cpu is None or main_cpu >= 50.0 else 0.8 * compute
    lines = [main_share_line(ev, compute, "running on the CPU", COMPUTE)]
    if running is not None and running < 0.8:
        # Said whole, not "of that": the monitor sets other lines (a recurring checkpoint) between this and the line
        # it would refer to.
        lines.append(f"the main thread waited for a free core {percent(1 - running)} of the time it was runnable "
                     f"(schedstat): {ev.main_thread_runqueue_pct:.0f}% of wall time queued against "
                     f"{ev.main_thread_cpu_pct:.0f}% on a CPU")
    if main_cpu is not None:
        available = f" ({cpu_amount(ev.effective_cpus)} available)" if ev.effective_cpus else ""
        lines.append(f"main process at {main_cpu:.0f}% CPU{available}")
        if main_cpu < 50.0 and compute >= 0.6:
            lines.append("it is runnable most of the time yet gets little CPU: the CPUs are contended")
    advice = []
    innermost = ev.main.top(COMPUTE)[0]
    if ev.unchanged_for_s >= LONG_CALL_S and _busy_on_one_stack(ev) and ev.stuck_stack:
        call = describe(ev.stuck_stack[0])
        queued = ev.main_thread_runqueue_pct
        waits = f" (and {queued:.0f}% waiting for a core)" if queued is not None and queued >= 10 else ""
        on_cpu = main_cpu if main_cpu is not None else ev.main_thread_cpu_pct or 0.0
        n = ev.unchanged_samples
        counted = f" ({n} sample{'s' if n != 1 else ''})" if n else ""
        # What was measured is one stack in every sample, never one call: py-spy names each frame's function, file
        # and line with no identity of the frame (record's raw output and dump's JSON alike), so a loop calling
        # work() again and again gives the very stack one long work() does, its caller's line included, and the
        # moments between two calls are too short to be sampled. Nothing gputop reads tells the two apart (native
        # frames only add the C++ beneath the same line), so the line says what was seen, and both readings.
        lines.insert(0, f"every sample for {ev.unchanged_for_s:.0f} s was in {call}{counted}, at {on_cpu:.0f}% "
                        f"CPU{waits}: busy in one place — slow, not hung (one long call or the same call again and "
                        "again: stack samples cannot tell which)")
        advice.append(f"The time goes to one line ({call}): check its sizes and dtype (float64 is several "
                      "times slower than float32) and whether it belongs on the GPU.")
    elif innermost is not None and is_generated_code(innermost):
        # Inductor's generated code is not the user's Python (nanochat's base_train and litgpt's pretrain on CPU).
        advice.append(f"The hot frame is {describe(innermost)}: the model already runs compiled, so this is the "
                      "compiled model's own work on the CPU, not Python to move into tensor operations or compile.")
    elif innermost is not None and not is_library(innermost):
        how = "" if compiled else ", or torch.compile it"
        advice.append(f"The hot frame is your own Python ({describe(innermost)}): move the loop into tensor "
                      f"operations{how}.")
    if not g.in_use:
        lines.append("no GPU in use by the target: the work runs on the CPU" if g.available else
                     f"no GPU readings ({g.reason or 'NVML unavailable'}): the work runs on the CPU")
        advice.append("If a GPU should do this work, move the model and each batch to it "
                      "(model.to('cuda'), batch.to('cuda', non_blocking=True)).")
    cpus = ev.effective_cpus
    threads = threads_per_rank(cpus, ev) if cpus else 1
    held_below = _threads_held_below(ev, threads) if cpus and threads >= 2 else None
    if cpus and held_below is not None and main_cpu is not None and main_cpu < 100.0 * (threads - 0.5):
        # Sized to this process's share: the ranks on the node and its DataLoader workers run on the same CPUs.
        per = " per rank" if ev.ranks_on_node > 1 else ""
        advice.append(f"It uses {main_cpu / 100:.1f} of the {threads} CPUs that are its share "
                      f"({cpu_share_words(cpus, ev)}){held_below}: torch.set_num_threads({threads}){per} lets CPU "
                      "ops use them.")
    return Candidate("cpu_bound", score, lines, advice)


def _threads_held_below(ev: Evidence, threads: int) -> str | None:
    """What holds torch's thread pool below `threads`, in words (", OMP_NUM_THREADS=1"), or None where nothing read
    says it is: torch sizes its pool by the CPUs a process may use, so a lone process is told to raise it only where
    its environment sets fewer (advice it already follows is never offered). A rank's pool is its launcher's choice
    (torchrun sets OMP_NUM_THREADS=1 for each rank where it is unset, and the ranks' own environment is not the one
    read): for a rank the empty string, the advice sized to its share of the node."""
    environment = ev.latest.target.environment or {}
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        value = environment.get(name, "")
        if value.isdigit() and int(value) < threads:
            return f", {name}={value}"
    return "" if ev.ranks_on_node > 1 else None


def _busy_on_one_stack(ev: Evidence) -> bool:
    """The main thread wants a CPU most of the time: running, or runnable and queued for a core (a crowded
    machine gives a busy call less than a full core). Without schedstat, its process's CPU% decides."""
    cpu, queued = ev.main_thread_cpu_pct, ev.main_thread_runqueue_pct
    if cpu is not None and queued is not None:
        return cpu + queued >= LONG_CALL_MIN_WANTING_PCT
    return ev.main_cpu_pct is not None and ev.main_cpu_pct >= LONG_CALL_MIN_CPU_PCT


RULE = Rule(concludes=(CPU_BOUND,), evaluate=evaluate)
