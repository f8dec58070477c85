"""Small pure formatters the panes share: durations, sizes, bars, sparklines, short file paths, and the
words shown for bottlenecks, liveness and process roles. No widgets here, so each is unit-testable."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from probes.frame import (
    ROLE_COMPILE_WORKER,
    ROLE_DATALOADER_WORKER,
    ROLE_FORKSERVER,
    ROLE_LAUNCHER,
    ROLE_MAIN,
    ROLE_OTHER,
    ROLE_RANK,
    ROLE_RESOURCE_TRACKER,
    Frame,
    JobVerdict,
    ProcessSample,
    Verdict,
)
from probes.view.panes import BOTTLENECK_FACTS, facts_named, support_words

SPARK_LEVELS = "▁▂▃▄▅▆▇█"

# Declared beside each bottleneck's rule (probes/diagnosis/rules/), so a new bottleneck cannot lack its words.
# Keyed by any str: a recording may name a bottleneck this version does not have.
BOTTLENECK_WORDS: dict[str, str] = {facts.name: facts.words for facts in BOTTLENECK_FACTS}

LIVENESS_WORDS = {
    "progressing": "progressing",
    "hung": "HUNG",
    "sleeping": "sleeping",
    "exited": "exited",
    "unknown": "liveness unknown",
}

# Keyed by any name: a recording made by another version of gputop may carry a role this one does not know.
ROLE_WORDS: dict[str, str] = {
    ROLE_MAIN: "main",
    ROLE_DATALOADER_WORKER: "DataLoader worker",
    ROLE_COMPILE_WORKER: "compile worker",
    ROLE_FORKSERVER: "forkserver",
    ROLE_RESOURCE_TRACKER: "resource tracker",
    ROLE_OTHER: "other",
    ROLE_LAUNCHER: "launcher",
    ROLE_RANK: "rank",
}


def bottleneck_words(bottleneck: str) -> str:
    # A name outside the vocabulary can still arrive in a recording made by another version of gputop.
    return BOTTLENECK_WORDS.get(bottleneck, bottleneck.replace("_", " "))


def liveness_words(liveness: str) -> str:
    return LIVENESS_WORDS.get(liveness, liveness.replace("_", " "))


# Where no bottleneck is named, a hung or exited job is named by that: "no verdict yet" beside HUNG read as if
# gputop had nothing to say about a job it had just called hung.
_NAMED_BY_LIVENESS = ("hung", "exited")


def named_by_liveness(bottleneck: str, liveness: str) -> bool:
    """Whether the verdict is named by its liveness: a hung or exited job with no bottleneck named."""
    return bottleneck == "unknown" and liveness in _NAMED_BY_LIVENESS


def verdict_name(bottleneck: str, liveness: str) -> str:
    """The verdict's name, the words on its badge: its bottleneck's, or a hung or exited job's liveness ("HUNG")
    where no bottleneck is named."""
    return liveness_words(liveness) if named_by_liveness(bottleneck, liveness) else bottleneck_words(bottleneck)


def verdict_state(verdict: Verdict) -> str | None:
    """What follows the verdict's name: its liveness in words; where the name is the liveness already, how long
    nothing has moved (what the hang rests on), else None."""
    if not named_by_liveness(verdict.bottleneck, verdict.liveness):
        return liveness_words(verdict.liveness)
    if verdict.liveness == "hung" and verdict.stalled_s is not None:
        return f"no progress seen for {duration(verdict.stalled_s)}"
    return None


def finding_words(job: JobVerdict) -> str | None:
    """What the job verdict found, naming the responsible rank: it goes in the verdict's first line."""
    rank = job.responsible_rank
    if rank is not None:
        named = {"straggler": f"straggler: rank {rank}", "hung_rank": f"stuck: rank {rank}",
                 "rank_exited": f"rank {rank} exited"}.get(job.finding)
        if named:
            return named
    return {"shared": "all ranks alike", "mixed": "ranks differ"}.get(job.finding)


