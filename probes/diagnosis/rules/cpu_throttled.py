"""cpu_throttled: the cgroup's CPU quota throttles the target (cpu.stat), with its thread count against the
quota and the thread settings that fit it."""

from __future__ import annotations

import math

from probes.diagnosis.evidence import Evidence
from probes.diagnosis.rules.lines import cpu_amount, percent, threads_per_rank
from probes.diagnosis.rules.rule import BottleneckFacts, Candidate, Rule

CPU_THROTTLED = BottleneckFacts(
    name="cpu_throttled",
    words="CPU quota-throttled",
    runs_on_host_cpu=True,
    short_of_host_cpu=False,
    hung_in=(),
    badge="worth_fixing",
    fix_removes=None,
    gpu_busy=False,
    kernels_bound=False,
    news_while_starting=True,
)


def evaluate(ev: Evidence) -> Candidate | None:
    fraction = ev.throttled_fraction
    if fraction is None or fraction < 0.05:
        return None
    cpu = ev.latest.cpu
    quota = f"cgroup quota {cpu_amount(cpu.quota_cpus)}" if cpu.quota_cpus is not None else "its cgroup's quota"
    source = f" (set on {cpu.quota_source})" if cpu.quota_source else ""
    lines = [f"throttled in {percent(fraction)} of CPU periods: {quota}{source}"]
    effective = cpu.effective_cpus if cpu.effective_cpus is not None else cpu.quota_cpus
    if cpu.runnable_threads is not None and effective:
        threads = cpu.runnable_threads
        lines.append(f"{threads} runnable thread{'s' if threads != 1 else ''} on {cpu_amount(effective)}")
    if cpu.usage_cpus is not None:
        lines.append(f"using {cpu.usage_cpus:.2f} CPUs")
    environment = ev.latest.target.environment
    if environment is not None:
        omp = environment.get("OMP_NUM_THREADS")
        visible = f"the {cpu.affinity_cpus} visible cores" if cpu.affinity_cpus else "the visible cores"
        lines.append(f"OMP_NUM_THREADS={omp}" if omp else
                     f"OMP_NUM_THREADS is not set: torch sizes its thread pool by {visible}, not by the quota")
    # The quota is the job's: its ranks on this node share it, so each rank's pool is its share of it.
    rank_share = max(1, math.floor(effective / ev.ranks_on_node)) if effective else 1
    threads = threads_per_rank(effective, ev) if effective else 1
    per = f" per rank ({ev.ranks_on_node} ranks share it)" if ev.ranks_on_node > 1 else ""
    advice = [(f"Cap threads to the quota: torch.set_num_threads({threads}){per}, or OMP_NUM_THREADS={threads} "
              f"MKL_NUM_THREADS={threads} before start.")]
    if ev.worker_cpu:
        advice.append(f"DataLoader num_workers at most {max(0, rank_share - 1)} under this quota{per and ' per rank'} "
                      f"(now {len(ev.worker_cpu)}).")
    advice.append("Or raise the quota: cpu.max (v2) / cpu.cfs_quota_us (v1) of that cgroup, "
                  "or the container's --cpus.")
    return Candidate("cpu_throttled", min(1.0, 0.2 + fraction), lines, advice, from_metrics=True)


RULE = Rule(concludes=(CPU_THROTTLED,), evaluate=evaluate)
