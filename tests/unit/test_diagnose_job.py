"""diagnose_job() on constructed frames of a 2-rank job under torchrun: the projection of a rank, the collective
wait share, each finding (rank_exited, hung_rank, straggler, shared, mixed, single), the NCCL spin case on GPUs,
thin evidence, the monitor's view and the snapshot's `job` object, and what a tick costs.

Stacks are what py-spy shows for a gloo DDP rank (see tests/e2e/test_job_e2e.py for the real ones); GPU numbers are
H200-like, as in test_diagnose.py. The frames are built with tests/support/job_frames.py.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle

import pytest
from support.job_frames import (
    ALL_REDUCE,
    CUDA_SYNC,
    DATALOADER_WAIT,
    DDP_WAIT,
    FLUSH_METRICS,
    FORWARD,
    ITEM_NATIVE,
    LAUNCHER,
    RANK0,
    RANK1,
    SITE,
    SLOW_AUGMENT,
    SLOW_PYTHON,
    WORKER0,
    WORKER1,
    WORKER_GETITEM,
    GiB,
    count,
    fr,
    job_frame,
    job_info,
    rank_proc,
    run_job,
    straggler_frames,
    text,
    worker_proc,
)
from support.work import lines_run

from probes.diagnosis.evidence import SAMPLES_REACH_S
from probes.diagnosis.job import diagnose_job
from probes.diagnosis.rank_projection import RankHistory, project_rank
from probes.diagnosis.stacks import (
    COMMS,
    COMPUTE,
    PEER_WAIT_BACKWARD,
    PEER_WAIT_SYNC,
    WAIT,
    classify_stack,
)
from probes.diagnosis.verdict import diagnose
from probes.frame import (
    CpuReading,
    GpuDevice,
    GpuProcess,
    GpuReading,
    JobInfo,
    ProcessSample,
    StackFrame,
    StacksReading,
    TargetInfo,
    ThreadStack,
)
from probes.monitoring.monitor import Monitor, fold
from probes.recent import recent_frames

# --- classification and projection ---------------------------------------------------------------------------


def test_an_idle_backward_is_a_collective_wait_only_for_a_rank_without_a_gpu():
    assert classify_stack(DDP_WAIT, idle=True).activity == WAIT  # a lone process: backward waits for its GPU
    waiting = classify_stack(DDP_WAIT, idle=True, peer_wait=PEER_WAIT_BACKWARD)
    assert waiting.activity == COMMS and waiting.responsible.function == "_engine_run_backward"
    # Computing its own backward (not idle) is compute, rank or not.
    assert classify_stack(DDP_WAIT, idle=False, peer_wait=PEER_WAIT_BACKWARD).activity == COMPUTE
    # A synchronisation is a wait for the peers only while the rank's GPU spins.
    assert classify_stack(CUDA_SYNC, idle=False).activity == COMPUTE
    assert classify_stack(CUDA_SYNC, idle=False, peer_wait=PEER_WAIT_SYNC).activity == COMMS
    assert classify_stack(ITEM_NATIVE, idle=False, peer_wait=PEER_WAIT_SYNC).activity == COMMS
    assert classify_stack(FORWARD, idle=False, peer_wait=PEER_WAIT_SYNC).activity == COMPUTE
    # Explicit collectives, under c10d_logger's wrapper, and FSDP's hooks.
    assert classify_stack(ALL_REDUCE, idle=True).responsible.function == "all_reduce"
    unshard = (fr("_unshard", SITE + "torch/distributed/fsdp/_runtime_utils.py", 300),
               fr("_pre_forward_unshard", SITE + "torch/distributed/fsdp/_runtime_utils.py", 450)) + FORWARD[3:]
    assert classify_stack(unshard, idle=True).activity == COMMS
    fsdp2 = (fr("foreach_all_gather", SITE + "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py", 340),
             ) + FORWARD[3:]
    assert classify_stack(fsdp2, idle=False).activity == COMMS


def test_project_rank_keeps_the_rank_its_workers_stacks_and_gpu():
    gpu = GpuReading(available=True, devices=(
        GpuDevice(index=0, util_gpu_pct=90.0, in_target=True, processes=(GpuProcess(pid=RANK0, in_target=True),)),
        GpuDevice(index=1, util_gpu_pct=5.0, in_target=True, processes=(GpuProcess(pid=RANK1, in_target=True),)),
    ))
    frame = job_frame(0, [rank_proc(RANK0, 0, gpu_index=0), worker_proc(WORKER0, RANK0),
                          rank_proc(RANK1, 1, gpu_index=1), worker_proc(WORKER1, RANK1)],
                      counts=[count(RANK0, FORWARD), count(WORKER0, WORKER_GETITEM), count(RANK1, SLOW_AUGMENT),
                              count(WORKER1, WORKER_GETITEM)],
                      threads=[ThreadStack(pid=RANK0, tid=RANK0, name="MainThread", frames=FORWARD),
                               ThreadStack(pid=RANK1, tid=RANK1, name="MainThread", frames=SLOW_AUGMENT)],
                      gpu=gpu)
    projected = project_rank(frame, RANK1)
    assert projected.target.pid == RANK1 and projected.target.alive
    assert [(p.pid, p.role) for p in projected.processes] == [(RANK1, "main"), (WORKER1, "dataloader_worker")]
    assert {c.pid for c in projected.stacks.counts} == {RANK1, WORKER1} and projected.stacks.samples == 10
    assert [t.pid for t in projected.stacks.threads] == [RANK1]
    assert [d.in_target for d in projected.gpu.devices] == [False, True]
    assert projected.cpu == frame.cpu and projected.host == frame.host and projected.job is None
    # A rank that has gone is a target that has exited.
    gone = project_rank(job_frame(1, [rank_proc(RANK0, 0)]), RANK1)
    assert not gone.target.alive and gone.processes == ()


def test_a_rank_history_projects_each_frame_once():
    frames = straggler_frames(4)
    history = RankHistory(frames, RANK0)
    assert len(history) == 4 and history[-1] is history[3] and history[1:3] == [history[1], history[2]]
    assert history[0].target.pid == RANK0


def test_a_rank_historys_recent_window_is_the_walk_over_its_projected_frames():
    """recent_frames on a RankHistory finds the window on the unprojected frames (cheaper): the same frames, the
    same projections, as walking the projected view frame by frame; and a copy each time (callers may change it)."""
    frames = straggler_frames(12)
    walked = RankHistory(frames, RANK0)
    projected = [walked[i] for i in range(len(walked))]
    for seconds, limit in ((None, None), (3.0, None), (4.5, 2), (0.0, None), (100.0, 5)):
        window = recent_frames(RankHistory(frames, RANK0), seconds, limit)
        expected = recent_frames(projected, seconds, limit)
        assert [id(f) for f in window] == [id(f) for f in expected] and window, (seconds, limit)
    history = RankHistory(frames, RANK0)
    recent_frames(history, 3.0).clear()
    assert len(recent_frames(history, 3.0)) == 4


def test_a_stack_frame_hashes_as_its_fields_do_and_keeps_it_through_copies():
    frame = StackFrame("forward", "model.py", 12)
    assert hash(frame) == hash(("forward", "model.py", 12, False))
    for copied in (dataclasses.replace(frame), pickle.loads(pickle.dumps(frame)), copy.deepcopy(frame)):
        assert copied == frame and hash(copied) == hash(frame) and {frame: 1}[copied] == 1
    assert [f.name for f in dataclasses.fields(StackFrame)] == ["function", "file", "line", "native"]


def test_a_rank_whose_backward_samples_are_split_waits_in_their_idle_part():
    """Issue 31's accelerate straggler as gputop reads it now: rank 0's samples at backward's entry come split as
    its record window's pair measured them (probes/sampling/pyspy_output.split_by_activity), 7 of its 8 idle; the idle
    part is its wait for rank 1, the busy part its own backward, though both are one line."""
    job = run_job([job_frame(i, [rank_proc(RANK0, 0, cpu=19.0, main_cpu=40.0),
                                 rank_proc(RANK1, 1, cpu=59.0, main_cpu=95.0)], counts=[
        count(RANK0, DDP_WAIT, n=7, idle=True), count(RANK0, DDP_WAIT, n=1, idle=False), count(RANK0, FORWARD, n=2),
        count(RANK1, SLOW_PYTHON, n=9), count(RANK1, FORWARD, n=1)]) for i in range(8)])[-1]
    assert (job.finding, job.responsible_rank) == ("straggler", 1), job.verdict.evidence
    rank0 = job.ranks[0]
    assert rank0.collective_wait_ratio == 0.7 and rank0.verdict.bottleneck == "comms_bound", rank0.verdict.evidence
    assert "rank 0 waits for it in the gradient all-reduce (DDP, inside backward) 70% of the time" in \
        job.verdict.evidence[0]
    assert not any("py-spy saw awake" in line for line in job.verdict.evidence)


# --- findings -----------------------------------------------------------------------------------------------


def test_straggler_is_named_with_its_function_and_the_others_wait():
    verdicts = run_job(straggler_frames(8))
    job = verdicts[-1]
    assert job.finding == "straggler" and job.responsible_rank == 1
    assert job.verdict.bottleneck == "data_bound" and job.verdict.liveness == "progressing"
    assert job.verdict.evidence[0] == (
        "rank 1 is the straggler: 80% of its samples in slow_augment (train.py:9), the other rank 0%; rank 0 waits for "
        "it in the gradient all-reduce (DDP, inside backward) 80% of the time")
    assert "rank 1: main thread: 80% of 80 samples preparing data on the main thread" in text(job.verdict)
    assert any(line.startswith("Confirm across ranks") for line in job.verdict.advice)
    assert job.verdict.advice[0].startswith("Move this work off the training loop")  # the straggler's own advice
    assert job.verdict.confidence >= 0.6
    rank0, rank1 = job.ranks
    assert (rank0.rank, rank0.pid, rank0.collective_wait_ratio, rank0.samples) == (0, RANK0, 0.8, 80)
    assert (rank1.rank, rank1.collective_wait_ratio, rank1.cpu_pct, rank1.local_rank) == (1, 0.1, 100.0, 1)
    # Attached to rank 0 alone, its own verdict says it waits for the others, not "idle".
    assert rank0.verdict.bottleneck == "comms_bound"
    assert "_engine_run_backward (torch/autograd/graph.py:829)" in rank0.verdict.evidence[0]
    # Each rank's previous verdict is passed back: their verdicts keep their start time.
    assert verdicts[-1].ranks[1].verdict.since == verdicts[2].ranks[1].verdict.since


def test_straggler_of_plain_python_work_is_cpu_bound_and_names_the_function():
    frames = [job_frame(i, [rank_proc(RANK0, 0, cpu=10.0), rank_proc(RANK1, 1, cpu=100.0)], counts=[
        count(RANK0, DDP_WAIT, n=9, idle=True), count(RANK0, FORWARD, n=1),
        count(RANK1, SLOW_PYTHON, n=9), count(RANK1, FORWARD, n=1),
    ]) for i in range(8)]
    job = run_job(frames)[-1]
    assert (job.finding, job.responsible_rank, job.verdict.bottleneck) == ("straggler", 1, "cpu_bound")
    assert "rank 1 is the straggler: 90% of its samples in score_examples (train.py:14)" in job.verdict.evidence[0]


def test_a_deadlocked_rank_makes_the_job_hung_while_the_launcher_looks_fine():
    """Rank 1 acquires a lock twice in flush_metrics; rank 0 enters all_reduce and waits for it."""
    training = [job_frame(i, [rank_proc(RANK0, 0), rank_proc(RANK1, 1)], counts=[
        count(RANK0, FORWARD, n=5), count(RANK1, FORWARD, n=5)]) for i in range(4)]
    stuck = [job_frame(i, [rank_proc(RANK0, 0, cpu=1.0, main_cpu=0.0), rank_proc(RANK1, 1, cpu=0.0, main_cpu=0.0)],
                       counts=[count(RANK0, ALL_REDUCE, n=5, idle=True), count(RANK1, FLUSH_METRICS, n=5, idle=True)],
                       threads=[ThreadStack(pid=RANK0, tid=RANK0, name="MainThread", idle=True, frames=ALL_REDUCE),
                                ThreadStack(pid=RANK1, tid=RANK1, name="MainThread", idle=True, frames=FLUSH_METRICS)])
             for i in range(4, 16)]
    verdicts = run_job(training + stuck)
    job = verdicts[-1]
    assert job.finding == "hung_rank" and job.responsible_rank == 1 and job.verdict.liveness == "hung"
    assert job.verdict.evidence[0].startswith("rank 1 stuck in flush_metrics (train.py:12) for ")
    assert job.verdict.evidence[0].endswith("; rank 0 waits for it in all_reduce")
    assert "the process group's timeout (30 min by gloo's default; no rank uses a GPU)" in job.verdict.advice[0]
    assert "py-spy dump --pid 502" in job.verdict.advice[0]
    # Hung within the threshold of the stall, never before it.
    first_hung = next(i for i, v in enumerate(verdicts) if v.verdict.liveness == "hung")
    assert 4 + 5 - 1 <= first_hung <= 4 + 5 + 1, [v.verdict.liveness for v in verdicts]
    # The tree's own diagnosis (what gputop said before) watches the launcher, which keeps ticking.
    assert diagnose(training + stuck).liveness == "progressing"


def test_a_rank_that_exited_leaves_the_others_waiting_until_the_timeout():
    frames = straggler_frames(4)
    frames += [job_frame(i, [rank_proc(RANK0, 0, cpu=0.5, main_cpu=0.0)],
                         counts=[count(RANK0, ALL_REDUCE, n=5, idle=True)], job=job_info(ranks=(RANK0,)))
               for i in range(4, 12)]
    verdicts = run_job(frames)
    job = verdicts[-1]
    assert job.finding == "rank_exited" and job.responsible_rank == 1
    assert job.verdict.evidence[0] == (
        "rank 1 (PID 502) has ended; rank 0 still runs: it waits for it at the next collective until "
        "the process group's timeout (30 min by gloo's default; no rank uses a GPU)")
    assert "rank 0 waits in all_reduce" in job.verdict.evidence[1]
    assert job.verdict.bottleneck == "comms_bound" and job.verdict.liveness == "hung"
    assert [r.rank for r in job.ranks] == [0, 1] and job.ranks[1].verdict.liveness == "exited"
    # Long after the exit (its frames aged out of the window) the rank is still remembered.
    assert all(v.finding == "rank_exited" for v in verdicts[4:])


@pytest.mark.parametrize("environment, gpu, says", [
    ({"NCCL_DEBUG": "INFO"}, None, "the process group's timeout (10 min by nccl's default; NCCL variables are set)"),
    (None, "busy", "the process group's timeout (by default 30 min with gloo, 10 min with NCCL)"),
])
def test_the_collective_timeout_follows_the_backend_when_it_is_known(environment, gpu, says):
    reading = None
    if gpu:
        reading = GpuReading(available=True, devices=(GpuDevice(index=0, util_gpu_pct=0.0, in_target=True),))
    frames = [job_frame(i, [rank_proc(RANK0, 0), rank_proc(RANK1, 1)], counts=[
        count(RANK0, FORWARD), count(RANK1, FORWARD)], environment=environment, gpu=reading) for i in range(3)]
    frames += [job_frame(i, [rank_proc(RANK0, 0, main_cpu=0.0)], counts=[count(RANK0, ALL_REDUCE, idle=True)],
                         environment=environment, gpu=reading) for i in range(3, 6)]
    assert says in run_job(frames)[-1].verdict.evidence[0]


def test_nccl_threads_in_the_stacks_say_nccl():
    threads = [ThreadStack(pid=RANK0, tid=RANK0 + 9, name="pt_nccl_watchdg", idle=True)]
    frames = [job_frame(i, [rank_proc(RANK0, 0), rank_proc(RANK1, 1)], counts=[count(RANK0, FORWARD)],
                        threads=threads) for i in range(2)]
    frames += [job_frame(2, [rank_proc(RANK0, 0)], counts=[count(RANK0, FORWARD)], threads=threads)]
    assert "10 min by nccl's default; NCCL's threads are running)" in run_job(frames)[-1].verdict.evidence[0]


def test_all_ranks_data_starved_is_said_once():
    def frame(i):
        return job_frame(i, [rank_proc(RANK0, 0, cpu=20.0), worker_proc(WORKER0, RANK0),
                             rank_proc(RANK1, 1, cpu=20.0), worker_proc(WORKER1, RANK1)], counts=[
            count(RANK0, DATALOADER_WAIT, n=8, idle=True), count(RANK0, FORWARD, n=1),
            count(RANK0, DDP_WAIT, n=1, idle=True),
            count(RANK1, DATALOADER_WAIT, n=9, idle=True), count(RANK1, FORWARD, n=1),
            count(WORKER0, WORKER_GETITEM, n=10), count(WORKER1, WORKER_GETITEM, n=10)])
    job = run_job([frame(i) for i in range(8)])[-1]
    assert job.finding == "shared" and job.responsible_rank is None
    assert job.verdict.bottleneck == "data_bound" and job.verdict.liveness == "progressing"
    assert job.verdict.evidence[0].startswith("all 2 ranks: data_bound — rank 1: main thread: 90% of 80 samples "
                                              "waiting for the next batch")
    assert text(job.verdict).count("waiting for the next batch") == 1
    # Its own workers only; one worker has no "each" (issue 38, item 15).
    assert "1 DataLoader worker at 98% CPU" in job.verdict.evidence
    assert "collective waits: rank 0 10%, rank 1 0%" in job.verdict.evidence
    assert [r.verdict.bottleneck for r in job.ranks] == ["data_bound", "data_bound"]


def test_ranks_doing_different_things_without_waiting_are_mixed():
    frames = [job_frame(i, [rank_proc(RANK0, 0), rank_proc(RANK1, 1)], counts=[
        count(RANK0, FORWARD, n=8), count(RANK0, DDP_WAIT, n=2, idle=True),
        count(RANK1, SLOW_AUGMENT, n=10)]) for i in range(8)]
    job = run_job(frames)[-1]
    assert job.finding == "mixed" and job.verdict.bottleneck == "data_bound"
    assert job.verdict.evidence[0].startswith("rank 1 (waits least, waits 0% of the time): main thread: 100%")
    assert "other ranks: rank 0 cpu_bound (waits 20%)" in job.verdict.evidence


def test_a_launched_process_is_the_job():
    processes = [ProcessSample(pid=RANK0, ppid=LAUNCHER, role="main", name="python", cpu_pct=100.0,
                               main_thread_cpu_pct=100.0)]
    job = JobInfo(kind="launched", attached_pid=LAUNCHER, root_pid=LAUNCHER, launcher_pid=LAUNCHER,
                  rank_pids=(RANK0,), selected_pid=RANK0, note="attached to bash (PID 500): watching python")
    frames = [job_frame(i, processes, counts=[count(RANK0, FORWARD, n=10)], job=job) for i in range(6)]
    verdict = run_job(frames)[-1]
    assert verdict.finding == "single" and [r.pid for r in verdict.ranks] == [RANK0]
    assert verdict.verdict.bottleneck == "cpu_bound"
    assert verdict.verdict.evidence == diagnose([project_rank(f, RANK0) for f in frames]).evidence


def test_no_job_or_no_ranks_is_none():
    plain = dataclasses.replace(straggler_frames(1)[0], job=None)
    assert diagnose_job([plain]) is None and diagnose_job([]) is None
    empty = job_frame(0, [], job=job_info(ranks=()))
    assert diagnose_job([empty]) is None


def test_the_launcher_gone_is_the_job_exited():
    frames = straggler_frames(4)
    frames.append(dataclasses.replace(job_frame(4, [], launcher_alive=False)))
    job = run_job(frames)[-1]
    assert job.verdict.liveness == "exited" and job.finding == "straggler"
    assert "Before it exited: data_bound" in text(job.verdict)


# --- NCCL on GPUs ----------------------------------------------------------------------------------------------


def _two_gpus(rank0: tuple, rank1: tuple) -> GpuReading:
    """Rank 0 on GPU 0, rank 1 on GPU 1, each (util %, power W, SM active % or None)."""
    def device(index, util, power, sm):
        return GpuDevice(index=index, name="NVIDIA H200", sm_clock_mhz=1980, max_sm_clock_mhz=1980, power_w=power,
                         power_limit_w=700.0, util_gpu_pct=util, mem_used_bytes=60 * GiB,
                         mem_total_bytes=141 * GiB, gpm_sm_active_pct=sm, in_target=True,
                         processes=(GpuProcess(pid=RANK0 + index, in_target=True, local_pid=RANK0 + index),))
    return GpuReading(available=True, devices=(device(0, *rank0), device(1, *rank1)))


@pytest.mark.parametrize("wait_stack, sm_active", [(CUDA_SYNC, 8.0), (ITEM_NATIVE, 8.0), (CUDA_SYNC, None)])
def test_nccl_ranks_spinning_at_a_sync_wait_for_the_straggler(wait_stack, sm_active):
    """Rank 0's GPU spins on the all-reduce (util 100%, power 160 W, few SMs) while its host sits in a sync at
    full CPU; rank 1 prepares its batch on the CPU and its GPU idles."""
    gpu = _two_gpus((100.0, 160.0, sm_active), (10.0, 120.0, 5.0 if sm_active is not None else None))
    threads = [ThreadStack(pid=pid, tid=pid + 7, name="pt_nccl_watchdg", idle=True) for pid in (RANK0, RANK1)]
    frames = [job_frame(i, [rank_proc(RANK0, 0, gpu_index=0), rank_proc(RANK1, 1, gpu_index=1)], counts=[
        count(RANK0, wait_stack, n=8), count(RANK0, FORWARD, n=2),
        count(RANK1, SLOW_AUGMENT, n=9), count(RANK1, FORWARD, n=1)], gpu=gpu, threads=threads) for i in range(8)]
    job = run_job(frames)[-1]
    assert (job.finding, job.responsible_rank, job.verdict.bottleneck) == ("straggler", 1, "data_bound")
    assert ("rank 1 is the straggler: 90% of its samples in slow_augment (train.py:9), the other rank 0%; rank 0 waits "
            "for it in a GPU synchronisation") in job.verdict.evidence[0]
    assert "while its GPU spins (NCCL waiting for peers) 80% of the time" in job.verdict.evidence[0]
    rank0 = job.ranks[0]
    assert (rank0.gpu_index, rank0.collective_wait_ratio) == (0, 0.8)
    assert rank0.verdict.bottleneck == "comms_bound"  # not "launch-bound": it spins waiting for its peer


def test_a_busy_gpu_at_a_sync_is_not_waiting():
    """The same stacks on a GPU that works (SMs busy, power high) are a rank waiting for its own GPU."""
    gpu = _two_gpus((100.0, 650.0, 90.0), (100.0, 640.0, 88.0))
    frames = [job_frame(i, [rank_proc(RANK0, 0, cpu=30.0, gpu_index=0), rank_proc(RANK1, 1, cpu=30.0, gpu_index=1)],
                        counts=[count(RANK0, CUDA_SYNC, n=8), count(RANK0, FORWARD, n=2),
                                count(RANK1, CUDA_SYNC, n=8), count(RANK1, FORWARD, n=2)], gpu=gpu)
              for i in range(8)]
    job = run_job(frames)[-1]
    assert job.finding == "shared" and job.verdict.bottleneck == "gpu_bound"
    assert all(r.collective_wait_ratio == 0.0 for r in job.ranks)


# --- thin evidence ------------------------------------------------------------------------------------------


def test_a_first_job_verdict_on_few_samples_is_provisional():
    frames = [job_frame(0, [rank_proc(RANK0, 0, cpu=15.0), rank_proc(RANK1, 1)], counts=[
        count(RANK0, DDP_WAIT, n=4, idle=True), count(RANK1, SLOW_AUGMENT, n=4)])]
    job = diagnose_job(frames)
    assert job.finding == "straggler" and job.verdict.confidence <= 0.4
    assert "provisional: only 4 samples of rank 0's main thread so far (10 make a verdict)" in job.verdict.evidence


def test_a_handful_of_samples_does_not_flip_the_job_verdict():
    frames = straggler_frames(10)
    # Quiet seconds age the samples out of the window's reach; then a few samples with the roles swapped.
    aged_out = 10 + int(SAMPLES_REACH_S) + 1
    frames += [job_frame(i, [rank_proc(RANK0, 0), rank_proc(RANK1, 1)]) for i in range(10, aged_out)]
    frames += [job_frame(i, [rank_proc(RANK0, 0), rank_proc(RANK1, 1)], counts=[
        count(RANK0, SLOW_AUGMENT, n=1), count(RANK1, DDP_WAIT, n=1, idle=True)])
        for i in range(aged_out, aged_out + 3)]
    verdicts = run_job(frames)
    assert verdicts[9].finding == "straggler" and verdicts[9].verdict.confidence >= 0.45
    assert all((v.finding, v.responsible_rank) == ("straggler", 1) for v in verdicts[9:]), \
        [(v.finding, v.responsible_rank) for v in verdicts]
    assert any(line.startswith("holding: the latest samples point to") for line in verdicts[-1].verdict.evidence)
    # Once the new picture has enough samples, it wins.
    frames += [job_frame(i, [rank_proc(RANK0, 0), rank_proc(RANK1, 1, cpu=15.0)], counts=[
        count(RANK0, SLOW_AUGMENT, n=8), count(RANK1, DDP_WAIT, n=8, idle=True)])
        for i in range(aged_out + 3, aged_out + 9)]
    last = run_job(frames)[-1]
    assert (last.finding, last.responsible_rank) == ("straggler", 0)


def test_a_named_straggler_stays_named_through_a_noisy_window():
    frames = straggler_frames(8)
    noisy = [count(RANK0, DDP_WAIT, n=4, idle=True), count(RANK0, FORWARD, n=6),
             count(RANK1, SLOW_AUGMENT, n=8), count(RANK1, DDP_WAIT, n=2, idle=True)]
    frames += [job_frame(i, [rank_proc(RANK0, 0), rank_proc(RANK1, 1)], counts=noisy) for i in range(8, 11)]
    assert all(v.responsible_rank == 1 for v in run_job(frames)[7:])


# --- the monitor and the snapshot -------------------------------------------------------------------------


def test_the_monitor_shows_the_job_verdict_and_its_timeline():
    frames = straggler_frames(8)
    monitor = fold(frames, replay=False)
    view = monitor.view
    assert view.job is not None and view.job.finding == "straggler"
    assert view.verdict.evidence == view.job.verdict.evidence and view.verdict.bottleneck == "data_bound"
    assert view.timeline[-1].bottleneck == "data_bound"
    document = json.loads(json.dumps(monitor.snapshot()))
    assert document["verdict"]["bottleneck"] == "data_bound"
    job = document["job"]
    assert {k: job[k] for k in ("kind", "run_id", "world_size", "launcher_pid", "finding", "responsible_rank")} == {
        "kind": "torchrun", "run_id": "run-7", "world_size": 2, "launcher_pid": LAUNCHER, "finding": "straggler",
        "responsible_rank": 1}
    rank1 = job["ranks"][1]
    assert set(rank1) == {"rank", "local_rank", "pid", "gpu_index", "cpu_pct", "collective_wait_ratio", "samples",
                          "node", "verdict"}
    assert (rank1["rank"], rank1["pid"], rank1["collective_wait_ratio"], rank1["samples"]) == (1, RANK1, 0.1, 80)
    assert set(rank1["verdict"]) == {"bottleneck", "liveness", "confidence", "evidence"}
    assert len(rank1["verdict"]["evidence"]) <= 2


def test_frames_without_a_job_fold_as_before():
    frames = [dataclasses.replace(f, job=None, processes=(
        ProcessSample(pid=RANK0, ppid=1, role="main", name="python", cpu_pct=100.0, main_thread_cpu_pct=100.0),),
        target=TargetInfo(pid=RANK0, alive=True)) for f in straggler_frames(6)]
    monitor = Monitor()
    for frame in frames:
        view = monitor.ingest(frame)
    assert view.job is None and monitor.snapshot()["job"] is None
    expected = None
    for i in range(1, len(frames) + 1):
        expected = diagnose(frames[:i], expected)
    assert (view.verdict.bottleneck, view.verdict.evidence) == (expected.bottleneck, expected.evidence)


def test_a_job_tick_does_no_more_work_on_a_longer_history():
    """One tick diagnoses every rank over the Monitor's history: its work must stop growing once the history is
    longer than the window a diagnosis reads. Counted in Python lines run, not timed
    (benchmarks/diagnose_cost.py has the milliseconds)."""
    stacks = [DDP_WAIT, FORWARD, SLOW_AUGMENT, ALL_REDUCE, DATALOADER_WAIT]

    def work(length: int) -> int:
        frames = []
        for i in range(length):
            counts = [count(pid, stacks[(i + k + pid) % len(stacks)], n=3, idle=k % 2 == 0)
                      for k in range(3) for pid in (RANK0, RANK1)]
            frames.append(job_frame(i, [rank_proc(RANK0, 0, cpu=60.0), rank_proc(RANK1, 1, cpu=90.0)],
                                    counts=counts))
        previous = diagnose_job(frames[:-1])
        return lines_run(lambda: diagnose_job(frames, previous))

    ten_minutes, twenty_minutes = work(600), work(1200)
    assert ten_minutes > 1000
    assert twenty_minutes <= ten_minutes * 1.02, (ten_minutes, twenty_minutes)


def test_folding_a_long_job_recording_diagnoses_each_rank_once_per_frame(monkeypatch):
    """One diagnose() per rank per frame, over at most the history's capacity: replays stay linear."""
    import probes.diagnosis.job as diagnose_job_module
    import probes.monitoring.monitor as monitor_module

    seen, tree = [], []
    real = diagnose_job_module.diagnose_with_evidence

    def counting(history, previous=None, hang_after_s=5.0):
        seen.append(len(history))
        return real(history, previous, hang_after_s)

    monkeypatch.setattr(diagnose_job_module, "diagnose_with_evidence", counting)
    monkeypatch.setattr(monitor_module, "diagnose", lambda *args: tree.append(1))
    fold(straggler_frames(700))
    assert len(seen) == 2 * 700 and max(seen) == 600
    assert tree == []  # the launcher's tree is not diagnosed besides


