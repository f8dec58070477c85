"""Target: the rank side of NCCL's Flight Recorder dump trigger, without NCCL or a GPU.

Does with its debug-info pipe what ProcessGroupNCCL's heartbeat monitor does (torch/csrc/distributed/c10d/
ProcessGroupNCCL.hpp, struct DumpPipe; ProcessGroupNCCL.cpp, HeartbeatMonitor::runLoop): when
TORCH_NCCL_DEBUG_INFO_PIPE_FILE is set and the trace buffer is on (TORCH_FR_BUFFER_SIZE /
TORCH_NCCL_TRACE_BUFFER_SIZE, default 2000), it unlinks PREFIX<RANK>.pipe, mkfifo()s it 0666 and opens it
O_RDONLY|O_NONBLOCK; every TORCH_NCCL_COORD_CHECK_MILSEC (default 1000 ms) it reads up to 128 bytes, and when any
came it writes a Flight Recorder pickle to TORCH_FR_DUMP_TEMP_FILE / TORCH_NCCL_DEBUG_INFO_TEMP_FILE (default
/tmp/nccl_trace_rank_) + RANK, in the format tests/targets/nccl_dumps.py builds: rank 1 stopped after
all_reduce #411, every other rank entered #412 and waits in it.

``fr_pipe_rank.py --launch`` execs torchrun with 2 ranks of this script (no process group: the agent alone
rendezvouses), so the PID the test holds is torchrun's agent. ``--no-reader`` makes the pipe and never opens it
(a rank whose monitor thread is not up); ``--worker-server`` also serves torch's worker server on
TORCH_WORKER_SERVER_SOCKET. Prints "ready" once its pipe is open (or made), "pipe read N bytes" for
each read that returned data and "dumped to PATH" after each dump.
"""

from __future__ import annotations

import argparse
import os
import pickle
import socket
import sys
import time

from nccl_dumps import nccl_dump

STOPPED_RANK = 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(arguments: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                              "--master_addr", "127.0.0.1", "--master_port", str(free_port()), __file__, *arguments])


def buffer_size() -> int:
    for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        if name in os.environ:
            return int(os.environ[name])
    return 2000


def open_pipe(rank: int, reader: bool) -> int | None:
    """As DumpPipe's constructor: the FIFO made afresh, opened for reading without blocking."""
    stem = os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "")
    if not stem or buffer_size() <= 0:
        return None
    path = f"{stem}{rank}.pipe"
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.mkfifo(path, 0o666)
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK) if reader else None


def dump(rank: int) -> str:
    """As DebugInfoWriter::write: the pickled trace to PREFIX + rank."""
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE") or os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") or \
        "/tmp/nccl_trace_rank_"
    path = f"{prefix}{rank}"
    trace = nccl_dump(411, 411) if rank == STOPPED_RANK else nccl_dump(412, 411)
    with open(path, "wb") as handle:
        handle.write(pickle.dumps(trace))
    return path


def monitor_loop(rank: int, fd: int | None) -> None:
    poll_s = int(os.environ.get("TORCH_NCCL_COORD_CHECK_MILSEC", "1000")) / 1000
    while True:
        time.sleep(poll_s)
        if fd is None:
            continue
        try:
            data = os.read(fd, 128)
        except BlockingIOError:  # a writer holds the pipe open but wrote nothing yet
            continue
        if data:
            print(f"pipe read {len(data)} bytes", flush=True)
            print(f"dumped to {dump(rank)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--launch", action="store_true", help="exec torchrun with 2 ranks of this script")
    parser.add_argument("--no-reader", action="store_true", help="make the pipe, never open it")
    parser.add_argument("--worker-server", action="store_true",
                        help="also serve torch's worker server on TORCH_WORKER_SERVER_SOCKET (as worker_main() does)")
    args = parser.parse_args()
    if args.launch:
        launch(["--no-reader"] if args.no_reader else [])
    rank = int(os.environ.get("RANK", "0"))
    if args.worker_server:
        from torch._C._distributed_c10d import _WorkerServer

        server = _WorkerServer(os.environ["TORCH_WORKER_SERVER_SOCKET"])  # noqa: F841 (serves while referenced)
    fd = open_pipe(rank, reader=not args.no_reader)
    print("ready", flush=True)
    monitor_loop(rank, fd)


if __name__ == "__main__":
    main()
