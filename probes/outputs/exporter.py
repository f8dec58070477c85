"""/metrics for Prometheus: a custom collector that turns the latest MonitorView of each watched target into
metric families on every scrape.

Nothing here samples or folds frames: a scrape reads the views the sampling loop last published (one
immutable MonitorView per watched target) and describes them, so a target that ended and was dropped has no
series left (no stale values, no timestamps: Prometheus stamps the scrape). What a series may carry is fixed
by its labels: host, training_job, job_id, rank, pid, gpu, uuid, and for the one info series per job the
responsible frame (function, file, line). Never an environment value (job_id is a scheduler's job id read from
one, nothing else of it), a command line or a stack.

The label is ``training_job``, not ``job``: Prometheus gives every scraped series its own ``job`` label (the
scrape job's name) and would rename ours to ``exported_job``.
"""

from __future__ import annotations

import dataclasses
import socket
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
)

from probes.diagnosis.stacks import classify_cached, describe, short_path
from probes.frame import BOTTLENECKS, LIVENESS_STATES, Frame, GpuDevice, JobFinding, JobVerdict, Verdict
from probes.gpu_metrics import GPM_METRICS
from probes.sensors.nvml import CLOCK_EVENT_REASONS
from probes.view import MonitorView

# The states of the job's finding, as probes/frame.py's vocabulary lists them.
JOB_FINDINGS: tuple[JobFinding, ...] = typing.get_args(JobFinding)
# torchrun's default when no --rdzv-id is given: not a name that tells one job from another.
ANONYMOUS_RUN_IDS = ("", "none")

TARGET_LABELS = ("host", "training_job", "pid")
RANK_LABELS = ("host", "training_job", "job_id", "rank", "pid", "gpu", "uuid")
JOB_LABELS = ("host", "training_job", "job_id")
GPU_LABELS = ("host", "gpu", "uuid")


@dataclass(frozen=True)
class WatchedView:
    """One watched target's latest view, as the sampling loop published it."""

    view: MonitorView
    mfu_floor: float | None = None  # --mfu-floor: the corrected MFU (0-1) below which the user wants an alert


def training_job_label(frame: Frame) -> str:
    """What names the job in Prometheus: torchrun's run id (the same on every node), else the launcher's or the
    process's PID on this host."""
    job = frame.job
    if job is None:
        return f"pid-{frame.target.pid}"
    if job.run_id and job.run_id.strip().lower() not in ANONYMOUS_RUN_IDS:
        return job.run_id
    return f"{job.kind}-{job.launcher_pid or job.root_pid}"


def job_id_label(frame: Frame) -> str:
    """The job's id that every node of it agrees on, for joining its ranks across instances: Slurm's job
    (JOBID.STEP, from the ranks' environment, whatever launcher started them), else torchrun's run id when one
    was given; "" when there is none (a node-local name such as a launcher's PID would join nothing, or join
    two jobs by chance). One value per job, so it adds no series."""
    job = frame.job
    if job is None:
        return ""
    if job.slurm_job:
        return job.slurm_job
    if job.run_id and job.run_id.strip().lower() not in ANONYMOUS_RUN_IDS:
        return job.run_id
    return ""


def _ratio(pct: float | None) -> float | None:
    return None if pct is None else pct / 100.0


_Family = TypeVar("_Family", GaugeMetricFamily, CounterMetricFamily, StateSetMetricFamily, InfoMetricFamily)


