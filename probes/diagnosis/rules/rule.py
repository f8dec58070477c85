"""What every rule module fills in: the facts of each bottleneck it can conclude (BottleneckFacts, with what its
fix removes, FixRemoves), the finding it returns (Candidate), and the Rule that pairs them with the function
reading the Evidence.

Every fact the rest of gputop needs of one bottleneck is a field here, read through the registry
(probes.diagnosis.bottlenecks FACTS_BY_NAME): the diagnosis, the time shares, `gputop compare`, the monitor's pace
line and the TUI read it there, and tests/unit/test_bottleneck_facts.py fails where one keeps a table of its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from probes.diagnosis.evidence import Evidence
from probes.diagnosis.phases import Phase
from probes.diagnosis.stacks import Activity
from probes.frame import Bottleneck

# How the verdict's badge reads (the TUI gives each its colour): the limit a healthy run should have, a limit worth
# fixing, no limit to name (waiting with nothing to blame, no verdict yet), or not a verdict but what hides one.
BadgeTone = Literal["healthy", "worth_fixing", "neutral", "blind"]


@dataclass(frozen=True)
class FixRemoves:
    """The main thread's time a bottleneck's fix removes, at most: its share s bounds what the fix can win to
    1 / (1 - s) times faster (Amdahl)."""

    phases: tuple[Phase, ...]  # as the time shares name them (probes/diagnosis/shares.py, a snapshot's time_shares)
    # The same time as stack activities (probes.diagnosis.stacks) name it, for a recording whose snapshot carries
    # no time shares: `gputop compare` sums the main thread's samples in them itself.
    activities: tuple[Activity, ...]
    # What the fix would do and the share it would remove, after "up to 1.2× faster "; {pct} is that share.
    why: str


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
    hung_in: tuple[Activity, ...]
    badge: BadgeTone
    fix_removes: FixRemoves | None  # None: no measured phase bounds what its fix can win
    # The GPU is the limit and busy all the time: whatever runs outside it is all any other fix can win, and the
    # main thread's computing and waiting for the GPU are both the GPU's time (two such runs compare their sum).
    gpu_busy: bool
    # The GPU's kernels at full clocks are the limit: the MFU on the pace line says whether they run as fast as
    # this model allows, or are worth a look (dtype, fusion, batch size).
    kernels_bound: bool
    # A limit measured from outside the code the main thread runs (a quota's throttling, another thread holding the
    # GIL): it slows the job's imports as much as its training, so it is the verdict while the job is starting too,
    # where every other reading would describe the imports (probes/diagnosis/rules/unknown.py: starting).
    news_while_starting: bool


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