# --- advice sized to a rank's share of the CPUs (issue 20) ---------------------------------------------------


def _cpu_training(cpus: float, workers: bool, n: int = 8):
    processes = [rank_proc(RANK0, 0, cpu=100.0), rank_proc(RANK1, 1, cpu=100.0)]
    if workers:
        processes += [worker_proc(WORKER0, RANK0, cpu=5.0), worker_proc(WORKER1, RANK1, cpu=5.0)]
    frames = [job_frame(i, processes, counts=[count(RANK0, FORWARD, n=10), count(RANK1, FORWARD, n=10)])
              for i in range(n)]
    return [dataclasses.replace(f, cpu=CpuReading(effective_cpus=cpus, affinity_cpus=int(cpus))) for f in frames]


def _thread_advice(verdict) -> list[str]:
    lines = [a for r in verdict.ranks for a in r.verdict.advice] + list(verdict.verdict.advice)
    return [a for a in lines if "set_num_threads" in a]


def test_two_ranks_on_two_cores_are_not_told_to_use_two_threads_each():
    # Each rank already uses its 1 CPU of the 2: torch.set_num_threads(2) per rank would oversubscribe the node.
    verdict = run_job(_cpu_training(2.0, workers=False))[-1]
    assert all(r.verdict.bottleneck == "cpu_bound" for r in verdict.ranks)
    assert _thread_advice(verdict) == []