class _Families:
    """The metric families of one scrape, each created on first use so an empty family is never exposed."""

    def __init__(self) -> None:
        self._families: dict[str, Metric] = {}

    def _named(self, kind: type[_Family], name: str, documentation: str, labels: Sequence[str]) -> _Family:
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = kind(name, documentation, labels=labels)
        if not isinstance(family, kind):  # one name is one kind of family: two would be a bug of gputop's
            raise TypeError(f"{name} is a {type(family).__name__}, asked for as a {kind.__name__}")
        return family

    def gauge(self, name: str, documentation: str, labels: Sequence[str]) -> GaugeMetricFamily:
        return self._named(GaugeMetricFamily, name, documentation, labels)

    def counter(self, name: str, documentation: str, labels: Sequence[str]) -> CounterMetricFamily:
        return self._named(CounterMetricFamily, name, documentation, labels)

    def state_set(self, name: str, documentation: str, labels: Sequence[str]) -> StateSetMetricFamily:
        return self._named(StateSetMetricFamily, name, documentation, labels)

    def info(self, name: str, documentation: str, labels: Sequence[str]) -> InfoMetricFamily:
        return self._named(InfoMetricFamily, name, documentation, labels)

    def set(self, name: str, documentation: str, labels: Sequence[str], values: Sequence[str],
            value: float | None) -> None:
        """One gauge sample; a value the view does not have is left out rather than exposed as NaN."""
        if value is not None:
            self.gauge(name, documentation, labels).add_metric(list(values), float(value))

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._families.values())


def build_metrics(watched: Iterable[WatchedView], host: str) -> list[Metric]:
    """The metric families describing these views (pure: unit tests call it on constructed views)."""
    families = _Families()
    devices: dict[str, GpuDevice] = {}  # one set of GPU series per device, however many targets see it
    targets = 0
    for item in watched:
        view = item.view
        if not view.frames:
            continue
        targets += 1
        frame = view.latest
        job_label = training_job_label(frame)
        target = (host, job_label, str(frame.target.pid))
        job_values = (host, job_label, job_id_label(frame))
        _verdict_metrics(families, "gputop", "The verdict on the watched target", TARGET_LABELS, target,
                         _with_job_silence(view))
        _pace_metrics(families, view, item.mfu_floor, target)
        _cpu_metrics(families, frame, target)
        if view.job is not None:
            _job_metrics(families, view.job, frame, job_values)
        _responsible_frame(families, view, frame, job_values)
        shown = view.shown
        for device in shown.gpu.devices:
            key = device.uuid or f"{host}/{device.index}"
            if key not in devices:
                devices[key] = device
    for device in devices.values():
        _gpu_metrics(families, device, host)
    families.set("gputop_watched_targets", "Targets (a process or a job's launcher) gputop watches now",
                 ("host",), (host,), targets)
    return list(families)


def _with_job_silence(view: MonitorView) -> Verdict:
    """The verdict shown for the target, with its silence: a job's verdict is composed from its ranks', so its
    last progress is the most recent any rank made."""
    verdict = view.verdict
    if verdict.stalled_s is not None or view.job is None:
        return verdict
    silences = [r.verdict.stalled_s for r in view.job.ranks if r.verdict.stalled_s is not None]
    return dataclasses.replace(verdict, stalled_s=min(silences)) if silences else verdict


def _verdict_metrics(families: _Families, prefix: str, what: str, labels: Sequence[str], values: Sequence[str],
                     verdict: Verdict) -> None:
    families.state_set(f"{prefix}_bottleneck", f"{what}: what limits it (one state is 1)", labels).add_metric(
        list(values), {state: verdict.bottleneck == state for state in BOTTLENECKS})
    families.state_set(f"{prefix}_liveness", f"{what}: progressing, hung or exited (one state is 1)",
                       labels).add_metric(list(values), {state: verdict.liveness == state for state in LIVENESS_STATES})
    score = f"{what}: the verdict's score, 0-1 (how strongly its rule fits, scaled by samples and time held; not a " \
        "probability)"
    families.set(f"{prefix}_verdict_confidence_ratio", score, labels, values, verdict.confidence)
    families.set(f"{prefix}_last_progress_age_seconds",
                 f"{what}: seconds since the last sign of progress (CPU, I/O, stack, GPU, log)", labels, values,
                 verdict.stalled_s if verdict.liveness != "exited" else None)


