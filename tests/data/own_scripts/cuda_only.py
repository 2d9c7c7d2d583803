"""A torchrun-style DDP script written for GPUs only, as most are (written for ddp-tutorial's tests,
MIT like the package). ``ddp-tutorial check-script`` lists the lines it must change to run on a CPU;
docs/own-script.md shows each change."""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()
    assert torch.cuda.device_count() > 0, "no GPU"
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = torch.nn.Linear(4, 1).to(local_rank)
    model = DDP(model, device_ids=[local_rank])
    data = torch.randn(8, 4).cuda()
    model(data).sum().backward()
    print(f"rank {dist.get_rank()} done, {args.local_rank}")


if __name__ == "__main__":
    main()