def test_thread_advice_divides_the_cores_by_the_ranks_and_their_workers():
    verdict = run_job(_cpu_training(8.0, workers=True))[-1]
    advice = _thread_advice(verdict)
    assert advice, [r.verdict.advice for r in verdict.ranks]
    # 8 CPUs / 2 ranks = 4 each, less 1 for each rank's DataLoader worker
    assert all("torch.set_num_threads(3) per rank" in a for a in advice)
    assert all("(2 ranks on 8 CPUs, 1 DataLoader worker each)" in a for a in advice)
    assert not any("set_num_threads(8)" in a or "set_num_threads(4)" in a for a in advice)


def test_a_job_whose_stacks_cannot_be_read_is_cannot_see_on_every_rank():
    denied = StacksReading(available=False, blocked="ptrace denied",
                           reason=f"py-spy may not read PID {RANK0}: permission denied. Run gputop as root")
    frames = [dataclasses.replace(job_frame(i, [rank_proc(RANK0, 0), rank_proc(RANK1, 1)]), stacks=denied)
              for i in range(8)]
    job = run_job(frames)[-1]
    assert [r.verdict.bottleneck for r in job.ranks] == ["cannot_see", "cannot_see"]
    assert job.verdict.bottleneck == "cannot_see"
    assert "cannot see: ptrace denied" in job.verdict.evidence[0]
    assert not any(line.startswith("provisional:") for line in job.verdict.evidence)  # no samples is the premise
    assert "CAP_SYS_PTRACE" in job.verdict.advice[0]


