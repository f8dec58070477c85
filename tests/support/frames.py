"""Frames of one training process, constructed: py-spy's stacks for each kind of work (a DataLoader wait, a worker's
__getitem__, tokenizing, a socket read, forward, backward, a lock, torch.save, a compile, an all-reduce), an H200-like
GPU reading, and `make_frame` / `run` to feed them to diagnose() as the monitor does.

GPU numbers are H200-like (max SM clock 1980 MHz, power limit 700 W, 141 GiB) since the test machines have no GPU.
"""

from __future__ import annotations

from probes.diagnosis.verdict import diagnose
from probes.frame import (
    CpuReading,
    Frame,
    GpuDevice,
    GpuProcess,
    GpuReading,
    ProcessSample,
    ProgressReading,
    StackCount,
    StackFrame,
    StacksReading,
    TargetInfo,
    Verdict,
)

PID = 4242
T0 = 1_700_000_000.0
SITE = "/opt/venv/lib/python3.11/site-packages/"
STDLIB = "/usr/lib/python3.11/"
TRAIN = "/home/alice/nanogpt/train.py"
GiB = 2**30


def fr(function: str, file: str, line: int = 1) -> StackFrame:
    return StackFrame(function=function, file=file, line=line)


ROOT = (fr("main", TRAIN, 300), fr("<module>", TRAIN, 320))
DATALOADER_WAIT = (
    fr("_PollLikeSelector.select", STDLIB + "selectors.py", 415),
    fr("Queue.get", STDLIB + "multiprocessing/queues.py", 113),
    fr("_MultiProcessingDataLoaderIter._try_get_data", SITE + "torch/utils/data/dataloader.py", 1291),
    fr("_MultiProcessingDataLoaderIter._get_data", SITE + "torch/utils/data/dataloader.py", 1464),
    fr("_MultiProcessingDataLoaderIter._next_data", SITE + "torch/utils/data/dataloader.py", 1505),
    fr("_BaseDataLoaderIter.__next__", SITE + "torch/utils/data/dataloader.py", 725),
) + ROOT
WORKER_GETITEM = (
    fr("ImageDataset.__getitem__", "/home/alice/nanogpt/data.py", 57),
    fr("_MapDatasetFetcher.fetch", SITE + "torch/utils/data/_utils/fetch.py", 52),
    fr("_worker_loop", SITE + "torch/utils/data/_utils/worker.py", 349),
) + DATALOADER_WAIT[3:]  # forked workers keep the parent's frames under _worker_loop
TOKENIZE = (
    fr("tokenize_text", TRAIN, 20),
    fr("get_batch", TRAIN, 31),
) + ROOT
SOCKET_READ = (
    fr("SocketIO.readinto", STDLIB + "socket.py", 706),
    fr("HTTPResponse._safe_read", STDLIB + "http/client.py", 638),
    fr("HTTPResponse.read", STDLIB + "http/client.py", 489),
    fr("fetch_shard", TRAIN, 15),
) + ROOT
FORWARD = (
    fr("Linear.forward", SITE + "torch/nn/modules/linear.py", 125),
    fr("Module._call_impl", SITE + "torch/nn/modules/module.py", 1789),
    fr("GPT.forward", "/home/alice/nanogpt/model.py", 180),
    fr("train_step", TRAIN, 250),
) + ROOT
BACKWARD = (
    fr("_engine_run_backward", SITE + "torch/autograd/graph.py", 829),
    fr("backward", SITE + "torch/autograd/__init__.py", 353),
    fr("Tensor.backward", SITE + "torch/_tensor.py", 625),
    fr("train_step", TRAIN, 252),
) + ROOT
LONG_MATMUL = (fr("one_long_matmul", TRAIN, 22),) + ROOT
SLEEP = (fr("main", TRAIN, 33), fr("<module>", TRAIN, 320))
LOCK_WAIT = (fr("rotate_logs", TRAIN, 27),) + ROOT
QUEUE_GET = (
    fr("Connection._recv", STDLIB + "multiprocessing/connection.py", 395),
    fr("Connection._recv_bytes", STDLIB + "multiprocessing/connection.py", 430),
    fr("_ConnectionBase.recv_bytes", STDLIB + "multiprocessing/connection.py", 216),
    fr("Queue.get", STDLIB + "multiprocessing/queues.py", 103),
) + ROOT
TORCH_SAVE = (
    fr("_save", SITE + "torch/serialization.py", 1229),
    fr("save", SITE + "torch/serialization.py", 966),
    fr("save_checkpoint", TRAIN, 280),
) + ROOT
COMPILING = (
    fr("InstructionTranslatorBase.run", SITE + "torch/_dynamo/symbolic_convert.py", 1950),
    fr("trace_frame", SITE + "torch/_dynamo/convert_frame.py", 954),
    fr("_compile", SITE + "torch/_dynamo/convert_frame.py", 2102),
    fr("CatchErrorsWrapper.__call__", SITE + "torch/_dynamo/convert_frame.py", 2628),
    fr("Module._call_impl", SITE + "torch/nn/modules/module.py", 1789),
    fr("OptimizedModule.__call__", SITE + "torch/_dynamo/eval_frame.py", 511),
    fr("train_step", TRAIN, 250),
) + ROOT
ALL_REDUCE = (
    fr("all_reduce", SITE + "torch/distributed/distributed_c10d.py", 2501),
    fr("_c10d_wrapper", SITE + "torch/distributed/c10d_logger.py", 81),
    fr("average_gradients", TRAIN, 200),
    fr("train_step", TRAIN, 255),
) + ROOT
PEER_LOCK_WAIT = (
    fr("flush_metrics", TRAIN, 19),
    fr("Thread.run", STDLIB + "threading.py", 982),
    fr("Thread._bootstrap", STDLIB + "threading.py", 1002),
)


