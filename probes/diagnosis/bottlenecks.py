"""The bottlenecks the diagnosis names, each with the facts its rule module declares beside it, in RULES' order
with 'cannot_see' and 'unknown' last: the one place the verdict's context, the hung verdict and the TUI's
words read them from."""

from __future__ import annotations

from probes.diagnosis.rules import RULES
from probes.diagnosis.rules.cannot_see import CANNOT_SEE
from probes.diagnosis.rules.rule import BottleneckFacts
from probes.diagnosis.rules.unknown import UNKNOWN
from probes.diagnosis.stacks import Activity
from probes.frame import Bottleneck

BOTTLENECK_FACTS: tuple[BottleneckFacts, ...] = (
    *(facts for rule in RULES for facts in rule.concludes), CANNOT_SEE, UNKNOWN,
)
FACTS_BY_NAME: dict[Bottleneck, BottleneckFacts] = {facts.name: facts for facts in BOTTLENECK_FACTS}
# The stack activity a hung main thread is stuck in -> the bottleneck its verdict names ('unknown' if none).
HUNG_BOTTLENECK_BY_ACTIVITY: dict[Activity, Bottleneck] = {
    activity: facts.name for facts in BOTTLENECK_FACTS for activity in facts.hung_in
}


def facts_named(name: str | None) -> BottleneckFacts | None:
    """The facts of a bottleneck named by a string read back (a snapshot, a recording another version of gputop
    wrote), None where the name is none of this version's."""
    return next((facts for facts in BOTTLENECK_FACTS if facts.name == name), None)
