"""data_bound: the main thread waiting for the next batch or preparing data itself, with what the DataLoader
workers are doing (busy, CPU-starved, saturating the CPUs, or idle) and the advice each case calls for."""

from __future__ import annotations

from probes.diagnosis.evidence import Evidence
from probes.diagnosis.rules.lines import cpu_amount, hot_spot, main_share_line, percent
from probes.diagnosis.rules.rule import BottleneckFacts, Candidate, FixRemoves, Rule
from probes.diagnosis.rules.signs import producer_busy
from probes.diagnosis.stacks import COMPUTE, DATA_PREP, DATA_WAIT, IO, QUEUE_WAIT, WAIT

GPU_STARVED_UTIL_PCT = 50.0
WORKER_BUSY_CPU_PCT = 70.0
WORKER_BUSY_ACTIVE_SHARE = 0.6
WORKER_STARVED_CPU_PCT = 50.0
# Workers under this CPU (and not active most of their samples) are idle: the batch waits elsewhere (IPC, collate,
# prefetch). Between this and WORKER_BUSY_CPU_PCT they work part of the time: one worker at 38% that the main thread
# waits on is its input pipeline, not an idle one.
WORKER_IDLE_CPU_PCT = 25.0
SATURATED_FRACTION = 0.85
MIN_UNUSED_CPUS = 0.5  # less than half a CPU unused is no room for another worker
# Idle workers whose engaged samples (all but the helper threads' waits) are mostly inside the dataset's own code
# wait there per sample: a read, a request, a sleep.
INSIDE_DATASET_SHARE = 0.6

DATA_BOUND = BottleneckFacts(
    name="data_bound",
    # the evidence says whether DataLoader workers or the main thread fall behind
    words="input-bound",
    runs_on_host_cpu=True,
    short_of_host_cpu=True,
    hung_in=(DATA_WAIT, DATA_PREP),
    badge="worth_fixing",
    fix_removes=FixRemoves(
        phases=("data",), activities=(DATA_WAIT, DATA_PREP),
        why="if the input pipeline kept up (it holds the step {pct} of the time)"),
    gpu_busy=False,
    kernels_bound=False,
    news_while_starting=False,
)


