"""A SLURM-style DDP script (written for ddp-tutorial's tests, MIT like the package).

Like many course scripts it takes its rank from srun's SLURM_PROCID, its local rank from SLURM_LOCALID
and the world size from SLURM_NTASKS (MASTER_ADDR / MASTER_PORT from the job script), and parses
``--epochs=N`` and ``--dry-run``. Under torchrun it cannot run: SLURM_PROCID is then the node's number.

    srun --ntasks-per-node=2 python slurm_ddp.py --epochs=1
"""

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=14)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    rank = int(os.environ["SLURM_PROCID"])
    local_rank = int(os.environ["SLURM_LOCALID"])
    world_size = int(os.environ["SLURM_NTASKS"])
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    try:
        device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
        value = torch.tensor([float(rank)], device=device)
        dist.all_reduce(value)
        result = {"rank": rank, "local_rank": local_rank, "world_size": world_size, "epochs": args.epochs,
                  "dry_run": args.dry_run, "sum_of_ranks": value.item()}
        sys.stdout.write("RESULT " + json.dumps(result) + "\n")  # one write: ranks share the output
        sys.stdout.flush()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # The group is closed and the output written: leave without the interpreter's teardown, where torch's
    # C++ threads can abort a finished run ("terminate called without an active exception", docs/own-script.md).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
