"""A DDP script whose rank comes from a helper module of its own folder (review of issue 47, item 4): it
calls ``init_process_group("gloo", rank=…, world_size=…)`` with the numbers ``slurm_numbers.py`` reads from
srun's SLURM_PROCID / SLURM_NTASKS, so it is written for SLURM's convention although this file names none
of SLURM's variables. It all-reduces rank + 1 and prints what it saw.

    srun --ntasks-per-node=2 python rank_from_helper.py
"""

import json
import os
import sys

import torch
import torch.distributed as dist

from slurm_numbers import rank_and_world


def main() -> None:
    rank, world = rank_and_world()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        value = torch.tensor([float(rank + 1)])
        dist.all_reduce(value)
        sys.stdout.write("RESULT " + json.dumps({"rank": rank, "world_size": world, "sum": value.item()}) + "\n")
        sys.stdout.flush()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)
