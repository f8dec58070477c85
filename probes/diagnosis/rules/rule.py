"""What every rule module fills in: the facts of each bottleneck it can conclude (BottleneckFacts), the finding
it returns (Candidate), and the Rule that pairs them with the function reading the Evidence."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from probes.diagnosis.evidence import Evidence
from probes.frame import Bottleneck


@dataclass(frozen=True)
class BottleneckFacts:
    """What the rest of gputop needs to know of one bottleneck, declared once beside the rule concluding it.

    Every field is required, so a new bottleneck decides each of them."""

    name: Bottleneck
    words: str  # how the TUI names it (the verdict pane, the timeline, the ranks table)
    # Its work runs on the host CPU, so CPUs shared with other work qualify any verdict of it. For the others
    # (waiting, the GPU, reads) sharing matters only when the main thread is seen queueing for a core.
    runs_on_host_cpu: bool
    # Host CPU is what it is short of: where the CPUs are shared, that advice comes before the rule's own.
    short_of_host_cpu: bool
    # Stack activities (probes.diagnosis.stacks) that name this bottleneck when a hung main thread is stuck
    # in one: a hang inside a DataLoader fetch is the input pipeline's.
    hung_in: tuple[str, ...]


@dataclass
class Candidate:
    """One rule's finding: the bottleneck, its strength (0-1), the evidence lines and the advice."""

    bottleneck: Bottleneck
    score: float
    evidence: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)
    from_metrics: bool = False  # rests on GPU or cgroup counters rather than on stack samples
    held_over: bool = False  # the previous verdict, kept while too few samples point elsewhere
    # Its finding already spans several sample windows (a recompilation storm): it replaces the previous
    # verdict without the switch margin, which is there for one noisy window.
    sustained: bool = False
    # What it names is a one-time cost that ends by itself (torch.compile's warm-up): no fix removes it, so the
    # verdict promises no speed-up for it (Verdict.one_time_cost).
    one_time_cost: bool = False


@dataclass(frozen=True)
class Rule:
    """A rule: the bottlenecks it may conclude, and `evaluate`, which returns a Candidate naming one of them
    when it fits the Evidence, else None."""

    concludes: tuple[BottleneckFacts, ...]
    evaluate: Callable[[Evidence], Candidate | None]
