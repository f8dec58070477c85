"""The reference step and what a run's pace is measured against: the GPT step `gputop probe` times
(gpt_probe, with its Llama and MoE models; torch imported lazily, inside functions), the machine's other load
while it runs (probe_load), the observed pace against the probe and the peak (baseline), and the inputs of that
comparison as they travel in recordings and snapshots (pace_inputs).

This package is also the front ends' door to the probe and to what a pace is measured against: tui/ imports
these names from `probes.reference`, never from its modules, and takes from here too the few it needs of the
floors below for the same work: a model's MFU (models/mfu.py) and a shape named by a preset or a config.json
(models/hf_config.py), which the models package cannot offer itself since both read its registry (FAMILIES); the
model a job's command line states (jobs/job_command_line.py); the names of this machine's GPUs, for their peaks
(sensors/nvml.py). tests/unit/test_import_floors.py counts what tui/ imports; a name a front end newly needs goes
in the three lists below.

The door is lazy: each name is imported from its home on first use (`__getattr__`), so a command that reads one
name here does not import the rest. The imports under TYPE_CHECKING say to the type checker what _HOMES says at
run time, and __all__ names the same (tests/unit/test_import_floors.py keeps the three equal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from probes.lazy_door import door_getattr

if TYPE_CHECKING:
    from probes.jobs.job_command_line import stated_model
    from probes.models.hf_config import ModelConfigError, named_shape
    from probes.models.mfu import MfuEstimate, estimate_mfu, mfu_doubts
    from probes.reference.baseline import BaselineError, ComparisonInputs, PeakOptions, load_comparison_inputs
    from probes.reference.gpt_probe import (
        DTYPE_CHOICES,
        TORCH_MISSING,
        ProbeConfig,
        ProbeInputError,
        ProbeOutOfMemory,
        run_probe,
        torch_available,
    )
    from probes.reference.like_job import LikePlan, plan_like
    from probes.reference.like_settings import Given, LikeJobError, setting_lines
    from probes.reference.pace_inputs import recorded_inputs, replayed_comparison_inputs
    from probes.sensors.nvml import gpu_names

_HOMES: dict[str, str] = {
    "stated_model": "probes.jobs.job_command_line",
    "ModelConfigError": "probes.models.hf_config",
    "named_shape": "probes.models.hf_config",
    "MfuEstimate": "probes.models.mfu",
    "estimate_mfu": "probes.models.mfu",
    "mfu_doubts": "probes.models.mfu",
    "BaselineError": "probes.reference.baseline",
    "ComparisonInputs": "probes.reference.baseline",
    "PeakOptions": "probes.reference.baseline",
    "load_comparison_inputs": "probes.reference.baseline",
    "DTYPE_CHOICES": "probes.reference.gpt_probe",
    "TORCH_MISSING": "probes.reference.gpt_probe",
    "ProbeConfig": "probes.reference.gpt_probe",
    "ProbeInputError": "probes.reference.gpt_probe",
    "ProbeOutOfMemory": "probes.reference.gpt_probe",
    "run_probe": "probes.reference.gpt_probe",
    "torch_available": "probes.reference.gpt_probe",
    "LikePlan": "probes.reference.like_job",
    "plan_like": "probes.reference.like_job",
    "Given": "probes.reference.like_settings",
    "LikeJobError": "probes.reference.like_settings",
    "setting_lines": "probes.reference.like_settings",
    "recorded_inputs": "probes.reference.pace_inputs",
    "replayed_comparison_inputs": "probes.reference.pace_inputs",
    "gpu_names": "probes.sensors.nvml",
}

__all__ = [
    "DTYPE_CHOICES",
    "TORCH_MISSING",
    "BaselineError",
    "ComparisonInputs",
    "Given",
    "LikeJobError",
    "LikePlan",
    "MfuEstimate",
    "ModelConfigError",
    "PeakOptions",
    "ProbeConfig",
    "ProbeInputError",
    "ProbeOutOfMemory",
    "estimate_mfu",
    "gpu_names",
    "load_comparison_inputs",
    "mfu_doubts",
    "named_shape",
    "plan_like",
    "recorded_inputs",
    "replayed_comparison_inputs",
    "run_probe",
    "setting_lines",
    "stated_model",
    "torch_available",
]


__getattr__ = door_getattr(__name__, _HOMES)
