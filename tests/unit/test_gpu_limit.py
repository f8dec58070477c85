"""What limits the step inside the GPU (probes/diagnosis/gpu_limit.py): each class named with its figures, through the
real NVML sensor on the fake pynvml, on constructed summaries, and on the real H200 runs; a GPU without GPM says
what NVML cannot see; the gpu rule's verdict gains the line and keeps its bottleneck and advice."""

from __future__ import annotations

import dataclasses

import pytest
from support.fake_pynvml import INSIDE_GPU, INSIDE_GPU_UTIL_POWER, FakeGpu, FakeNvml, gpm_values
from support.frames import FORWARD, GiB, h200, main_count, make_frame, run
from support.h200 import recording

from probes.diagnosis.evidence import gather
from probes.diagnosis.gpu_limit import (
    LAUNCH_MAIN_RUNNING_PCT,
    LAUNCH_SM_ACTIVE_PCT,
    LAUNCH_UTIL_PCT,
    NO_GPM,
    SM_BUSY_PCT,
    GpuLimit,
    MainThreadBusy,
    classify,
    gpu_limit,
)
from probes.diagnosis.gpu_summary import GpuSummary, gpu_summary
from probes.diagnosis.rules import cpu_bound, gpu, signs
from probes.frame import GpuDevice, GpuProcess, GpuReading
from probes.monitoring.monitor import fold
from probes.outputs.recording import read_recording
from probes.sensors.nvml import NvmlGpuProbe, for_target

PID = 4242  # support.frames' main process
BUSY_MAIN = MainThreadBusy(100.0, "the main thread's schedstat")
WAITING_MAIN = MainThreadBusy(35.0, "the main thread's schedstat")


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _read_through_the_sensor(kind: str) -> GpuReading:
    """Two ticks of the real NVML sensor on a fake H200 doing `kind` of work, the target's process on it."""
    util, power_mw = INSIDE_GPU_UTIL_POWER[kind]
    fake = FakeNvml([FakeGpu(util_gpu=util, power_mw=power_mw, processes=[(PID, 10 * GiB)],
                             gpm_metrics=gpm_values(**INSIDE_GPU[kind]))])
    clock = _Clock()
    probe = NvmlGpuProbe(fake, clock=clock)
    probe.read()  # GPM needs two samples
    clock.now += 1.0
    reading = probe.read()
    probe.close()
    return for_target(reading, {PID: PID})


@pytest.mark.parametrize("kind", sorted(INSIDE_GPU))
def test_each_inside_gpu_class_is_named_with_its_figures_through_the_sensor(kind):
    reading = _read_through_the_sensor(kind)
    frames = [make_frame(i, gpu=reading) for i in range(3)]
    main = BUSY_MAIN if kind == "launch_bound" else WAITING_MAIN
    limit = classify(gpu_summary(frames), main)
    assert limit is not None and limit.kind == kind, limit
    assert limit.cannot_see is None and limit.cap is None
    wanted = INSIDE_GPU[kind]
    by_field = {"SM active": "gpm_sm_active_pct", "tensor active": "gpm_tensor_active_pct",
                "DRAM bandwidth": "gpm_dram_bw_pct", "FP32 pipe": "gpm_fp32_active_pct"}
    for figure in limit.figures:
        if figure.name in by_field:
            assert figure.value == pytest.approx(wanted[by_field[figure.name]])
    named = {figure.name for figure in limit.figures}
    assert {
        "tensor_core_bound": {"tensor active", "SM active", "DRAM bandwidth"},
        "busy_outside_tensor_cores": {"SM active", "tensor active", "DRAM bandwidth"},
        "memory_bound": {"DRAM bandwidth", "tensor active", "SM active"},
        "fp32_math": {"FP32 pipe", "tensor active", "SM active"},
        "launch_bound": {"util", "SM active", "main thread running"},
    }[kind] <= named
    assert limit.line().startswith(f"inside the GPU: {limit.words()} — ")


def test_the_lines_of_each_class():
    def line(kind: str, main: MainThreadBusy = WAITING_MAIN) -> str:
        frames = [make_frame(i, gpu=_read_through_the_sensor(kind)) for i in range(2)]
        limit = classify(gpu_summary(frames), main)
        assert limit is not None
        return limit.line()

    assert line("memory_bound") == ("inside the GPU: memory-bound — DRAM bandwidth 78%, tensor active 6%, SM active "
                                    "88%: its kernels wait on memory (elementwise, norms), not on math")
    assert line("fp32_math") == ("inside the GPU: fp32 math on the CUDA cores — FP32 pipe 68%, tensor active 0%, SM "
                                 "active 92%: the math runs in fp32 while the tensor cores (bf16, TF32) go unused")
    assert line("launch_bound", BUSY_MAIN) == (
        "inside the GPU: launch-bound — util 97%, SM active 12%, main thread running 100%: a kernel runs most of the "
        "time but few SMs work, and the main thread is busy launching them")