def _pace_metrics(families: _Families, view: MonitorView, mfu_floor: float | None, target: Sequence[str]) -> None:
    pace = view.pace
    if pace is not None:
        families.set("gputop_iteration_duration_seconds", "Seconds per iteration, from the job's log", TARGET_LABELS,
                     target, pace.seconds_per_iter)
        families.set("gputop_tokens_per_second", "Tokens per second, from the job's log and tokens per iteration",
                     TARGET_LABELS, target, pace.tokens_per_s)
        comparison = pace.comparison
        # What the pace's lines say on screen, and nothing they do not: no MFU and no reference rate where the job's
        # tokens per iteration are not known (a probe's own are never taken for them).
        families.set("gputop_mfu_ratio", "Model FLOP utilisation against the GPU's dense peak for the dtype asked "
                     "(bf16 by default), recomputed from the observed pace and the job's tokens per iteration (not the "
                     "log's own figure), 0-1", TARGET_LABELS, target,
                     _ratio(comparison.corrected_mfu_pct) if comparison is not None else None)
        families.set("gputop_reference_rate_ratio", "The job's pace against the --baseline probe's reference step for "
                     "its tokens per iteration (1: the reference's rate; from 0.95 the reference's own levers have "
                     "nothing left to win)",
                     TARGET_LABELS, target,
                     _ratio(comparison.compute_bound_pct) if comparison is not None else None)
    families.set("gputop_mfu_floor_ratio", "The MFU below which the user asked to be alerted (gputop serve "
                 "--mfu-floor)", TARGET_LABELS, target, mfu_floor)


def _cpu_metrics(families: _Families, frame: Frame, target: Sequence[str]) -> None:
    cpu = frame.cpu
    families.set("gputop_cpu_quota_cpus", "The target's CPU quota in CPUs (cgroup, tightest over its ancestors)",
                 TARGET_LABELS, target, cpu.quota_cpus)
    families.set("gputop_cpu_throttled_ratio", "Share of the cgroup's CPU periods throttled by its quota over the "
                 "last tick, 0-1", TARGET_LABELS, target, cpu.throttled_fraction)
    if cpu.throttled_seconds_total is not None:
        families.counter("gputop_cpu_throttled_seconds", "Seconds the target's cgroup was throttled by its CPU "
                         "quota, as the kernel counts them", TARGET_LABELS).add_metric(
            list(target), cpu.throttled_seconds_total)
    overhead = frame.overhead
    families.set("gputop_monitor_cpu_ratio", "gputop's own CPU while watching this target, in cores (1 = one core)",
                 TARGET_LABELS, target, _ratio(overhead.monitor_cpu_pct))
    families.set("gputop_sampler_cpu_ratio", "The py-spy samplers' CPU for this target, in cores", TARGET_LABELS,
                 target, _ratio(overhead.sampler_cpu_pct))


def _job_metrics(families: _Families, job: JobVerdict, frame: Frame, job_values: Sequence[str]) -> None:
    """The job's finding and its ranks' series; job_values are JOB_LABELS' values."""
    families.state_set("gputop_job_finding", "How the job's ranks compare: straggler, hung_rank, rank_exited, "
                       "shared (all limited alike), mixed, single, elsewhere (its processes are not watched)",
                       JOB_LABELS).add_metric(list(job_values), {state: job.finding == state for state in JOB_FINDINGS})
    uuids = {device.index: device.uuid or "" for device in frame.gpu.devices}
    for rank in job.ranks:
        gpu = "" if rank.gpu_index is None else str(rank.gpu_index)
        uuid = "" if rank.gpu_index is None else uuids.get(rank.gpu_index, "")
        values = (*job_values, str(rank.rank), str(rank.pid), gpu, uuid)
        _verdict_metrics(families, "gputop_rank", "One rank's own verdict", RANK_LABELS, values, rank.verdict)
        families.set("gputop_rank_collective_wait_ratio", "Share of the rank's main-thread samples spent waiting "
                     "in a collective, 0-1: the slowest rank waits least", RANK_LABELS, values,
                     rank.collective_wait_ratio)
        families.set("gputop_rank_cpu_ratio", "The rank's CPU, in cores", RANK_LABELS, values, _ratio(rank.cpu_pct))
        families.set("gputop_rank_responsible", "1 for the rank that holds the job back (the straggler, the stuck or "
                     "the exited rank), else 0", RANK_LABELS, values, float(rank.rank == job.responsible_rank))


