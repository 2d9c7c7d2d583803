"""The seed tutorial's pipeline, written faithfully: the reference the package is measured against.

This is ``01_distributed.py`` of the seed tutorial (see the workshop's seed text), with only
what a benchmark needs changed — each change is marked ``# BENCHMARK:``:

* the data set is read from a staged root with ``download=False`` (no machine here, and no
  cluster compute node, reaches the internet; stage it with ``ddp-tutorial data prepare``);
* the per-node parent takes the world size from ``--world`` instead of SLURM and the GPU
  count, and picks a free ``MASTER_PORT`` (the seed's SLURM script exported one);
* on a machine without GPUs the processes train on the CPU (the seed calls ``.to(gpu)``);
* the training loop is timed — from a barrier just before the first batch to the end of
  the last epoch, like the package's ``train_seconds`` — and rank 0 writes a JSON result;
* ``--threads`` sets the intra-op threads per process (the seed leaves torch's default: all
  cores in every process, which oversubscribes the CPU when ranks share it).

Everything else is the seed's: ``torchvision`` data set with ``transforms.ToTensor()``
(one PIL image at a time), ``DistributedSampler`` without ``set_epoch``,
``DataLoader(batch_size=128, sampler=...)`` with no worker processes, the 4-layer MLP,
``DistributedDataParallel``, Adam (lr 0.001), ``total_loss += loss`` (it keeps every
step's autograd graph alive until the epoch ends — a seed bug, kept on purpose) and the
rank-0 test through the DDP wrapper.

    python -m benchmarks.seed_pipeline --dataset fashion-mnist --root /tmp/fm --world 2 --epochs 1 \\
        --json /tmp/seed.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Subset
from torch.utils.data.distributed import DistributedSampler
import torchvision.datasets
from torchvision import transforms

from ddp_tutorial.datasets import FOLDERS
from ddp_tutorial.whoami import find_free_port
from ddp_tutorial.i18n import Count, t
from ddp_tutorial.model import DeepNeuralNetwork  # the seed's class, unchanged

from .common import write_json


def train_process_on_gpu(gpu_id_in_node, world_size, id_in_group, gpus_per_device, options):
    # Rank of this process among all the 'train_process_on_gpu' processes of the job.
    rank = gpu_id_in_node + id_in_group * gpus_per_device
    if options.threads:  # BENCHMARK: the seed leaves torch's default
        torch.set_num_threads(options.threads)
    # BENCHMARK: the seed always uses GPU number gpu_id_in_node.
    device = torch.device("cuda", gpu_id_in_node) if options.device == "cuda" else torch.device("cpu")
    backend = options.backend
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world_size)

    # The data set, decoded image by image through PIL and ToTensor.
    dataset = getattr(torchvision.datasets, FOLDERS[options.dataset])  # torchvision's MNIST or FashionMNIST
    train_dataset = dataset(root=options.root, train=True, download=False,  # BENCHMARK: download=True
                            transform=transforms.ToTensor())
    classes = train_dataset.classes
    if options.train_subset:  # BENCHMARK: quick runs
        train_dataset = Subset(train_dataset, range(options.train_subset))
    data_sampler = DistributedSampler(train_dataset, num_replicas=world_size, rank=rank)
    dataloader = DataLoader(train_dataset, batch_size=options.batch_size, sampler=data_sampler)
    num_features = 28 * 28
    num_classes = len(classes)

    model = DeepNeuralNetwork(4, num_features, 128, num_classes=num_classes).to(device)
    parallel_model = DistributedDataParallel(model, device_ids=[gpu_id_in_node] if device.type == "cuda" else None)

    optimizer = torch.optim.Adam(parallel_model.parameters(), lr=options.lr)
    criterion = torch.nn.CrossEntropyLoss()
    epochs = options.epochs

    dist.barrier()  # BENCHMARK: the clock starts when every rank is ready
    started = time.perf_counter()
    samples = 0
    losses = []
    for epoch in range(epochs):
        total_loss = 0
        for data, labels in dataloader:
            data = data.reshape(-1, 28 * 28)
            data = data.to(device)
            labels = labels.to(device)
            optimizer.zero_grad()
            y_score = parallel_model(data)
            loss = criterion(y_score, labels)
            # During backward all processes average their gradients: every replica gets the same ones.
            loss.backward()
            optimizer.step()
            total_loss += loss
            samples += len(labels)  # BENCHMARK
        print(f"loss at rank {rank} is {total_loss}")
        losses.append(float(total_loss.detach()))  # BENCHMARK
    if device.type == "cuda":
        torch.cuda.synchronize()
    train_seconds = time.perf_counter() - started  # BENCHMARK

    accuracy = None
    if rank == 0 and options.evaluate:
        test_dataset = dataset(root=options.root, train=False, download=False, transform=transforms.ToTensor())
        test_dataloader = DataLoader(test_dataset, batch_size=128)
        n_samples = 0
        n_correct = 0
        for data, labels, in test_dataloader:
            data = data.reshape(-1, 28 * 28)
            data = data.to(device)
            labels = labels.to(device)
            y_score = parallel_model(data)
            _, predicted = torch.max(y_score.data, 1)
            n_samples += labels.size(0)
            n_correct += (predicted == labels).sum().item()
        accuracy = 100.0 * n_correct / n_samples
        print(t("train.accuracy", n=Count(n_samples), acc=accuracy))  # the seed printed this line in Turkish

    if rank == 0 and options.json:  # BENCHMARK: the result, in the package's terms
        write_json(options.json, {
            "variant": "seed", "world_size": world_size, "dataset": options.dataset, "backend": backend,
            "device": str(device), "threads": torch.get_num_threads(), "batch_size": options.batch_size,
            "epochs": epochs, "steps_per_epoch": len(dataloader), "samples": samples * world_size,
            "train_seconds": train_seconds, "samples_per_second": samples * world_size / max(train_seconds, 1e-9),
            "rank0_losses": losses, "test_accuracy": accuracy,
        })
    dist.destroy_process_group()


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.seed_pipeline",
                                     description="The seed tutorial's training pipeline (reference for benchmarks).")
    parser.add_argument("--dataset", default="mnist", choices=["mnist", "fashion-mnist"])
    parser.add_argument("--root", required=True, help="a staged data root (ddp-tutorial data prepare)")
    parser.add_argument("--world", type=int, default=1, help="training processes on this machine")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads per process")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--train-subset", type=int, default=None)
    parser.add_argument("--no-eval", dest="evaluate", action="store_false")
    parser.add_argument("--json", default=None)
    options = parser.parse_args(argv)
    options.backend = "gloo"  # the seed uses gloo, even on its GPUs (gloo can all-reduce CUDA tensors)
    return options


def main(argv=None) -> int:
    options = parse_args(argv)
    # The seed's parent: one node (id_in_group 0 of group_size 1), one process per device.
    group_size, id_in_group = 1, 0
    gpus_per_device = options.world
    world_size = gpus_per_device * group_size
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")  # BENCHMARK: the seed's SLURM script exports these
    os.environ["MASTER_PORT"] = str(find_free_port(os.environ["MASTER_ADDR"]))
    args = (world_size, id_in_group, gpus_per_device, options)
    mp.spawn(train_process_on_gpu, args=args, nprocs=gpus_per_device, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
