"""io_bound: the main thread, or the DataLoader workers it waits for, blocked reading files or sockets, with
the read rate and threads in disk wait."""

from __future__ import annotations

from probes.diagnosis.evidence import Evidence
from probes.diagnosis.rules.lines import byte_rate, hot_spot, main_share_line, percent
from probes.diagnosis.rules.rule import BottleneckFacts, Candidate, FixRemoves, Rule
from probes.diagnosis.stacks import DATA_WAIT, IO

IO_BOUND = BottleneckFacts(
    name="io_bound",
    words="storage-bound",
    runs_on_host_cpu=False,
    short_of_host_cpu=False,
    hung_in=(IO,),
    badge="worth_fixing",
    fix_removes=FixRemoves(
        phases=("data",), activities=(IO,),
        why="if reads kept up (they hold the step {pct} of the time)"),
    gpu_busy=False,
    kernels_bound=False,
    news_while_starting=False,
)


def evaluate(ev: Evidence) -> Candidate | None:
    main_share = ev.main.share(IO)
    worker_share = ev.workers.share(IO) if ev.workers.samples else 0.0
    via_workers = ev.main.share(DATA_WAIT) * worker_share
    score = max(main_share, via_workers)
    if score < 0.05:
        return None
    lines = []
    if main_share >= via_workers:
        lines.append(main_share_line(ev, main_share, "blocked reading", IO))
    else:
        lines.append(main_share_line(ev, ev.main.share(DATA_WAIT), "waiting for the next batch", DATA_WAIT))
        lines.append(f"DataLoader workers: {percent(worker_share)} of their samples blocked reading in "
                     f"{hot_spot(ev.workers, IO)}")
    figures = []
    if ev.read_chars_per_s is not None:
        figures.append(f"reading {byte_rate(ev.read_chars_per_s)}")
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


RULE = Rule(concludes=(IO_BOUND,), evaluate=evaluate)
