"""The orchestration: one tick of every probe into a Frame (engine), the bounded History (history), the
Monitor that folds frames into views (monitor), every job of a node headless (node_watch) and a job merged across
nodes (cluster).

This package is also the front ends' door to what they start: a watch, a merge, an agent, and what they read
from the floors below to start one (the jobs on this machine for the picker: jobs/census.py; Slurm's jobs and
steps: sensors/slurm.py; a target that exists, the flame graph's py-spy, the default hang time). tui/ imports
these names from `probes.monitoring` and never from the modules that hold them (tests/unit/test_import_floors.py
counts what it imports); a name a front end newly needs goes in the three lists below.

The door is lazy: each name is imported from its home on first use (`__getattr__`), so `gputop --help` and
`gputop agent`, which read a constant or two here, do not import the monitor, the cluster merge and the outputs
they pull in. The imports under TYPE_CHECKING say to the type checker what _HOMES says at run time, and
__all__ names the same (tests/unit/test_import_floors.py keeps the three equal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from probes.lazy_door import door_getattr

if TYPE_CHECKING:
    from probes.diagnosis.verdict import DEFAULT_HANG_AFTER_S
    from probes.jobs.census import (
        JSON_SCHEMA,
        CensusReading,
        JobCensus,
        JobSummary,
        NotAJob,
        job_matches,
        list_jobs,
        not_a_training_job,
        sort_jobs,
    )
    from probes.monitoring.cluster import (
        SUMMARY_MIN_RANKS,
        AgentNote,
        AgentSpec,
        AgentStreams,
        ClusterMonitor,
        RankGroup,
        agent_note_line,
        agreeing_ranks,
        run_merge,
    )
    from probes.monitoring.engine import DEFAULT_INTERVAL_S, MIN_INTERVAL_S, Engine, EngineConfig, run_ticks
    from probes.monitoring.monitor import Monitor, recording_meta
    from probes.monitoring.node_watch import DEFAULT_FOLLOW_SCAN_S, NodeWatch
    from probes.sampling.pyspy_binary import ProfileRecording
    from probes.sensors.proctree import target_exists
    from probes.sensors.slurm import (
        NoTaskHere,
        SlurmError,
        agent_step_command,
        agent_target,
        job_nodes,
        parse_step_id,
        show_job,
        slurm_missing,
        step_root,
    )

_HOMES: dict[str, str] = {
    "DEFAULT_HANG_AFTER_S": "probes.diagnosis.verdict",
    "JSON_SCHEMA": "probes.jobs.census",
    "CensusReading": "probes.jobs.census",
    "JobCensus": "probes.jobs.census",
    "JobSummary": "probes.jobs.census",
    "NotAJob": "probes.jobs.census",
    "job_matches": "probes.jobs.census",
    "list_jobs": "probes.jobs.census",
    "not_a_training_job": "probes.jobs.census",
    "sort_jobs": "probes.jobs.census",
    "SUMMARY_MIN_RANKS": "probes.monitoring.cluster",
    "AgentNote": "probes.monitoring.cluster",
    "AgentSpec": "probes.monitoring.cluster",
    "AgentStreams": "probes.monitoring.cluster",
    "ClusterMonitor": "probes.monitoring.cluster",
    "RankGroup": "probes.monitoring.cluster",
    "agent_note_line": "probes.monitoring.cluster",
    "agreeing_ranks": "probes.monitoring.cluster",
    "run_merge": "probes.monitoring.cluster",
    "DEFAULT_INTERVAL_S": "probes.monitoring.engine",
    "MIN_INTERVAL_S": "probes.monitoring.engine",
    "Engine": "probes.monitoring.engine",
    "EngineConfig": "probes.monitoring.engine",
    "run_ticks": "probes.monitoring.engine",
    "Monitor": "probes.monitoring.monitor",
    "recording_meta": "probes.monitoring.monitor",
    "DEFAULT_FOLLOW_SCAN_S": "probes.monitoring.node_watch",
    "NodeWatch": "probes.monitoring.node_watch",
    "ProfileRecording": "probes.sampling.pyspy_binary",
    "target_exists": "probes.sensors.proctree",
    "NoTaskHere": "probes.sensors.slurm",
    "SlurmError": "probes.sensors.slurm",
    "agent_step_command": "probes.sensors.slurm",
    "agent_target": "probes.sensors.slurm",
    "job_nodes": "probes.sensors.slurm",
    "parse_step_id": "probes.sensors.slurm",
    "show_job": "probes.sensors.slurm",
    "slurm_missing": "probes.sensors.slurm",
    "step_root": "probes.sensors.slurm",
}

__all__ = [
    "DEFAULT_FOLLOW_SCAN_S",
    "DEFAULT_HANG_AFTER_S",
    "DEFAULT_INTERVAL_S",
    "JSON_SCHEMA",
    "MIN_INTERVAL_S",
    "SUMMARY_MIN_RANKS",
    "AgentNote",
    "AgentSpec",
    "AgentStreams",
    "CensusReading",
    "ClusterMonitor",
    "Engine",
    "EngineConfig",
    "JobCensus",
    "JobSummary",
    "Monitor",
    "NoTaskHere",
    "NodeWatch",
    "NotAJob",
    "ProfileRecording",
    "RankGroup",
    "SlurmError",
    "agent_note_line",
    "agent_step_command",
    "agent_target",
    "agreeing_ranks",
    "job_matches",
    "job_nodes",
    "list_jobs",
    "not_a_training_job",
    "parse_step_id",
    "recording_meta",
    "run_merge",
    "run_ticks",
    "show_job",
    "slurm_missing",
    "sort_jobs",
    "step_root",
    "target_exists",
]


__getattr__ = door_getattr(__name__, _HOMES)
