"""The door the front ends (tui/, probes/outputs/) read a run through: the MonitorView a monitor hands out for each
frame and what it holds (monitor_view.py). A floor of its own, below the monitors that make views (probes/monitoring)
and above the diagnosis whose verdict it carries, so no reader of a view imports the code that folds frames.
What the panes compute from a view or its frames, from the floors below, they import from panes.py.
"""

from probes.reference.job_pace import Pace
from probes.view.monitor_view import (
    MonitorProtocol,
    MonitorView,
    NodeState,
    NodeStatus,
    VerdictChange,
)

__all__ = ["MonitorProtocol", "MonitorView", "NodeState", "NodeStatus", "Pace", "VerdictChange"]
