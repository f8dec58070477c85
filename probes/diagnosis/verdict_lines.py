"""What kind of line each line of a verdict is, carried on the line itself, so that a later step (a held verdict, a
job's verdict over its ranks) picks lines by their kind and never by their words.

A VerdictLine is its text: a `str`, so `Verdict.evidence` and `Verdict.advice` stay tuples of strings and the
snapshot, the recording, the screens and /metrics show each line exactly as its words. Only the lines a later step
looks for are typed; every other line (a rule's finding, a rank's line rewritten for the job) is a plain string,
of kind "finding". A line rebuilt from another (an f-string around it) is a new finding: its kind does not follow.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, TypeVar

LineKind = Literal[
    "finding",  # what the rule or the job's comparison found: every untyped line
    "provisional",  # the verdict rests on too few samples so far (it says how few)
    "holding",  # the previous verdict is kept while too few samples point elsewhere
    "contention",  # CPUs shared with other work: the evidence line and its advice, added afresh each tick
    "after_warmup",  # when torch.compile's warm-up ended, under a verdict of the steady state after it
]
# The notes on how far a verdict can be trusted, said once for the whole verdict: a job's verdict and a held one
# leave its ranks' or its predecessor's out.
THIN_EVIDENCE_NOTES: tuple[LineKind, ...] = ("provisional", "holding")


_Line = TypeVar("_Line", bound="VerdictLine")


class VerdictLine(str):
    """A line of a verdict's evidence or advice, with its kind."""

    kind: LineKind

    def __new__(cls: type[_Line], text: str, kind: LineKind) -> _Line:
        line = str.__new__(cls, text)
        line.kind = kind
        return line

    def __reduce__(self) -> tuple[type[VerdictLine], tuple[str, LineKind]]:
        return VerdictLine, (str(self), self.kind)  # copies (dataclasses.asdict deep-copies) keep the kind


def kind_of(line: str) -> LineKind:
    """The kind of a line of a verdict: its own where it is a VerdictLine, else a finding."""
    return line.kind if isinstance(line, VerdictLine) else "finding"


def without(lines: Iterable[str], *kinds: LineKind) -> list[str]:
    """The lines, in order, less those of the given kinds."""
    return [line for line in lines if kind_of(line) not in kinds]
