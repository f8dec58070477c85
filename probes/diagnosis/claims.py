"""What a fix can win, as a typed claim, and the one place such a claim becomes words (issue 38).

Every gain gputop offers is one of three kinds, and says which:

* measured: timed on this job or on this GPU at the job's settings (a probe run with the job's shape);
* bound: a ceiling derived from a measured share: the SMs' time with no work on them, the share of py-spy's
  samples in a loop, a clock held at a measured fraction of its maximum (a step speeds up at most in proportion);
* estimate: a figure from elsewhere (another model's probe, a datasheet's peak ratio), with what it rests on.

The word "measured" appears in a gain only for the measured kind: a claim cannot read stronger than its type.
An advice line is its text (a `str`, as every line of a verdict), carrying the lever it names and its gain, so the
snapshot writes them as records (`advice_record`) while the screens show the words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from probes.diagnosis.verdict_lines import VerdictLine

GainKind = Literal["measured", "bound", "estimate"]
_KIND_WORDS: Final[dict[GainKind, str]] = {"measured": "measured", "bound": "a bound", "estimate": "estimate"}


@dataclass(frozen=True)
class Gain:
    """The most a lever can win: the figure in words, its kind, what it rests on, and the samples behind it where a
    share of samples is its basis."""

    most: str  # "~19%", "the 80% of the SMs' time with no work on them"
    basis: str
    kind: GainKind
    samples: int | None = None

    def words(self) -> str:
        """"most it can win: ~19% (a bound: the SM clock runs at 84% of its maximum …)"."""
        behind = f", over {self.samples} samples" if self.samples else ""
        return f"most it can win: {self.most} ({_KIND_WORDS[self.kind]}: {self.basis}{behind})"

    def record(self) -> dict[str, Any]:
        return {"most": self.most, "kind": self.kind, "basis": self.basis, "samples": self.samples}


class Advice(VerdictLine):
    """An advice line that pulls a named lever: its words, the lever, and its gain (None where no figure is
    claimed)."""

    lever: str
    gain: Gain | None

    def __new__(cls, text: str, lever: str, gain: Gain | None = None) -> Advice:
        line = super().__new__(cls, text, "finding")
        line.lever = lever
        line.gain = gain
        return line

    def __reduce__(self) -> tuple[Any, ...]:
        return Advice, (str(self), self.lever, self.gain)  # copies keep the lever and its gain


def lever_advice(action: str, lever: str, gain: Gain | None) -> Advice:
    """The one sentence a lever's advice is: what to do, then the most it can win and its kind and basis."""
    said = f"{action} — {gain.words()}." if gain is not None else f"{action}."
    return Advice(said, lever, gain)


def advice_record(line: str) -> dict[str, Any]:
    """A verdict's advice line as the snapshot writes it: its text, and the lever and gain where it pulls one."""
    if isinstance(line, Advice):
        return {"text": str(line), "lever": line.lever, "gain": line.gain.record() if line.gain else None}
    return {"text": str(line), "lever": None, "gain": None}