def test_the_straggler_is_named_by_the_place_it_exceeds_the_others_not_by_backward():
    """Issue 39: where the straggler's own all-reduce samples come out awake, its busiest working place is backward,
    which every rank runs. It is named by its excess over the waiting ranks' working profile: slow_augment, which
    only it runs, though backward holds more of its samples."""
    frames = [job_frame(i, [rank_proc(RANK0, 0, cpu=40.0), rank_proc(RANK1, 1, cpu=100.0)], counts=[
        count(RANK0, DDP_WAIT, n=6, idle=True), count(RANK0, DDP_WAIT, n=4),  # backward: its wait, then its work
        count(RANK1, DDP_WAIT, n=6), count(RANK1, SLOW_AUGMENT, n=4),
    ]) for i in range(8)]
    job = run_job(frames)[-1]
    assert (job.finding, job.responsible_rank) == ("straggler", 1)
    assert job.verdict.evidence[0].startswith(
        "rank 1 is the straggler: 40% of its samples in slow_augment (train.py:9), the other rank 0%; rank 0 waits for "
        "it in the gradient all-reduce (DDP, inside backward) 60% of the time"), job.verdict.evidence[0]


def test_two_data_starved_ranks_are_shared_data_bound_not_a_straggler():
    """Each sample's wait measured (issue 39), a data-starved rank 1 shows its wait for rank 0 in the all-reduce
    (44%) beside its own wait for batches; rank 0 waited for batches all the time. The place rank 0 'exceeds' in is
    one rank 1 spends half its time in too: a shared cause, said once for the job."""
    frames = [job_frame(i, [rank_proc(RANK0, 0, cpu=20.0), rank_proc(RANK1, 1, cpu=20.0)], counts=[
        count(RANK0, DATALOADER_WAIT, n=9, idle=True),
        count(RANK1, DDP_WAIT, n=4, idle=True), count(RANK1, DATALOADER_WAIT, n=5, idle=True),
    ]) for i in range(8)]
    job = run_job(frames)[-1]
    assert (job.finding, job.verdict.bottleneck) == ("shared", "data_bound"), (job.finding, job.verdict.evidence)
    assert job.verdict.evidence[0].startswith("all 2 ranks: data_bound — rank "), job.verdict.evidence
    # Rank 1's own verdict in the list is comms_bound (the rules weigh its wait for rank 0 first): the job's lines say
    # that it is the same cause, not another.
    assert [r.verdict.bottleneck for r in job.ranks] == ["data_bound", "comms_bound"]
    assert "collective waits: rank 0 0%, rank 1 44% (rank 1 comms_bound on its own: the wait for the others, the " \
           "same cause)" in job.verdict.evidence, job.verdict.evidence


