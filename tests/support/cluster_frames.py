"""Frames of a DDP job whose ranks run on several nodes, constructed: each node's rank has the same node-local PID
(the merge across nodes must never mix them); `straggler_round` is the two-node job whose rank 1 on n2 holds rank 0
back, `many_ranks_round` the same on twenty nodes. Built from support/job_frames.py's ranks and stacks."""

from __future__ import annotations

import dataclasses

from probes.frame import GpuReading
from support.job_frames import DDP_WAIT, FORWARD, SLOW_AUGMENT, count, job_frame, job_info, rank_proc

PID = 501  # each node's rank has this PID in its own namespace: the merge must never mix them


def node_frame(node: str, i: int, rank: int, counts, cpu: float, main_cpu: float | None = None, threads=(),
               gpu: GpuReading | None = None):
    frame = job_frame(i, [rank_proc(PID, rank, cpu=cpu, main_cpu=main_cpu)], counts=counts, threads=threads,
                      job=dataclasses.replace(job_info(ranks=(PID,)), world_size=2), gpu=gpu)
    return dataclasses.replace(frame, node=node)


def straggler_round(i: int, gpu_n1=None, gpu_n2=None):
    """n1's rank 0 waits in DDP's all-reduce; n2's rank 1 augments its batch in Python."""
    return [
        node_frame("n1", i, 0, [count(PID, DDP_WAIT, n=8, idle=True), count(PID, FORWARD, n=2)], cpu=15.0,
                   gpu=gpu_n1),
        node_frame("n2", i, 1, [count(PID, SLOW_AUGMENT, n=8), count(PID, FORWARD, n=1),
                                count(PID, DDP_WAIT, n=1, idle=True)], cpu=100.0, gpu=gpu_n2),
    ]


def many_ranks_round(i: int, nodes: int = 20, slow: int = 7):
    """One rank a node on `nodes` nodes, all with PID 501: rank `slow` augments its batch, the others wait."""
    return [node_frame(f"n{k + 1}", i, k, [count(PID, SLOW_AUGMENT, n=8), count(PID, FORWARD, n=1),
                                           count(PID, DDP_WAIT, n=1, idle=True)] if k == slow else
                       [count(PID, DDP_WAIT, n=8 + k % 2, idle=True), count(PID, FORWARD, n=2 - k % 2)],
                       cpu=100.0 if k == slow else 15.0) for k in range(nodes)]
