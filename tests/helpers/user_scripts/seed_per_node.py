"""The TRUBA seed's per-node parent as the tutorial's text lays it out (issue 47 item 2; written here): one
copy per node counts the node's GPUs with ``torch.cuda.device_count()`` and starts one process per GPU with
``mp.spawn``; each process moves its data with ``.to(gpu_id_in_node)``. Lines marked ``# CUDA`` run (or
count) only with a GPU: on a CPU the job ends at once with exit code 0, having trained nothing.
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel


def train_process_on_gpu(gpu_id_in_node, world_size, id_in_group, gpus_per_device):
    rank = gpu_id_in_node + id_in_group * gpus_per_device
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = torch.nn.Linear(28 * 28, 10).to(gpu_id_in_node)  # CUDA
    use_gpu = torch.cuda.is_available()
    parallel_model = DistributedDataParallel(model, device_ids=[gpu_id_in_node] if use_gpu else None)
    data = torch.zeros(8, 28 * 28).to(gpu_id_in_node)  # CUDA
    labels = torch.zeros(8, dtype=torch.long).to(gpu_id_in_node)  # CUDA
    loss = torch.nn.functional.cross_entropy(parallel_model(data), labels)
    loss.backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    group_size = int(os.environ["SLURM_NPROCS"])
    id_in_group = int(os.environ["SLURM_PROCID"])
    gpus_per_device = torch.cuda.device_count()  # CUDA
    world_size = gpus_per_device * group_size
    print(f"node {id_in_group} of {group_size}: {world_size} GPUs in all")
    mp.spawn(train_process_on_gpu, args=(world_size, id_in_group, gpus_per_device), nprocs=gpus_per_device)