def main_count(stack, n: int = 5, idle: bool = False) -> StackCount:
    return StackCount(pid=PID, tid=PID, thread_name="MainThread", idle=idle, frames=stack, count=n)


def proc(pid: int = PID, role: str = "main", cpu: float | None = 100.0, **kw) -> ProcessSample:
    name = {"main": "python", "dataloader_worker": "pt_data_worker"}.get(role, "python")
    return ProcessSample(pid=pid, ppid=None if role == "main" else PID, role=role, name=name, cpu_pct=cpu,
                         **kw)


def h200(util=100.0, sm=1980, power=690.0, sm_active=92.0, reasons=(), mem_used=60 * GiB) -> GpuReading:
    device = GpuDevice(index=0, name="NVIDIA H200", sm_clock_mhz=sm, max_sm_clock_mhz=1980, power_w=power,
                       power_limit_w=700.0, util_gpu_pct=util, mem_used_bytes=mem_used,
                       mem_total_bytes=141 * GiB, temperature_c=62.0, clock_event_reasons=reasons,
                       gpm_sm_active_pct=sm_active, processes=(GpuProcess(pid=PID, in_target=True),),
                       in_target=True)
    return GpuReading(available=True, devices=(device,))


def make_frame(i: int, counts=(), processes=None, cpu_reading: CpuReading | None = None,
               gpu: GpuReading | None = None, threads=(), alive: bool = True,
               progress: ProgressReading | None = None, **proc_kw) -> Frame:
    """Frame number i (ending at T0 + i + 1). proc_kw (cpu=..., read_chars_per_s=...) describe the main
    process when `processes` is not given."""
    return Frame(
        seq=i + 1,
        time=T0 + i + 1.0,
        interval_s=1.0,
        target=TargetInfo(pid=PID, alive=alive, exited_at=None if alive else T0 + i + 1.0,
                          exit_reason=None if alive else "process ended"),
        processes=tuple(processes) if processes is not None else (proc(**proc_kw),),
        cpu=cpu_reading or CpuReading(effective_cpus=8.0, affinity_cpus=8),
        gpu=gpu or GpuReading(available=False, reason="no NVIDIA driver"),
        stacks=StacksReading(available=True, rate_hz=5.0, samples=sum(c.count for c in counts),
                             counts=tuple(counts), threads=tuple(threads)),
        progress=progress,
    )


def run(frames, hang_after_s: float = 5.0) -> list[Verdict]:
    """The verdict after each frame, fed as the CLI does (previous verdict passed back in)."""
    verdicts, verdict = [], None
    for i in range(1, len(frames) + 1):
        verdict = diagnose(frames[:i], verdict, hang_after_s=hang_after_s)
        verdicts.append(verdict)
    return verdicts


def text(verdict: Verdict) -> str:
    return "\n".join(verdict.evidence + verdict.advice)