def gain_words(verdict: Verdict) -> str | None:
    """The most the verdict's fix can win (Verdict.max_speedup), with the condition its bottleneck's facts
    give it; None where the verdict carries no gain. The share is the one the factor rests on: a fix that removes a
    share s of the time wins at most 1 / (1 - s) (Amdahl), so s = 1 - 1 / factor."""
    factor = verdict.max_speedup
    facts = facts_named(verdict.bottleneck)
    if factor is None and verdict.min_speedup is not None and facts is not None and facts.fix_removes is not None:
        # A floor: the phase held all but a sample or two, so its share is said in words, not as a figure.
        floor = verdict.min_speedup
        times = f"{floor:.1f}" if floor < 10 else f"{floor:.0f}"
        return f"at least {times}× faster (a 95% lower bound) " + facts.fix_removes.why.format(pct="nearly all")
    if factor is None or factor <= 1.0:
        return None
    times = f"{factor:.1f}" if factor < 10 else f"{factor:.0f}"
    if facts is not None and facts.gpu_busy:  # the bound is what runs outside a busy GPU
        return f"anything outside the GPU can win at most {times}× (it is busy {1.0 / factor:.0%} of the time)"
    if facts is None or facts.fix_removes is None:
        return f"up to {times}× faster"
    return f"up to {times}× faster " + facts.fix_removes.why.format(pct=f"{1.0 - 1.0 / factor:.0%}")


def verdict_line(verdict: Verdict, job: JobVerdict | None = None) -> str:
    """The verdict in one line, in the words of the verdict pane's first line, with the most its fix can win:
    "input-bound · progressing · on 48 samples · up to 5.7× faster if the input pipeline kept up (…)". What a headless
    run says last, so the answer is on the terminal and not only in the JSON."""
    parts = (verdict_name(verdict.bottleneck, verdict.liveness), finding_words(job) if job is not None else None,
             verdict_state(verdict), support_words(verdict), gain_words(verdict))
    return " · ".join(part for part in parts if part)


def role_words(role: str) -> str:
    return ROLE_WORDS.get(role, role.replace("_", " "))


def process_role_words(process: ProcessSample) -> str:
    """A process's role, with its rank when it is one of a distributed job's: "rank 1"."""
    if process.role == ROLE_RANK and process.rank is not None:
        return f"rank {process.rank}"
    return role_words(process.role)


def duration(seconds: float) -> str:
    """Compact, human: 0.4 s, 45 s, 3m05s, 2h14m."""
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f} s" if seconds < 1 else f"{seconds:.0f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def offset(seconds: float) -> str:
    """A time since the start of watching, as +M:SS (or +H:MM:SS)."""
    total = int(max(0.0, seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"+{hours}:{minutes:02d}:{secs:02d}" if hours else f"+{minutes}:{secs:02d}"


def size(num_bytes: float | None) -> str:
    if num_bytes is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(num_bytes) < 1024 or unit == "GiB":
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1024
    raise AssertionError("unreachable")


def percent(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}%"


def bar(value: float | None, maximum: float | None, width: int) -> Text:
    """A horizontal bar, value against maximum; empty track when either is unknown."""
    if value is None or not maximum or maximum <= 0:
        return Text("·" * width, style="dim")
    filled = round(width * min(1.0, max(0.0, value / maximum)))
    style = "red" if value / maximum >= 0.95 else "green" if value / maximum >= 0.6 else "yellow"
    return Text.assemble(("█" * filled, style), ("░" * (width - filled), "dim"))


def sparkline(values: Sequence[float | None], width: int, top: float | None) -> str:
    """The last values as block characters scaled to `top`, averaged into at most `width` buckets.

    A bucket with no known value is a space, so gaps in the reading stay visible.
    """
    if width <= 0 or not values:
        return ""
    if len(values) > width:
        step = len(values) / width
        buckets = [values[int(i * step):int((i + 1) * step)] for i in range(width)]
    else:
        buckets = [[v] for v in values]
    scale = top if top and top > 0 else max((v for v in values if v is not None), default=0.0) or 1.0
    out = []
    for bucket in buckets:
        known = [v for v in bucket if v is not None]
        if not known:
            out.append(" ")
            continue
        level = sum(known) / len(known) / scale
        out.append(SPARK_LEVELS[min(len(SPARK_LEVELS) - 1, max(0, round(level * (len(SPARK_LEVELS) - 1))))])
    return "".join(out)


def clip(text: str, width: int) -> str:
    """At most `width` cells, an ellipsis marking the cut at the end."""
    if width <= 0:
        return ""
    return text if len(text) <= width else text[: width - 1] + "…"


def clip_left(text: str, width: int) -> str:
    """At most `width` cells, keeping the end (the file name and line of a path)."""
    if width <= 0:
        return ""
    return text if len(text) <= width else "…" + text[len(text) - width + 1:]


def node_title(title: str, frame: Frame) -> str:
    """A pane's title with the node its frame was read on ("2 GPU · n2"), in a job merged across nodes, where
    the panes follow the selected rank's node; the title alone on a one-node run."""
    return title if frame.node is None else f"{title} · {frame.node}"
