"""The job's own pace as a front end and the diagnosis read it: what its log says (s/iter, tokens/s, a printed MFU)
and how that compares with the baseline and the GPU's peak. Made by the monitor from each frame's progress reading
(probes/monitoring/monitor.py), worded under the verdict by probes/diagnosis/shown.py, shown by the TUI's verdict
pane and written by the snapshot."""

from __future__ import annotations

from dataclasses import dataclass

from probes.reference.baseline import ProgressComparison


@dataclass(frozen=True)
class Pace:
    """The job's own pace, read from its log, and how it compares with the baseline and the peak."""

    iteration: int | None = None
    seconds_per_iter: float | None = None
    recent_seconds_per_iter: tuple[float, ...] = ()  # one per new log reading, oldest first
    tokens_per_s: float | None = None
    reported_mfu_pct: float | None = None  # what the log printed
    reported_tflops_per_gpu: float | None = None  # achieved TFLOP/s per GPU as the log printed it (Megatron-LM)
    comparison: ProgressComparison | None = None  # with --baseline / --model / --tokens-per-iter
    gpu_name: str | None = None  # the target's GPU, whose peak the MFU is measured against
    source: str | None = None  # the log file
    format: str | None = None
    log_of: str | None = None  # whose log it is when gputop chose it ("rank 0 (PID 4242)")
    derived_from: str | None = None  # how seconds_per_iter was worked out: "step counter" (probes/pace.py), or
    # before the counter moved, the printed figure it came from (None: the log printed the time itself)
    # The log's own time per step averaged over the counter's window, where it disagrees with the counter by more
    # than 25%, and what it was worked out from (None: printed as a time)
    printed_seconds_per_iter: float | None = None
    printed_from: str | None = None
    hint: str | None = None  # no pace: why, and how to get one
