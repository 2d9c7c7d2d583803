"""A per-node parent in the seed tutorial's layout (written for ddp-tutorial's tests, MIT like the package).

One copy runs per node: it reads the number of nodes from SLURM_NPROCS and its node's number from
SLURM_PROCID, and starts PROCS_PER_NODE training processes itself with ``mp.spawn``. It needs one SLURM
task per node (``slurm render --template per-gpu --nproc-per-node 1``); under torchrun or with one task
per process it would start too many processes.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(local_rank, node, nodes, per_node):
    rank = node * per_node + local_rank
    world_size = nodes * per_node
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", rank=rank, world_size=world_size)
    try:
        value = torch.ones(1)
        dist.all_reduce(value)
        sys.stdout.write("RESULT " + json.dumps({"rank": rank, "world_size": world_size, "count": value.item()}) + "\n")
        sys.stdout.flush()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    nodes = int(os.environ.get("SLURM_NPROCS", "1"))
    node = int(os.environ.get("SLURM_PROCID", "0"))
    per_node = int(os.environ.get("PROCS_PER_NODE", "2"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    mp.spawn(worker, args=(node, nodes, per_node), nprocs=per_node)
