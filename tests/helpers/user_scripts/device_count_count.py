"""``torch.cuda.device_count()`` used as a count (issue 47 item 2): 0 on a CPU, so ``mp.spawn(nprocs=0)``
starts nothing and the job "completes" having trained nothing. Lines marked ``# CUDA`` use it as a count;
the other uses only ask whether there is a GPU and are right as they are.
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(index, world):
    device = torch.device("cuda", index) if torch.cuda.is_available() else torch.device("cpu")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=index, world_size=world)
    print(torch.ones(1, device=device))
    dist.destroy_process_group()


if __name__ == "__main__":
    nodes = int(os.environ.get("SLURM_NNODES", "1"))
    procs = torch.cuda.device_count()  # CUDA
    world = procs * nodes
    if torch.cuda.device_count() > 1:
        print("several GPUs")
    spare = torch.cuda.device_count() if torch.cuda.is_available() else 2
    seen = torch.cuda.device_count()
    if seen == 0:
        print("no GPU: the fallback is the script's own")
    for gpu in range(torch.cuda.device_count()):  # CUDA
        print(gpu)
    mp.spawn(worker, args=(world,), nprocs=procs)
