"""Target: a 2-rank torchrun job on gloo (CPU) where rank 1 stops before an all_reduce that rank 0 enters.

``fr_job.py --launch [--socket-dir DIR]`` execs ``python -m torch.distributed.run --nproc_per_node 2
--master_port <free port> fr_job.py ...``, so the PID the test holds is torchrun's agent. With --socket-dir the
job opts in to PyTorch's Flight Recorder (TORCH_FR_BUFFER_SIZE=100) and each rank serves it through torch's
worker server (torch.distributed.elastic.control_plane.worker_main()) on the Unix socket DIR/rankN.sock: each
rank re-execs itself with its own TORCH_WORKER_SERVER_SOCKET, as a per-rank wrapper script would, so the
path is in the environment the rank was exec'd with (/proc/PID/environ). Without it, the same job with no
recorder.

Each step all-reduces a 1 MB tensor (262144 float32). At step STOP_STEP rank 1 takes its checkpoint lock twice
in wait_for_checkpoint (a self-deadlock) and never reaches the all_reduce; rank 0 enters it and waits. Rank 0
prints "ready" after the first step and "entering all_reduce #N" with the sequence number the Flight Recorder
gives that collective (the first all_reduce of the default group is #1).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading

STOP_STEP = 3
ELEMENTS = 262_144  # float32: 1,048,576 bytes

checkpoint_lock = threading.Lock()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(socket_dir: str | None) -> None:
    env = dict(os.environ)
    if socket_dir:
        env.update(TORCH_FR_BUFFER_SIZE="100", FR_JOB_SOCKET_DIR=socket_dir)
    arguments = ["--socket-dir", socket_dir] if socket_dir else []
    os.execve(sys.executable, [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                               "--master_addr", "127.0.0.1", "--master_port", str(free_port()), __file__,
                               *arguments], env)


def own_socket(socket_dir: str) -> None:
    """Re-exec this rank with its own worker-server socket in its environment (once: the variable is then set)."""
    if os.environ.get("TORCH_WORKER_SERVER_SOCKET"):
        return
    env = dict(os.environ, TORCH_WORKER_SERVER_SOCKET=os.path.join(socket_dir, f"rank{os.environ['RANK']}.sock"))
    os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], env)


def wait_for_checkpoint(step: int) -> None:
    """From STOP_STEP on, takes its (non-reentrant) lock twice: stuck here, before the step's all_reduce."""
    with checkpoint_lock:
        if step >= STOP_STEP:
            checkpoint_lock.acquire()


def train() -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    weights = torch.ones(ELEMENTS)
    step = 0
    while True:
        weights.mul_(0.5)
        if rank == 1:
            wait_for_checkpoint(step)
        if rank == 0 and step == STOP_STEP:
            print(f"entering all_reduce #{step + 1}", flush=True)
        dist.all_reduce(weights)
        if rank == 0 and step == 0:
            print("ready", flush=True)
        step += 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--launch", action="store_true", help="exec torchrun with 2 ranks of this script")
    parser.add_argument("--socket-dir", help="turn the Flight Recorder on and serve it per rank in DIR")
    args = parser.parse_args()
    if args.launch:
        launch(args.socket_dir)
    if args.socket_dir:
        own_socket(args.socket_dir)
        from torch.distributed.elastic.control_plane import worker_main

        with worker_main():
            train()
    else:
        train()


if __name__ == "__main__":
    main()
