"""comms_bound: the main thread in a collective (c10d, FSDP's all-gather and reduce-scatter, DDP's hooks),
with the GPU's spin and NCCL's threads as corroboration."""

from __future__ import annotations

from probes.diagnosis.evidence import Evidence
from probes.diagnosis.rules.lines import gpu_line, main_share_line
from probes.diagnosis.rules.rule import BottleneckFacts, Candidate, FixRemoves, Rule
from probes.diagnosis.rules.signs import LAUNCH_BOUND_SM_ACTIVE_PCT
from probes.diagnosis.stacks import COMMS

COMMS_BOUND = BottleneckFacts(
    name="comms_bound",
    words="collectives-bound",
    runs_on_host_cpu=False,
    short_of_host_cpu=False,
    hung_in=(COMMS,),
    badge="worth_fixing",
    fix_removes=FixRemoves(
        phases=("collectives",), activities=(COMMS,),
        why="if collectives overlapped with compute (they take {pct} of the time)"),
    gpu_busy=False,
    kernels_bound=False,
    news_while_starting=False,
)


def evaluate(ev: Evidence) -> Candidate | None:
    share = ev.main.share(COMMS)
    if share < 0.05:
        return None
    lines = [main_share_line(ev, share, "in a collective", COMMS, sep=":")]
    g = ev.gpu
    if g.in_use and g.util_pct is not None and g.sm_active_pct is not None and g.util_pct >= 70 \
            and g.sm_active_pct < LAUNCH_BOUND_SM_ACTIVE_PCT:
        lines.append(f"{gpu_line(ev)}: util is high but few SMs work — NCCL kernels waiting on peers")
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


RULE = Rule(concludes=(COMMS_BOUND,), evaluate=evaluate)