def test_few_sms_at_work_while_the_main_thread_waits_is_not_launch_bound():
    # NCCL kernels spinning on a peer look the same on the GPU; the main thread waits instead of launching.
    frames = [make_frame(i, gpu=_read_through_the_sensor("launch_bound")) for i in range(2)]
    summary = gpu_summary(frames)
    limit = classify(summary, WAITING_MAIN)
    assert limit is not None and limit.kind == "unclear"
    assert limit.line().startswith("inside the GPU: no single limit — util 97%, SM active 12%")
    # Running, by schedstat, but py-spy finds it waiting most of its samples: not launching either.
    limit = classify(summary, MainThreadBusy(85.0, "the main process's CPU"), main_waiting_share=0.9)
    assert limit is not None and limit.kind == "unclear"
    unread = classify(summary, None)  # the main thread's CPU not read at all
    assert unread is not None and unread.kind == "unclear"


def test_launch_bound_thresholds_are_the_cpu_bound_rules():
    # The same step must not be launch-bound to one rule and not to the other.
    assert LAUNCH_SM_ACTIVE_PCT == signs.LAUNCH_BOUND_SM_ACTIVE_PCT
    assert LAUNCH_MAIN_RUNNING_PCT == cpu_bound.BUSY_CPU_PCT
    assert LAUNCH_UTIL_PCT == 60.0  # cpu_bound.evaluate's literal
    assert SM_BUSY_PCT == gpu.GPU_BUSY_SM_ACTIVE_PCT


def _summary(**kw) -> GpuSummary:
    device = GpuDevice(index=0, name="NVIDIA H200", in_target=True)
    return GpuSummary(devices=[device], available=True, **{"util_pct": 100.0, **kw})


def test_a_gpu_without_gpm_says_what_nvml_cannot_see():
    limit = classify(_summary(power_w=600.0, power_limit_w=700.0, sm_clock_mhz=1410.0, max_sm_clock_mhz=1410.0))
    assert limit == GpuLimit("unknown", (), None, NO_GPM)
    assert limit.line() == ("inside the GPU: not seen — this GPU gives no GPM: SM and tensor activity unknown; "
                            "'util' only says a kernel was running")


def test_a_metric_the_driver_does_not_compute_is_said_and_its_classes_not_tried():
    limit = classify(_summary(sm_active_pct=90.0, tensor_active_pct=20.0))
    assert limit is not None and limit.kind == "busy_outside_tensor_cores"
    assert limit.cannot_see == "GPM gave no DRAM bandwidth here"
    assert limit.line().endswith("; GPM gave no DRAM bandwidth here")


def test_a_power_cap_is_named_beside_the_class():
    limit = classify(_summary(sm_active_pct=95.0, tensor_active_pct=64.0, dram_bw_pct=29.0, sm_clock_mhz=1662.0,
                              max_sm_clock_mhz=1980.0, reasons=("sw_power_cap",)))
    assert limit is not None and limit.kind == "tensor_core_bound"
    assert limit.cap is not None and limit.cap.power and not limit.cap.thermal
    assert limit.cap.words() == "power-capped: SM clock at 84% of max (software power cap)"
    assert limit.line().startswith("inside the GPU: tensor-core-bound and power-capped — tensor active 64%")
    # A reason that does not hold the clock (idle), or a clock near its maximum, is no cap.
    near_max = classify(_summary(sm_active_pct=95.0, tensor_active_pct=64.0, sm_clock_mhz=1950.0,
                                 max_sm_clock_mhz=1980.0, reasons=("sw_power_cap",)))
    assert near_max is not None and near_max.cap is None
    thermal = classify(_summary(sm_active_pct=95.0, tensor_active_pct=64.0, sm_clock_mhz=1400.0,
                                max_sm_clock_mhz=1980.0, reasons=("gpu_idle", "hw_thermal_slowdown")))
    assert thermal is not None and thermal.cap is not None and thermal.cap.reasons == ("hw_thermal_slowdown",)
    assert thermal.cap.kind_words() == "thermal-capped"


