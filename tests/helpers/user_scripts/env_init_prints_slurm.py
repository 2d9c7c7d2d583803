"""A torchrun-style DDP script that only prints srun's number (review probe CS05): the process group comes
from env:// (torchrun's RANK, WORLD_SIZE); SLURM_PROCID is shown in a log line, never used as a rank.

    torchrun --standalone --nproc-per-node 2 env_init_prints_slurm.py
"""

import json
import os
import sys

import torch
import torch.distributed as dist


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # env://
    try:
        print(f"srun task {os.environ.get('SLURM_PROCID')}", flush=True)
        task = os.environ.get("SLURM_PROCID", "-")
        print("task", task, flush=True)
        value = torch.tensor([1.0])
        dist.all_reduce(value)
        record = {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "sum": value.item()}
        sys.stdout.write("RESULT " + json.dumps(record) + "\n")
        sys.stdout.flush()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
