"""Stand-in for deepspeed.launcher.launch on one node: decodes --world_info, gives each local rank RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE, CROSS_RANK, CROSS_SIZE and MASTER_ADDR/PORT, and starts it as
`python -u SCRIPT --local_rank=N ARGS...` (DeepSpeed's launch.py does the same); then waits for them all."""

import argparse
import base64
import json
import os
import subprocess
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--node_rank", type=int, default=0)
parser.add_argument("--master_addr", default="127.0.0.1")
parser.add_argument("--master_port", type=int, default=29500)
parser.add_argument("--world_info")
parser.add_argument("training_script")
parser.add_argument("training_script_args", nargs=argparse.REMAINDER)
args = parser.parse_args()

world = json.loads(base64.urlsafe_b64decode(args.world_info))
nodes = list(world)
first_rank = sum(len(world[node]) for node in nodes[: args.node_rank])
local_size = len(world[nodes[args.node_rank]])
env = dict(os.environ, MASTER_ADDR=args.master_addr, MASTER_PORT=str(args.master_port),
           WORLD_SIZE=str(sum(len(devices) for devices in world.values())), CROSS_RANK=str(args.node_rank),
           CROSS_SIZE=str(len(nodes)), LOCAL_SIZE=str(local_size))
ranks = []
for local_rank in range(local_size):
    env.update(RANK=str(first_rank + local_rank), LOCAL_RANK=str(local_rank))
    ranks.append(subprocess.Popen([sys.executable, "-u", args.training_script, f"--local_rank={local_rank}",
                                   *args.training_script_args], env=dict(env)))
sys.exit(max(rank.wait() for rank in ranks))