def test_no_gpu_in_use_gives_no_class():
    assert classify(GpuSummary(available=True, reason="no GPU is used by the target's processes")) is None
    assert classify(GpuSummary(available=False, reason="no NVIDIA driver")) is None


# --- the gpu rule's verdict gains the line, nothing else --------------------------------------------------------


def _h200_with(util=100.0, power=690.0, **gpm) -> GpuReading:
    device = dataclasses.replace(h200(util=util, power=power).devices[0], **gpm)
    return GpuReading(available=True, devices=(device,))


def _gpu_frames(gpu_reading: GpuReading):
    return [make_frame(i, counts=[main_count(FORWARD, n=10)], cpu=35.0, gpu=gpu_reading) for i in range(6)]


def test_the_gpu_bound_verdict_says_what_is_inside_the_gpu():
    last = run(_gpu_frames(_h200_with(gpm_sm_active_pct=88.0, gpm_tensor_active_pct=6.0, gpm_dram_bw_pct=78.0)))[-1]
    assert last.bottleneck == "gpu_bound"
    assert last.evidence[1] == ("inside the GPU: memory-bound — DRAM bandwidth 78%, tensor active 6%, SM active 88%: "
                                "its kernels wait on memory (elementwise, norms), not on math")
    assert last.advice[0].startswith("Compile the model")  # an eager model's kernels fused (item 3's levers)


def test_a_gpu_without_gpm_but_with_power_says_what_cannot_be_seen():
    device = dataclasses.replace(h200(power=600.0).devices[0], name="NVIDIA A100-SXM4-80GB", gpm_sm_active_pct=None)
    last = run(_gpu_frames(GpuReading(available=True, devices=(device,))))[-1]
    assert last.bottleneck == "gpu_bound"
    assert f"inside the GPU: not seen — {NO_GPM}" in last.evidence
    # With util% alone (no power either) the rule already says what util% cannot: it says it once.
    util_only = GpuDevice(index=0, name="NVIDIA A100", util_gpu_pct=100.0, in_target=True,
                          processes=(GpuProcess(pid=PID, in_target=True),))
    last = run(_gpu_frames(GpuReading(available=True, devices=(util_only,))))[-1]
    assert last.bottleneck == "gpu_bound"
    assert not [line for line in last.evidence if line.startswith("inside the GPU")]


# --- the real H200 runs ---------------------------------------------------------------------------------------


def test_gpt2xl_is_tensor_core_bound_and_power_capped(tmp_path):
    frames = list(read_recording(recording("gpt2xl_s2", tmp_path)))
    limit = gpu_limit(gather(frames, 5.0))
    assert limit is not None and limit.kind == "tensor_core_bound"
    assert limit.cap is not None and limit.cap.power and limit.cap.reasons == ("sw_power_cap",)
    assert [(f.name, round(f.value)) for f in limit.figures] == [
        ("tensor active", 64), ("SM active", 95), ("DRAM bandwidth", 29)]
    verdict = fold(frames, replay=True).view.verdict
    assert verdict.bottleneck == "gpu_throttled"
    assert ("inside the GPU: tensor-core-bound and power-capped — tensor active 64%, SM active 95%, DRAM bandwidth "
            "29%: the matmuls keep the tensor cores busy (the good case)") in verdict.evidence
    assert "SM clock held at 84% of max by: software power cap" in verdict.evidence
    assert verdict.advice[0].startswith("The power limit (700 W) caps the clock")


def test_seed004_a_is_busy_outside_the_tensor_cores(tmp_path):
    # n_embd 384 at 30% MFU: the SMs busy, the tensor cores in about a third of their active time, DRAM at 42%.
    frames = list(read_recording(recording("seed004_a_rec", tmp_path)))
    limit = gpu_limit(gather(frames, 5.0))
    assert limit is not None and limit.kind == "busy_outside_tensor_cores" and limit.cap is None
    verdict = fold(frames, replay=True).view.verdict
    assert verdict.bottleneck == "gpu_bound"
    assert ("inside the GPU: busy outside the tensor cores — SM active 83%, tensor active 31%, DRAM bandwidth 42%: "
            "the tensor cores work in 37% of the SMs' active time and DRAM is not saturated; the rest is non-matmul "
            "work or matmuls too narrow to fill the tensor cores") in verdict.evidence
    assert verdict.advice[0].startswith("A larger micro-batch (9 of 140 GiB used, tensor active 31%)")