def _responsible_frame(families: _Families, view: MonitorView, frame: Frame, job_values: Sequence[str]) -> None:
    """One info series per job: where the process the verdict blames spends its time (its main thread's latest
    sampled stack, reduced to the one frame that explains it), never the stack itself."""
    if view.verdict.liveness == "exited":
        return
    pid = frame.target.pid
    rank = ""
    job = view.job
    if job is not None and job.responsible_rank is not None:
        blamed = next((r for r in job.ranks if r.rank == job.responsible_rank), None)
        if blamed is not None:
            pid, rank = blamed.pid, str(blamed.rank)
    elif frame.job is not None and frame.job.rank_pids:  # no one rank to blame: the first (or the attached) one
        pid = frame.job.selected_pid or frame.job.rank_pids[0]
        sample = frame.process(pid)
        rank = "" if sample is None or sample.rank is None else str(sample.rank)
    stack = next((t for t in frame.stacks.threads if t.pid == pid and t.tid == pid), None)
    if stack is None or not stack.frames:
        return
    activity = classify_cached(stack.frames, stack.idle)
    where = activity.responsible or activity.user_frame or stack.frames[0]
    caller = activity.user_frame if activity.user_frame not in (None, where) else None
    families.info("gputop_responsible_frame", "Where the process the verdict blames is: the stack frame that "
                  "explains it and the user's own frame that called it", (*JOB_LABELS, "rank", "pid")
                  ).add_metric([*job_values, rank, str(pid)],
                               {"function": where.function, "file": short_path(where.file), "line": str(where.line),
                                "called_from": describe(caller) if caller is not None else ""})


def _gpu_metrics(families: _Families, device: GpuDevice, host: str) -> None:
    values = (host, str(device.index), device.uuid or "")
    if device.name:
        families.info("gputop_gpu", "The GPU's model", GPU_LABELS).add_metric(list(values), {"model": device.name})
    mhz_to_hz = 1e6
    families.set("gputop_gpu_sm_clock_hertz", "The SM clock now", GPU_LABELS, values,
                 None if device.sm_clock_mhz is None else device.sm_clock_mhz * mhz_to_hz)
    families.set("gputop_gpu_sm_clock_max_hertz", "The SM clock's maximum", GPU_LABELS, values,
                 None if device.max_sm_clock_mhz is None else device.max_sm_clock_mhz * mhz_to_hz)
    families.set("gputop_gpu_power_watts", "Power draw", GPU_LABELS, values, device.power_w)
    families.set("gputop_gpu_power_limit_watts", "The enforced power limit", GPU_LABELS, values, device.power_limit_w)
    if device.clock_event_reasons is not None:
        active = set(device.clock_event_reasons)
        # Every reason NVML names is a state, so a reason that stops is a 0, not a series that vanishes.
        states = {reason: reason in active for reason in CLOCK_EVENT_REASONS}
        states.update({reason: True for reason in active if reason not in states})  # a bit NVML has no name for
        families.state_set("gputop_gpu_clock_event_reason", "Why the clocks are below their maximum (NVML clock "
                           "event reasons; 1 = active)", GPU_LABELS).add_metric(list(values), states)
    for metric in GPM_METRICS:
        scale = "0-1" if metric.unit == "percent" else "bytes per second"
        families.set(metric.prometheus_name, f"{metric.prometheus_help}, {scale}", GPU_LABELS, values,
                     metric.exported(getattr(device, metric.field)))


class GputopCollector:
    """The prometheus_client collector: on each scrape, the metric families of whatever `views()` returns now.

    `views` must be cheap and must not sample: it returns what the sampling loop last published."""

    def __init__(self, views: Callable[[], Sequence[WatchedView]], host: str | None = None) -> None:
        self._views = views
        self.host = host or socket.gethostname()

    def collect(self) -> Iterator[Metric]:
        yield from build_metrics(self._views(), self.host)

    def describe(self) -> list[Metric]:
        return []  # the families depend on what is watched: no fixed description (no collect() at registration)
