"""idle: the main thread waiting (sleeping, polling, a lock) or asleep by schedstat, with little CPU and no
producer at work: it is not training most of the time. Waiting while its GPU runs kernels is waiting for the GPU
(a CUDA synchronisation with the GIL released, which py-spy calls idle), never idle; nor is sleep its samples place
in a collective (a rank waiting for the others, comms_bound's case)."""

from __future__ import annotations

from probes.diagnosis.evidence import Evidence
from probes.diagnosis.rules.lines import hot_spot, main_share_line, percent
from probes.diagnosis.rules.rule import BottleneckFacts, Candidate, Rule
from probes.diagnosis.rules.signs import (
    MOSTLY_ASLEEP_PCT,
    mostly_asleep,
    producer_busy,
    waits_on_gpu,
    works_beside_the_main_thread,
)
from probes.diagnosis.stacks import COMMS, QUEUE_WAIT, WAIT

IDLE = BottleneckFacts(
    name="idle",
    words="idle",
    runs_on_host_cpu=False,
    short_of_host_cpu=False,
    hung_in=(),
    badge="neutral",
    fix_removes=None,
    gpu_busy=False,
    kernels_bound=False,
    news_while_starting=False,
)


def evaluate(ev: Evidence) -> Candidate | None:
    # A busy GPU: the main thread's generic waits are its CUDA synchronisations; only a queue's wait may be idle.
    on_gpu = waits_on_gpu(ev)
    idle_activities = (QUEUE_WAIT,) if on_gpu else (WAIT, QUEUE_WAIT)
    waiting = ev.main.share(*idle_activities)
    asleep = mostly_asleep(ev) and not on_gpu and not _asleep_in_collectives(ev)
    # Waiting in py-spy's samples while nothing works beside the main thread (its own work between waits may be
    # a third of a core), or asleep by schedstat in a process that hardly uses a CPU.
    seen_waiting = waiting >= 0.3 and not works_beside_the_main_thread(ev)
    if not seen_waiting and not asleep:
        return None
    if ev.main.share(QUEUE_WAIT) >= 0.3 and producer_busy(ev):
        return None  # waiting on a working producer: the data rule's case
    if seen_waiting:
        where = hot_spot(ev.main, *idle_activities)
        lines = [main_share_line(ev, waiting, "waiting", *idle_activities)]
    else:  # py-spy caught it runnable; schedstat says it slept
        where = hot_spot(ev.main, *ev.main.by_activity)
        asleep_pct = ev.asleep_pct()
        assert asleep_pct is not None  # mostly_asleep(ev) above read it
        waiting = asleep_pct / 100.0
        lines = [f"main thread asleep {percent(waiting)} of wall time (on a CPU {ev.main_thread_cpu_pct:.0f}%, queued "
                 f"for one {ev.main_thread_runqueue_pct:.0f}%), most often in {where}: py-spy's samples catch it "
                 "only while it is runnable"]
    if ev.active_tick_share is not None and ev.tree_cpu_pct is not None:
        ticks = len([f for f in ev.stack_frames if f.processes])
        lines.append(f"CPU time in {percent(ev.active_tick_share)} of {ticks} ticks, {ev.tree_cpu_pct:.0f}% of a "
                     "core on average: it works briefly, then waits")
    return Candidate("idle", waiting, lines, [
        (f"It is not training most of the time: if {where} is a sleep or a polling interval, shorten or remove "
        "it; otherwise find what it waits for (the frames above it)."),
    ])


def _asleep_in_collectives(ev: Evidence) -> bool:
    """The main thread's sleep is mostly its waits for the other ranks: what is left of its asleep share once its
    samples in a collective are taken out is under MOSTLY_ASLEEP_PCT. A DDP rank on CPU blocked in backward while
    its peer catches up sleeps there; that is waiting for the peer, not a sleep to shorten."""
    asleep = ev.asleep_pct()
    return asleep is not None and ev.main.samples > 0 and \
        asleep - 100.0 * ev.main.share(COMMS) < MOSTLY_ASLEEP_PCT


RULE = Rule(concludes=(IDLE,), evaluate=evaluate)
