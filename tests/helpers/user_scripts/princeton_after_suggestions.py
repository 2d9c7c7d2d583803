"""A SLURM-convention trainer in Princeton's ``mnist_classify_ddp.py`` layout after the checker's five
suggestions of round 4 (issue 47 item 2; written here): the backend, the assert, ``set_device``, ``.to`` and
``device_ids`` now choose by device, yet two things still need a GPU (lines marked ``# CUDA``): the GPU's
number passed on to ``train``/``test`` (which do ``data.to(device)``), and ``SLURM_GPUS_ON_NODE``, which SLURM
sets only for a job that asks for GPUs.
"""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def train(model, device, batches, optimizer):
    for data, target in batches:
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()


def test(model, device, batches):
    with torch.no_grad():
        for data, target in batches:
            data, target = data.to(device), target.to(device)
            print(F.cross_entropy(model(data), target).item())


def main():
    world_size = int(os.environ["WORLD_SIZE"])
    rank = int(os.environ["SLURM_PROCID"])
    gpus_per_node = int(os.environ["SLURM_GPUS_ON_NODE"])  # CUDA
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo", rank=rank, world_size=world_size)
    local_rank = rank - gpus_per_node * (rank // gpus_per_node)
    if use_cuda:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    model = torch.nn.Linear(4, 2).to(device)
    ddp_model = DDP(model, device_ids=[local_rank] if use_cuda else None)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    batches = [(torch.zeros(8, 4), torch.zeros(8, dtype=torch.long))]
    train(ddp_model, local_rank, batches, optimizer)  # CUDA
    if rank == 0:
        test(ddp_model, local_rank, batches)  # CUDA
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
