"""Frames of a 2-rank gloo DDP job under torchrun, constructed: the launcher and its ranks (and their DataLoader
workers), py-spy's stacks of a rank waiting for its peer in DDP's all-reduce, in forward, augmenting its batch in
Python, or synchronising with a GPU that spins on NCCL; `job_frame` / `run_job` to feed them to diagnose_job() as
the monitor does, and `straggler_frames`, the job whose rank 1 holds rank 0 back.

Stacks are what py-spy shows for a gloo DDP rank (tests/e2e/test_job_e2e.py watches real ones); GPU numbers are
H200-like, as in support/frames.py.
"""

from __future__ import annotations

from probes.diagnosis.job import diagnose_job
from probes.frame import (
    CpuReading,
    Frame,
    GpuReading,
    JobInfo,
    ProcessSample,
    StackCount,
    StackFrame,
    StacksReading,
    TargetInfo,
)

LAUNCHER, RANK0, RANK1 = 500, 501, 502
WORKER0, WORKER1 = 511, 512
T0 = 1_700_000_000.0
SITE = "/opt/venv/lib/python3.12/site-packages/"
STDLIB = "/usr/lib/python3.12/"
TRAIN = "/home/alice/ddp/train.py"
GiB = 2**30


def fr(function: str, file: str, line: int = 1, native: bool = False) -> StackFrame:
    return StackFrame(function=function, file=file, line=line, native=native)


ROOT = (fr("main", TRAIN, 60), fr("<module>", TRAIN, 80))
# A gloo DDP rank waiting for its peer: the reducer's all-reduce runs from autograd hooks in C++, so the main
# thread shows backward's entry into the engine, idle.
DDP_WAIT = (
    fr("_engine_run_backward", SITE + "torch/autograd/graph.py", 829),
    fr("backward", SITE + "torch/autograd/__init__.py", 364),
    fr("Tensor.backward", SITE + "torch/_tensor.py", 630),
    fr("train_step", TRAIN, 40),
) + ROOT
FORWARD = (
    fr("Linear.forward", SITE + "torch/nn/modules/linear.py", 134),
    fr("Module._call_impl", SITE + "torch/nn/modules/module.py", 1784),
    fr("DistributedDataParallel.forward", SITE + "torch/nn/parallel/distributed.py", 1660),
    fr("train_step", TRAIN, 38),
) + ROOT
SLOW_AUGMENT = (fr("slow_augment", TRAIN, 9), fr("train_step", TRAIN, 36)) + ROOT
SLOW_PYTHON = (fr("score_examples", TRAIN, 14), fr("train_step", TRAIN, 35)) + ROOT
ALL_REDUCE = (
    fr("all_reduce", SITE + "torch/distributed/distributed_c10d.py", 3005),
    fr("_exception_logger.<locals>.wrapper", SITE + "torch/distributed/c10d_logger.py", 81),
    fr("train_step", TRAIN, 45),
) + ROOT
FLUSH_METRICS = (fr("flush_metrics", TRAIN, 12), fr("train_step", TRAIN, 44)) + ROOT
DATALOADER_WAIT = (
    fr("_PollLikeSelector.select", STDLIB + "selectors.py", 415),
    fr("Queue.get", STDLIB + "multiprocessing/queues.py", 113),
    fr("_MultiProcessingDataLoaderIter._try_get_data", SITE + "torch/utils/data/dataloader.py", 1291),
    fr("_MultiProcessingDataLoaderIter._get_data", SITE + "torch/utils/data/dataloader.py", 1464),
    fr("_MultiProcessingDataLoaderIter._next_data", SITE + "torch/utils/data/dataloader.py", 1505),
    fr("_BaseDataLoaderIter.__next__", SITE + "torch/utils/data/dataloader.py", 725),
) + ROOT
WORKER_GETITEM = (
    fr("SlowDataset.__getitem__", "/home/alice/ddp/data.py", 20),
    fr("_MapDatasetFetcher.fetch", SITE + "torch/utils/data/_utils/fetch.py", 52),
    fr("_worker_loop", SITE + "torch/utils/data/_utils/worker.py", 349),
)
# NCCL on GPUs: the host runs ahead and waits at its next synchronisation while the GPU spins on the collective.
CUDA_SYNC = (fr("synchronize", SITE + "torch/cuda/__init__.py", 1083), fr("train_step", TRAIN, 47)) + ROOT
ITEM_NATIVE = (
    fr("cudaStreamSynchronize", "/usr/lib/x86_64-linux-gnu/libcudart.so.12", native=True),
    fr("at::native::_local_scalar_dense_cuda", SITE + "torch/lib/libtorch_cuda.so", native=True),
    fr("train_step", TRAIN, 48),
) + ROOT


