"""A torchrun-style DDP script (written for ddp-tutorial's tests, MIT like the package).

It learns who it is as every torchrun script does — RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT from the environment, ``init_process_group`` with no rank (``env://``) — and picks its device
by the package's rule (a GPU of its own → cuda + nccl, else the CPU + gloo). It trains a tiny model a few
steps with DDP and prints one ``RESULT {json}`` line per rank.

    torchrun --standalone --nproc-per-node 2 torchrun_ddp.py --steps 3
"""

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--dry-run", action="store_true", help="one step only")
    parser.add_argument("--exit-code", type=int, default=0, help="leave with this code after the run")
    return parser.parse_args(argv)


def main():
    args = parse_args()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend)
    try:
        torch.manual_seed(0)
        model = DDP(torch.nn.Linear(4, 1).to(device), device_ids=[local_rank] if device.type == "cuda" else None)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        generator = torch.Generator().manual_seed(rank)
        steps = 1 if args.dry_run else args.steps
        for _ in range(steps):
            loss = model(torch.randn(8, 4, generator=generator).to(device)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        weights = torch.cat([p.detach().flatten() for p in model.parameters()])
        gathered = [torch.zeros_like(weights) for _ in range(world_size)]
        dist.all_gather(gathered, weights)
        result = {"rank": rank, "local_rank": local_rank, "world_size": world_size, "steps": steps,
                  "same_weights": all(torch.equal(gathered[0], w) for w in gathered),
                  "master": f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                  "argv": sys.argv[1:]}
        sys.stdout.write("RESULT " + json.dumps(result) + "\n")  # one write: ranks share the output
        sys.stdout.flush()
    finally:
        dist.destroy_process_group()
    if args.exit_code:
        sys.exit(args.exit_code)
    return result


if __name__ == "__main__":
    main()
    # The group is closed and the output written: leave without the interpreter's teardown, where torch's
    # C++ threads can abort a finished run ("terminate called without an active exception", docs/own-script.md).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
