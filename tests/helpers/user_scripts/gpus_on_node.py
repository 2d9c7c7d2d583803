"""A SLURM-convention script that starts as Princeton's mnist_classify_ddp.py does (issue 47 item 3): its
rank from SLURM_PROCID, the job's size from WORLD_SIZE, the GPUs of its node from SLURM_GPUS_ON_NODE read
with [] (SLURM sets that one only in a job with GPUs: a KeyError on a CPU where nobody sets it), its local
rank as ``rank - gpus_per_node * (rank // gpus_per_node)`` (a division: 0 would fail too) and a DataLoader's
worker count from SLURM_CPUS_PER_TASK. It all-reduces its rank on the CPU and prints what it saw.

    SLURM_PROCID=0 WORLD_SIZE=1 SLURM_GPUS_ON_NODE=1 SLURM_CPUS_PER_TASK=1 MASTER_ADDR=127.0.0.1 \\
        MASTER_PORT=29500 python gpus_on_node.py
"""

import json
import os

import torch
import torch.distributed as dist


def main() -> None:
    world_size = int(os.environ["WORLD_SIZE"])
    rank = int(os.environ["SLURM_PROCID"])
    gpus_per_node = int(os.environ["SLURM_GPUS_ON_NODE"])
    workers = int(os.environ["SLURM_CPUS_PER_TASK"])
    local_rank = rank - gpus_per_node * (rank // gpus_per_node)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    print("RESULT " + json.dumps({"rank": rank, "world_size": world_size, "local_rank": local_rank,
                                  "gpus_per_node": gpus_per_node, "workers": workers,
                                  "sum_of_ranks": total.item()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
