"""A torchrun-convention DDP script that builds its rank from torchrun's node number (review of issue 47,
item 4, the reverse case): GROUP_RANK × LOCAL_WORLD_SIZE + LOCAL_RANK, with GROUP_RANK taken as 0 when it is
not set. torchrun sets it; srun (``--template per-gpu``) does not, so every node's processes take ranks 0, 1
… and the second node's wait for partners that never come. All-reduces rank + 1.

    torchrun --nnodes 2 --nproc-per-node 2 … group_rank.py
"""

import json
import os
import sys

import torch
import torch.distributed as dist

if __name__ == "__main__":
    local_rank, per_node = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    rank = int(os.environ.get("GROUP_RANK", "0")) * per_node + local_rank
    world = int(os.environ["WORLD_SIZE"])
    print(f"Hello from rank {rank} of {world}", flush=True)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    sys.stdout.write("RESULT " + json.dumps({"rank": rank, "world_size": world, "sum": value.item()}) + "\n")
    sys.stdout.flush()
    dist.destroy_process_group()
    os._exit(0)
