"""A user's own DDP script, as it would be written without this package (it imports nothing
from ddp_tutorial): join the process group from the standard environment, all-reduce rank + 1,
write what this process saw. Run by `ddp-tutorial slurm render --script` jobs in the SLURM lab.

    python allreduce.py OUT_DIR [--tag TEXT]
"""

import argparse
import json
import os
import socket

import torch
import torch.distributed as dist

ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank = dist.get_rank()
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)  # 1 + 2 + … + world size
    record = dict(rank=rank, world_size=dist.get_world_size(), sum=value.item(), host=socket.gethostname(),
                  tag=args.tag, env={name: os.environ.get(name) for name in ENV})
    path = os.path.join(args.out_dir, f"rank-{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