def _rank1_busy(i: int, counts):
    """Frame i of a two-rank job whose rank 1 runs flat out and rank 0 at 30%, with these stack counts."""
    return job_frame(i, [rank_proc(RANK0, 0, cpu=30.0), rank_proc(RANK1, 1, cpu=100.0)], counts=counts)


def test_at_the_settled_rate_the_straggler_s_place_rests_on_more_than_the_verdicts_window():
    """Issue 39, from a real accelerate job beside two busy processes: at 1 Hz the verdict's 10 s window holds about
    ten samples a rank, and three of rank 0's fell in the place rank 1 does six times more of, so a DataLoader wait
    (3 of rank 1's ten, none of rank 0's) looked the larger excess. The place rests on 40 samples at least."""

    def second(i: int, rank1, rank0):
        return _rank1_busy(i, [count(RANK0, rank0, n=1, idle=rank0 is DDP_WAIT),
                               count(RANK1, rank1, n=1, idle=rank1 is DATALOADER_WAIT)])

    usual_1 = [SLOW_AUGMENT] * 4 + [FORWARD] * 4 + [DATALOADER_WAIT] + [DDP_WAIT]
    usual_0 = [DDP_WAIT] * 7 + [FORWARD] * 3
    last_1 = [SLOW_AUGMENT] * 4 + [DATALOADER_WAIT] * 3 + [FORWARD] * 3
    last_0 = [DDP_WAIT] * 7 + [SLOW_AUGMENT] * 3
    frames = [second(i, usual_1[i % 10], usual_0[i % 10]) for i in range(50)]
    frames += [second(50 + i, last_1[i], last_0[i]) for i in range(10)]
    job = run_job(frames)[-1]
    assert (job.finding, job.responsible_rank) == ("straggler", 1), job.verdict.evidence
    assert job.verdict.evidence[0].startswith("rank 1 is the straggler: 40% of its samples in slow_augment "
                                              "(train.py:9), the other rank 8%"), job.verdict.evidence[0]


