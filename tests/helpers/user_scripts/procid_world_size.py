"""A DDP script in the Princeton example's mix (review of issue 47, item 4): its rank from srun's SLURM_PROCID,
its world size from WORLD_SIZE. Under one SLURM task per process (``--template per-gpu``) both agree; under
torchrun every worker of a node inherits the node's SLURM_PROCID, so two processes are "rank 0 of 4" and no
one is rank 3: without a check they wait for each other until the time limit. All-reduces rank + 1.

    srun --ntasks-per-node=2 python procid_world_size.py
"""

import json
import os
import sys

import torch
import torch.distributed as dist

if __name__ == "__main__":
    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["WORLD_SIZE"])
    print(f"Hello from rank {rank} of {world}", flush=True)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    sys.stdout.write("RESULT " + json.dumps({"rank": rank, "world_size": world, "sum": value.item()}) + "\n")
    sys.stdout.flush()
    dist.destroy_process_group()
    os._exit(0)
