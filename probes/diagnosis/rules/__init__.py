"""The diagnosis rules, in the order they are tried. One module per bottleneck (gpu.py holds the two a busy GPU
can be), each declaring its BottleneckFacts beside the rule that concludes it; RULES lists them in priority
order, and evaluate_rules runs them.

A new bottleneck is its name in probes.frame.Bottleneck (the snapshot's vocabulary), one module here with its
facts and its RULE, one line in RULES and a row in docs/diagnosis.md: tests/unit/test_rules.py fails until all
four are there.
"""

from __future__ import annotations

from probes.diagnosis.evidence import Evidence
from probes.diagnosis.rules import (
    checkpoint_save,
    comms_bound,
    compile_warmup,
    cpu_bound,
    cpu_throttled,
    data_bound,
    gil_contention,
    gpu,
    idle,
    io_bound,
    memory_pressure,
)
from probes.diagnosis.rules.rule import Candidate, Rule
from probes.diagnosis.rules.unknown import no_rule_fits

ENTER_SCORE = 0.3  # a rule must be at least this strong to become the verdict

# The first rule strong enough wins, so each sits above the rules whose readings its own case would fake.
RULES: tuple[Rule, ...] = (
    # While torch.compile runs no step does: every other reading describes the compiler. A recompilation storm
    # outranks the training work around it, since the compiles are the waste.
    compile_warmup.RULE,
    # A phase the main thread is visibly in: the step waits while the checkpoint is written.
    checkpoint_save.RULE,
    # Before the GPU: ranks waiting in NCCL keep the GPU's util high while its SMs idle on their peers.
    comms_bound.RULE,
    # A busy GPU (by SM activity or power) outranks the host-side rules: a host-side wait cannot be the limit
    # while the GPU is saturated.
    gpu.RULE,
    # Before a quota's throttling, reads, input and host compute: a job short of memory stalls in reclaim and in
    # faults that read its pages back from disk, which show as a throttled quota (reclaim runs on the job's CPU
    # time), threads in disk wait, a main thread waiting for batches from stalled workers, or slow Python. The memory
    # is the cause of each; after the GPU, which while saturated is the limit whatever the host does.
    memory_pressure.RULE,
    # Before reads, input and host compute: a throttling quota slows each of them, and it is the cause.
    cpu_throttled.RULE,
    # Before the input pipeline: workers blocked reading show up as a main thread waiting for its batch.
    io_bound.RULE,
    # Before host compute: a loop that waits for batches part of the time is held back by its input.
    data_bound.RULE,
    # Before host compute: a training thread that waits for another thread's GIL looks like one that computes
    # (its stack stays on the lines it runs), but the fix is in the other thread.
    gil_contention.RULE,
    # Before idle: a main thread that computes is CPU-bound even though it also waits now and then.
    cpu_bound.RULE,
    # Last: waiting, with nothing else to blame.
    idle.RULE,
)


def evaluate_rules(ev: Evidence) -> list[Candidate]:
    """Every rule that fits: those strong enough first, in priority order, then 'unknown', then the
    weaker ones (kept so that a previous verdict can still be held while its rule weakens)."""
    fitted = [c for c in (rule.evaluate(ev) for rule in RULES) if c is not None]
    strong = [c for c in fitted if c.score >= ENTER_SCORE]
    weak = [c for c in fitted if c.score < ENTER_SCORE]
    return strong + [no_rule_fits(ev)] + weak
