"""A DDP script in the PyTorch ImageNet example's idiom (review probe CS08, issue 47 item 2): the GPU's
number comes in as ``--gpu`` and is used directly as a device, and a helper gets it through a parameter.
Every line marked ``# CUDA`` runs only with a GPU; ``ddp-tutorial check-script`` must list each one.
"""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def evaluate(model, device):
    batch = torch.randn(8, 10).to(device)
    return model(batch).sum()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", type=int, default=0)
    args = parser.parse_args()
    dist.init_process_group("nccl")  # CUDA
    torch.cuda.set_device(args.gpu)  # CUDA
    model = torch.nn.Linear(10, 2)
    model.to(args.gpu)  # CUDA
    model = DDP(model, device_ids=[args.gpu])  # CUDA
    inputs = torch.randn(4, 10, device=args.gpu)  # CUDA
    model(inputs).sum().backward()
    print(evaluate(model, args.gpu))  # CUDA
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