def test_two_places_of_the_same_excess_are_both_named():
    """From a real accelerate job beside two busy processes, 13 samples a rank: rank 1 packed in 4 samples and freed
    the last step's rows (its own line, 6 times rank 0's rows too) in 4, rank 0 was in each once. Which came first
    was chance: both are named, and a third place with little excess is not."""
    frames = [_rank1_busy(i, [
        count(RANK0, DDP_WAIT, n=8, idle=True), count(RANK0, SLOW_AUGMENT, n=1), count(RANK0, SLOW_PYTHON, n=1),
        count(RANK1, SLOW_AUGMENT, n=4), count(RANK1, SLOW_PYTHON, n=4), count(RANK1, FORWARD, n=2),
    ]) for i in range(8)]
    job = run_job(frames)[-1]
    assert (job.finding, job.responsible_rank) == ("straggler", 1), job.verdict.evidence
    assert job.verdict.evidence[0] == (
        "rank 1 is the straggler: 40% of its samples in slow_augment (train.py:9), the other rank 10%; 40% in "
        "score_examples (train.py:14), the other rank 10%; rank 0 waits for it in the gradient all-reduce (DDP, "
        "inside backward) 80% of the time")


def test_the_straggler_s_own_backward_is_no_excess_where_the_others_wait_there():
    """A real accelerate job beside two busy processes: rank 1's backward samples came out working (its own part of
    the all-reduce), rank 0's in the same backward waiting for it. Counted as work only, rank 0 had 0% there and
    rank 1's backward read as a second excess place (3 of 10 runs); the others' time there, waiting included, is the
    baseline."""
    frames = [_rank1_busy(i, [
        count(RANK0, DDP_WAIT, n=7, idle=True), count(RANK0, FORWARD, n=2), count(RANK0, SLOW_AUGMENT, n=1),
        count(RANK1, SLOW_AUGMENT, n=5), count(RANK1, DDP_WAIT, n=3), count(RANK1, FORWARD, n=2),
    ]) for i in range(8)]
    job = run_job(frames)[-1]
    assert (job.finding, job.responsible_rank) == ("straggler", 1), job.verdict.evidence
    assert job.verdict.evidence[0] == (
        "rank 1 is the straggler: 50% of its samples in slow_augment (train.py:9), the other rank 10%; rank 0 waits "
        "for it in the gradient all-reduce (DDP, inside backward) 70% of the time")
