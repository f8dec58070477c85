"""A process's GPU memory growing toward its GPU's total (probes/diagnosis/gpu_memory_risk.py), on constructed frames
with NVML's per-process figures: said with its rate and the time to full, first where that is near; the caching
allocator's blocks taken at the start and then held are no growth."""

from __future__ import annotations

import dataclasses

from support.frames import FORWARD, PID, GiB, h200, main_count, make_frame

from probes.diagnosis.gpu_memory_risk import gpu_memory_risk
from probes.frame import GpuProcess
from probes.monitoring.monitor import fold

MB = 1_000_000


def frames_using(used_by_second: list[int]):
    """One frame a second, computing, on an H200 whose only process is the target, holding the bytes given."""
    frames = []
    for i, used in enumerate(used_by_second):
        gpu = h200(mem_used=used)
        device = dataclasses.replace(gpu.devices[0], processes=(GpuProcess(pid=PID, used_memory_bytes=used,
                                                                           in_target=True),))
        frames.append(make_frame(i, counts=[main_count(FORWARD, n=5)], cpu=100.0,
                                 gpu=dataclasses.replace(gpu, devices=(device,))))
    return frames


def test_steady_growth_says_the_rate_and_when_the_gpu_is_full():
    # 50 MB a second from 100 GiB of 141: about 880 s (~15 min) left, within the half hour that makes it the headline.
    frames = frames_using([100 * GiB + i * 50 * MB for i in range(60)])
    risk = gpu_memory_risk(frames)
    assert risk is not None and risk.gpu_index == 0 and risk.who == f"PID {PID}"
    assert abs(risk.rate_bytes_per_s - 50 * MB) < 1 * MB
    left = (141 * GiB - (100 * GiB + 59 * 50 * MB)) / (50 * MB)
    assert abs(risk.seconds_to_full - left) < 5
    verdict = fold(frames).view.verdict
    assert verdict.evidence[0] == (f"GPU memory: PID {PID} on GPU 0 grows 50.0 MB/s (over the last 59 s); the GPU's "
                                   f"151.4 GB are full in ~{left / 60:.0f} min at that rate")
    assert verdict.advice[0].startswith("GPU memory will run out (a CUDA out-of-memory error)")


def test_far_from_full_it_is_said_after_the_headline_without_advice():
    frames = frames_using([10 * GiB + i * 1 * MB for i in range(60)])  # 131 GiB left at 1 MB/s: ~39 h
    verdict = fold(frames).view.verdict
    assert verdict.evidence[1].startswith(f"GPU memory: PID {PID} on GPU 0 grows 1.0 MB/s") and \
        verdict.evidence[1].endswith("are full in ~39.1 h at that rate"), verdict.evidence
    assert not any(line.startswith("GPU memory will run out") for line in verdict.advice)


def test_the_caching_allocators_blocks_taken_then_held_are_no_growth():
    held = [2 * GiB] * 5 + [20 * GiB] * 5 + [60 * GiB] * 50  # the first steps reserve, then it holds still
    assert gpu_memory_risk(frames_using(held)) is None
    assert not any(line.startswith("GPU memory:") for line in fold(frames_using(held)).view.verdict.evidence)