def count(pid: int, stack, n: int = 5, idle: bool = False) -> StackCount:
    return StackCount(pid=pid, tid=pid, thread_name="MainThread", idle=idle, frames=stack, count=n)


def rank_proc(pid: int, rank: int, cpu: float = 100.0, main_cpu: float | None = None, alive: bool = True,
              gpu_index: int | None = None, **kw) -> ProcessSample:
    return ProcessSample(pid=pid, ppid=LAUNCHER, role="rank", name="python", alive=alive, cpu_pct=cpu,
                         main_thread_cpu_pct=cpu if main_cpu is None else main_cpu, rank=rank, local_rank=rank,
                         world_size=2, gpu_index=gpu_index, **kw)


def launcher_proc() -> ProcessSample:
    return ProcessSample(pid=LAUNCHER, ppid=1, role="launcher", name="torchrun", cpu_pct=0.5,
                         main_thread_cpu_pct=0.5)


def worker_proc(pid: int, owner: int, cpu: float = 98.0) -> ProcessSample:
    return ProcessSample(pid=pid, ppid=owner, role="dataloader_worker", name="pt_data_worker", cpu_pct=cpu,
                         owner_pid=owner)


def job_info(kind: str = "torchrun", ranks=(RANK0, RANK1)) -> JobInfo:
    return JobInfo(kind=kind, attached_pid=LAUNCHER, root_pid=LAUNCHER, launcher_pid=LAUNCHER, run_id="run-7",
                   world_size=len(ranks), local_world_size=len(ranks), rank_pids=tuple(ranks))


def job_frame(i: int, processes, counts=(), threads=(), gpu: GpuReading | None = None, job: JobInfo | None = None,
              environment=None, launcher_alive: bool = True) -> Frame:
    return Frame(
        seq=i + 1, time=T0 + i + 1.0, interval_s=1.0,
        target=TargetInfo(pid=LAUNCHER, alive=launcher_alive, cmdline=("torchrun", "train.py"),
                          environment=environment),
        processes=(launcher_proc(), *processes),
        cpu=CpuReading(effective_cpus=8.0, affinity_cpus=8),
        gpu=gpu or GpuReading(available=False, reason="no NVIDIA driver"),
        stacks=StacksReading(available=True, rate_hz=5.0, samples=sum(c.count for c in counts),
                             counts=tuple(counts), threads=tuple(threads)),
        job=job or job_info(),
    )


def run_job(frames, hang_after_s: float = 5.0):
    """The job verdict after each frame, fed as the monitor does (the previous one passed back in)."""
    verdicts, verdict = [], None
    for i in range(1, len(frames) + 1):
        verdict = diagnose_job(frames[:i], verdict, hang_after_s)
        verdicts.append(verdict)
    return verdicts


def text(verdict) -> str:
    return "\n".join(verdict.evidence + verdict.advice)


def straggler_frames(n: int = 8, start: int = 0):
    """Rank 1 augments its batch in Python before each step; rank 0 waits for it in DDP's all-reduce."""
    return [job_frame(i, [rank_proc(RANK0, 0, cpu=15.0), rank_proc(RANK1, 1, cpu=100.0)], counts=[
        count(RANK0, DDP_WAIT, n=8, idle=True), count(RANK0, FORWARD, n=2),
        count(RANK1, SLOW_AUGMENT, n=8), count(RANK1, FORWARD, n=1), count(RANK1, DDP_WAIT, n=1, idle=True),
    ]) for i in range(start, start + n)]
