"""A DDP script that prefers srun's numbers (review probe CS06): SLURM_PROCID and SLURM_NTASKS when they are
set, else torchrun's RANK and WORLD_SIZE. Under srun (one task per process) both sets agree; under torchrun
inside an srun task every worker inherits the task's SLURM_PROCID, so the workers all take the same rank.
It all-reduces rank + 1 and prints what it saw.

    SLURM_PROCID=0 SLURM_NTASKS=1 torchrun --standalone --nproc-per-node 2 slurm_first.py
"""

import json
import os
import sys

import torch
import torch.distributed as dist


def main() -> None:
    if "SLURM_PROCID" in os.environ:
        rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    else:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        value = torch.tensor([float(rank + 1)])
        dist.all_reduce(value)
        record = {"rank": rank, "world_size": world, "sum": value.item(),
                  "torchrun_rank": int(os.environ.get("RANK", "-1"))}
        sys.stdout.write("RESULT " + json.dumps(record) + "\n")  # one write: workers share the output
        sys.stdout.flush()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