def evaluate(ev: Evidence) -> Candidate | None:
    wait = ev.main.share(DATA_WAIT)
    prep = ev.main.share(DATA_PREP)
    queue = ev.main.share(QUEUE_WAIT) if producer_busy(ev) else 0.0
    score = wait + prep + queue
    if score < 0.05:
        return None
    lines, advice = [], []
    if prep >= wait + queue:
        lines.append(main_share_line(ev, prep, "preparing data on the main thread", DATA_PREP))
        offline = ("Do it once, offline: pre-tokenize the corpus to a binary file (e.g. uint16 token ids in a "
                   "np.memmap, as nanoGPT's prepare.py does).")
        unused = _unused_cpus(ev)
        if unused is not None and unused < MIN_UNUSED_CPUS:
            # Workers beside the step need CPUs: where none is left, moving the work to them only moves the wait.
            lines.append(_no_cpu_left_line(ev, "DataLoader workers beside the step"))
            advice += [offline, "Or make it cheaper (the hot frame above), or run where more CPUs are free: a "
                       "DataLoader with num_workers > 0 needs CPUs beside the step's."]
        else:
            advice += [
                ("Move this work off the training loop: a DataLoader with num_workers > 0 runs it in parallel "
                 "with the step."),
                "Or d" + offline[1:],
            ]
    else:
        lines.append(main_share_line(ev, wait + queue, "waiting for the next batch", DATA_WAIT, QUEUE_WAIT))
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
    if n == 1:
        lines.append(f"1 DataLoader worker at {mean_cpu:.0f}% CPU")
    elif max(cpus) - min(cpus) <= 10:
        lines.append(f"{n} DataLoader workers at {mean_cpu:.0f}% CPU each")
    else:
        lines.append(f"{n} DataLoader workers at " + ", ".join(f"{c:.0f}%" for c in cpus[:6]) + " CPU")
    # py-spy's "active" means running or waiting for a CPU: a worker active in most samples is busy
    # even when a crowded machine gives it little CPU time.
    active = ev.workers.awake_share(COMPUTE, DATA_PREP, IO) if ev.workers.samples else None
    if active is not None and active >= 0.3:
        lines.append(f"workers busy in {hot_spot(ev.workers, COMPUTE, DATA_PREP)}")
    busy = mean_cpu >= WORKER_BUSY_CPU_PCT or (active is not None and active >= WORKER_BUSY_ACTIVE_SHARE)
    effective = ev.effective_cpus
    tree = (ev.tree_cpu_pct or 0.0) / 100.0
    if busy and effective is not None and tree >= SATURATED_FRACTION * effective:
        lines.append(f"the CPUs are saturated: the tree uses {tree:.1f} of {cpu_amount(effective)}")
        return [
            ("More workers will not help: every CPU is busy. Make each sample cheaper (the hot frame above), "
             "move decoding/augmentation to the GPU, or pre-process the dataset offline."),
            "Or run where more CPUs are available.",
        ]
    if busy and mean_cpu < WORKER_STARVED_CPU_PCT:
        lines.append(f"the workers are runnable in {percent(active or 0.0)} of their samples yet get {mean_cpu:.0f}% "
                     f"CPU each: they wait for a CPU (the tree uses {tree:.1f} of "
                     f"{cpu_amount(effective) if effective else 'the CPUs'}; other processes take the rest)")
        return [
            ("The workers are CPU-starved: more workers will not help until CPUs are free. Make each sample "
            "cheaper (the hot frame above), pre-process the dataset offline, or stop what else runs here."),
        ]
    if not busy and _wait_inside_dataset(ev, mean_cpu):
        lines.append(f"the workers spend their samples in {hot_spot(ev.workers, DATA_PREP, IO)} yet use "
                     f"{mean_cpu:.0f}% CPU: they wait there (a read, a request, a sleep), not compute")
        return [
            (f"Raise DataLoader num_workers (now {n}): each worker waits inside the dataset rather than computing, "
             "so more workers overlap the waits at little CPU cost."),
            ("Or make each read cheaper: local disk or a page-cached copy, larger sequential reads (shards), or "
             "fewer round trips per sample."),
        ]
    if not busy and mean_cpu < WORKER_IDLE_CPU_PCT:
        return [
            ("The workers are mostly idle while the main thread waits: look at IPC of large batches "
             "(pin_memory, shared memory), a slow collate_fn, or prefetch_factor too small."),
        ]
    how_busy = "busy" if busy else "busy part of the time"
    if effective is None:
        return [
            f"Raise DataLoader num_workers (now {n}) if CPUs are free: the workers are {how_busy}.",
            "Make each sample cheaper (the hot frame above), or pre-process the dataset offline.",
        ]
    unused = _unused_cpus(ev)
    if unused is not None and unused < MIN_UNUSED_CPUS:
        lines.append(_no_cpu_left_line(ev, "more workers"))
        return [
            ("More workers will not help: other processes take the CPUs they would run on. Make each sample "
             "cheaper (the hot frame above), pre-process the dataset offline, or stop what else runs here."),
        ]
    left = f"; {unused:.1f} of {cpu_amount(effective)} unused" if unused is not None else ""
    return [
        f"Raise DataLoader num_workers (now {n}{left}): the workers are {how_busy} and CPU is left.",
        "Make each sample cheaper (the hot frame above), or pre-process the dataset offline.",
    ]


def _unused_cpus(ev: Evidence) -> float | None:
    """What more work beside the step could run on: the CPUs the tree may use, less its own use and what other
    processes take of them (the tree below saturation is not CPU left where other work fills the rest)."""
    if ev.effective_cpus is None:
        return None
    return ev.effective_cpus - (ev.tree_cpu_pct or 0.0) / 100.0 - (ev.others_busy_cpus or 0.0)


def _no_cpu_left_line(ev: Evidence, for_what: str) -> str:
    tree, others = (ev.tree_cpu_pct or 0.0) / 100.0, ev.others_busy_cpus or 0.0
    effective = ev.effective_cpus or 0.0
    return (f"no CPU is left for {for_what}: the tree uses {tree:.1f} of {cpu_amount(effective)}, other processes "
            f"{others:.1f}")


def _wait_inside_dataset(ev: Evidence, mean_cpu: float) -> bool:
    """Idle workers that are blocked inside the dataset (its __getitem__, a read) in most samples their main threads
    are engaged: each worker process also runs threads that only wait (a queue feeder, the fd sharer), which the
    WAIT activity holds, so the share is of the rest. Seen on torchrun ranks whose Dataset slept 50 ms a sample: the
    workers at 0-1% CPU, 33 of 34 engaged samples in __getitem__, and the advice looked at IPC and collate_fn."""
    engaged = ev.workers.samples - ev.workers.by_activity[WAIT]
    inside = sum(ev.workers.by_activity[a] - ev.workers.awake[a] for a in (DATA_PREP, IO))  # blocked in there
    return mean_cpu < WORKER_STARVED_CPU_PCT and engaged > 0 and inside / engaged >= INSIDE_DATASET_SHARE


RULE = Rule(concludes=(DATA_BOUND,), evaluate=evaluate)
