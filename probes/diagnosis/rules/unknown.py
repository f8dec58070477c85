"""unknown: what is said while no rule fits (or no stack has been sampled yet), and while the job is still starting
(its main thread importing modules, before any verdict). Not a rule in RULES: it always fits, and evaluate_rules
places it after the rules strong enough to be the verdict; diagnose asks `starting` first."""

from __future__ import annotations

from dataclasses import dataclass

from probes.diagnosis.evidence import Evidence
from probes.diagnosis.rules.lines import percent
from probes.diagnosis.rules.rule import BottleneckFacts, Candidate
from probes.diagnosis.stacks import describe, importing_from

# The share of the main thread's samples inside imports at which the job is still starting: a script importing torch
# runs Python on the CPU (the cpu_bound rule read it as host compute, "host-CPU-bound · 40%", issue 31), and nothing
# it does then says what will limit its training.
STARTING_IMPORT_SHARE = 0.5

UNKNOWN = BottleneckFacts(
    name="unknown",
    words="no verdict yet",
    # No rule fits: CPUs shared with other work are worth saying whatever the main thread is doing.
    runs_on_host_cpu=True,
    short_of_host_cpu=False,
    hung_in=(),
    badge="neutral",
    fix_removes=None,
    gpu_busy=False,
    kernels_bound=False,
    news_while_starting=False,
)


def no_rule_fits(ev: Evidence) -> Candidate:
    stacks = ev.latest.stacks
    if not ev.main.samples:
        why = stacks.reason if not stacks.available and stacks.reason else "waiting for the first stack samples"
        return Candidate("unknown", 0.0, [f"no samples of the main thread yet: {why}"])
    top = ", ".join(f"{activity} {percent(n / ev.main.samples)}"
                    for activity, n in ev.main.by_activity.most_common(3))
    return Candidate("unknown", 0.0, [f"no rule fits yet: main thread {top} of {ev.main.samples} samples"])


@dataclass(frozen=True)
class StartImports:
    """The main thread mostly importing modules: `done` of its `samples` samples, most of them from `where`."""

    done: int
    samples: int
    where: str

    def words(self) -> str:
        return (f"starting: the main thread was importing modules in {self.done} of {self.samples} samples "
                f"(from {self.where})")


def start_imports(ev: Evidence) -> StartImports | None:
    """The job's imports, where they hold at least STARTING_IMPORT_SHARE of the main thread's samples."""
    samples = ev.main.samples
    importing: dict[str, int] = {}
    for stack, count in ev.main.stacks.items():
        origin = importing_from(stack)
        if origin is not None:
            importing[describe(origin)] = importing.get(describe(origin), 0) + count
    done = sum(importing.values())
    if not samples or done < STARTING_IMPORT_SHARE * samples:
        return None
    return StartImports(done, samples, max(importing, key=importing.__getitem__))


def starting(imports: StartImports) -> Candidate:
    """No verdict while the main thread mostly imports modules: what is measured is the import, not the training
    loop. Asked only before any verdict is reached (a lazy import later in a run is part of that run), and only
    where no limit measured outside the code (BottleneckFacts.news_while_starting) holds the imports back."""
    return Candidate("unknown", 0.0, [f"{imports.words()}: no verdict until it runs its own code"])
