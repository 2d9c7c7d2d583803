"""A per-node parent over the GPUs SLURM gives, as the seed tutorial writes it (written for ddp-tutorial's
tests, MIT like the package).

One copy runs per node, in one SLURM task holding all the node's GPUs: it reads the number of nodes from
SLURM_NPROCS, its node's number from SLURM_PROCID and the node's GPUs from SLURM_GPUS_ON_NODE (the seed
counts them with torch.cuda.device_count(); the lab's GPUs are fake, so torch sees none), all three read
directly, as the seed does, and starts one training process per GPU with ``mp.spawn``. Each process reports
the GPU it was given (CUDA_VISIBLE_DEVICES) and takes part in one all_reduce over gloo.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(gpu_id_in_node, node, nodes, gpus_per_node):
    rank = node * gpus_per_node + gpu_id_in_node
    world_size = nodes * gpus_per_node
    visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v]
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        value = torch.ones(1)
        dist.all_reduce(value)
        gpu = visible[gpu_id_in_node] if gpu_id_in_node < len(visible) else None
        sys.stdout.write("RESULT " + json.dumps({"rank": rank, "world_size": world_size, "count": value.item(),
                                                 "node": node, "gpus_on_node": gpus_per_node, "gpu": gpu}) + "\n")
        sys.stdout.flush()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    nodes = int(os.environ["SLURM_NPROCS"])
    node = int(os.environ["SLURM_PROCID"])
    gpus_per_node = int(os.environ["SLURM_GPUS_ON_NODE"])
    mp.spawn(worker, args=(node, nodes, gpus_per_node), nprocs=gpus_per_node)
