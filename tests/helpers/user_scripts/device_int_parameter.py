"""A GPU's number born as a plain int under a name of the script's own (``slot``, issue 47 item 2), passed into
a function and a class that use it as a device: ``.to(n)``, ``.cuda(n)``, ``torch.device(n)``,
``device_ids=[n]``. Every line marked ``# CUDA`` runs only with a GPU; ``ddp-tutorial check-script`` must list
each one, and only those.
"""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def build(where):
    model = torch.nn.Linear(4, 2).to(where)  # CUDA
    return DDP(model, device_ids=[where])  # CUDA


class Runner:
    def __init__(self, model, slot):
        self.model = model
        self.slot = slot

    def step(self, batch):
        return self.model(batch.cuda(self.slot))  # CUDA


def main() -> None:
    slot = int(os.environ["SLURM_LOCALID"]) % 8
    dist.init_process_group("gloo")
    model = build(slot)  # CUDA
    runner = Runner(model, slot)  # CUDA
    print(runner.step(torch.zeros(3, 4, device=torch.device(slot))))  # CUDA
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
