"""The door to what the panes compute from a view or its frames: the call tree of the sampled stacks, the ranks
seen gone, a verdict's support and badge, the time shares in a line, the GPM metrics' pane lines, the pace as a
percentage. The front ends (tui/panes/) import these names from here and never from the floors that hold them
(diagnosis, sampling, jobs, reference), so a pane reads the run as the view floor offers it and a module moved
inside a floor below changes this file only (tests/unit/test_import_floors.py counts what tui/ imports).

A name a new pane needs goes in the import below and in __all__; the code stays in the floor that owns it.
"""

from probes.diagnosis.absent_ranks import ELSEWHERE_WORDS, SeenRunning, missing_rank_words, ranks_seen_gone
from probes.diagnosis.bottlenecks import BOTTLENECK_FACTS, facts_named
from probes.diagnosis.evidence import others_busy_cpus
from probes.diagnosis.rules.rule import BadgeTone
from probes.diagnosis.shares import shares_summary
from probes.diagnosis.stacks import short_path
from probes.diagnosis.support import support_words
from probes.gpu_metrics import GPM_METRICS, PANE_LINES, GpmMetric
from probes.jobs.world import ranges_text
from probes.recent import recent_frames
from probes.reference.baseline import mfu_percent, printed_percent
from probes.sampling.stacks import CallNode, call_tree, drill_counts, hot_frames, select_samples

__all__ = [
    "BOTTLENECK_FACTS",
    "ELSEWHERE_WORDS",
    "GPM_METRICS",
    "PANE_LINES",
    "BadgeTone",
    "CallNode",
    "GpmMetric",
    "SeenRunning",
    "call_tree",
    "drill_counts",
    "facts_named",
    "hot_frames",
    "mfu_percent",
    "missing_rank_words",
    "others_busy_cpus",
    "printed_percent",
    "ranges_text",
    "ranks_seen_gone",
    "recent_frames",
    "select_samples",
    "shares_summary",
    "short_path",
    "support_words",
]
