"""What merging N nodes costs: replay a recording of a job merged across nodes (`gputop --slurm-job J --record`,
or tests/e2e/test_cluster_e2e.py's two "nodes") as N nodes' streams, and time probes.monitoring.cluster.ClusterMonitor.

Usage: python scripts/measure_merge.py REC.jsonl [N ...]   (default N: 2 8 64)

Node k's frames are the recording's node (k mod its node count)'s, renamed and with their ranks renumbered so
the job has N × (ranks a node) ranks. Each round is what one tick brings live: one frame a node, then one
merge. It prints the bytes a node sends a second and the merge's CPU a round, i.e. cores at a 1 s interval.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections import defaultdict

from probes.frame import to_jsonable
from probes.monitoring.cluster import ClusterMonitor, parse_frame_line
from probes.outputs.recording import json_line, read_recording


def renumbered(frame, node: str, offset: int):
    processes = tuple(dataclasses.replace(p, rank=p.rank + offset) if p.rank is not None else p
                      for p in frame.processes)
    return dataclasses.replace(frame, node=node, processes=processes)


def main() -> None:
    path, *counts = sys.argv[1:]
    counts = [int(c) for c in counts] or [2, 8, 64]
    by_node = defaultdict(list)
    for frame in read_recording(path):
        by_node[frame.node].append(frame)
    names = sorted(by_node)
    rounds = min(len(v) for v in by_node.values())
    ranks_a_node = max(len([p for p in by_node[n][-1].processes if p.role == "rank"]) for n in names)
    first_ranks = {n: min(p.rank for p in by_node[n][-1].processes if p.rank is not None) for n in names}
    span = by_node[names[0]][rounds - 1].time - by_node[names[0]][0].time
    sent = sum(len(json_line(to_jsonable(f))) for f in by_node[names[0]][:rounds])
    print(f"{path}: {len(names)} nodes, {rounds} rounds, {ranks_a_node} ranks a node; "
          f"a node sends {sent / span / 1000:.1f} kB/s ({sent / rounds / 1000:.1f} kB a frame)")
    for count in counts:
        nodes = []
        for k in range(count):
            source = names[k % len(names)]
            offset = k * ranks_a_node - first_ranks[source]
            # As lines, the way they come from an agent: parsing them is part of the merge's cost.
            nodes.append([json_line(to_jsonable(renumbered(f, f"n{k + 1}", offset))) for f in by_node[source][:rounds]])
        monitor = ClusterMonitor(replay=True)
        cpu = []
        for i in range(rounds):
            started = time.process_time()
            for lines in nodes:
                frame = parse_frame_line(lines[i])
                monitor.add(frame)
            view = monitor.merge(now=frame.time)
            cpu.append(time.process_time() - started)
        steady = sorted(cpu[rounds // 4:])  # past the first rounds' warm-up
        median = steady[len(steady) // 2]
        print(f"{count:4d} nodes: merge CPU a round median {median * 1000:.1f} ms, max {max(steady) * 1000:.1f} ms "
              f"= {median:.3f} cores at 1 s; verdict: {view.verdict.evidence[0][:90]}")


if __name__ == "__main__":
    main()
