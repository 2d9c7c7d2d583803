"""The compute bound: how fast could the training go if moving data and talking cost nothing?

One process, no DDP, the whole training set already in memory as one float32 tensor
(already scaled to [0, 1] and shuffled *before* the clock starts), the same model, the
same optimizer and the same number of optimizer steps as the package's run at world size
W, each step on the same number of samples (``W × batch size``; the last step of an
epoch is smaller, as in the real run). A batch is a slice of that tensor — a view, no
copy — so the timed loop holds only forward, backward and the Adam step.

Not re-shuffled between epochs: the arithmetic of a step does not depend on which
samples it sees, so the bound's time is that of the real run's compute.

On a GPU the data sits on the device and the loop is timed with CUDA events.

    python -m benchmarks.bound --dataset fashion-mnist --root /tmp/fm --world 2 --epochs 1 --json /tmp/b.json
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import torch

from ddp_tutorial import data as datasets
from ddp_tutorial.model import DeepNeuralNetwork

from .common import usable_cores, write_json


def step_sizes(num_samples: int, world_size: int, batch_size: int) -> list:
    """Samples per optimizer step in one epoch of a DDP run: every rank has
    ``ceil(N / W)`` samples (the sampler pads), cut into batches of ``batch_size``."""
    per_rank = math.ceil(num_samples / world_size)
    sizes = [batch_size] * (per_rank // batch_size)
    if per_rank % batch_size:
        sizes.append(per_rank % batch_size)
    return [s * world_size for s in sizes]


def run(dataset: str, root: str, world_size: int, epochs: int, batch_size: int = 128, lr: float = 1e-3,
        threads: int = 0, device: str = "cpu", train_subset: int = 0, seed: int = 0) -> dict:
    torch.set_num_threads(threads or usable_cores())  # one process: all the cores
    dev = torch.device(device)
    train = datasets.load(dataset, root, train=True)
    images, labels = train.images, train.labels
    if train_subset:
        images, labels = images[:train_subset], labels[:train_subset]
    sizes = step_sizes(len(labels), world_size, batch_size)

    # Before the clock: float32, scaled, shuffled, padded like the sampler pads, on the device.
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(labels), generator=generator)
    order = torch.cat([order, order[: sum(sizes) - len(order)]])
    x = images.index_select(0, order).reshape(len(order), -1).to(torch.float32).div_(255).to(dev)
    y = labels.index_select(0, order).to(dev)
    if dev.type == "cuda":
        torch.cuda.synchronize()

    torch.manual_seed(seed)
    model = DeepNeuralNetwork(4, train.num_features, 128, train.num_classes).to(dev)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, fused=True)  # as in ddp_tutorial/train.py
    criterion = torch.nn.CrossEntropyLoss()

    if dev.type == "cuda":
        start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start_event.record()
    started = time.perf_counter()
    running = torch.zeros((), device=dev)
    for _ in range(epochs):
        offset = 0
        for size in sizes:
            batch_x, batch_y = x[offset:offset + size], y[offset:offset + size]  # views: no copy
            offset += size
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(model(batch_x), batch_y)
            loss.backward()
            optimizer.step()
            running += loss.detach()
    if dev.type == "cuda":
        end_event.record()
        torch.cuda.synchronize()
        seconds = start_event.elapsed_time(end_event) / 1000.0  # CUDA events: device time, ms
    else:
        seconds = time.perf_counter() - started
    samples = sum(sizes) * epochs
    return {
        "variant": "bound", "world_size": world_size, "dataset": dataset, "device": str(dev),
        "threads": torch.get_num_threads(), "batch_size": batch_size * world_size, "epochs": epochs,
        "steps_per_epoch": len(sizes), "samples": samples, "train_seconds": seconds,
        "samples_per_second": samples / max(seconds, 1e-9), "mean_loss": float(running) / (len(sizes) * epochs),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bound",
                                     description="Compute bound: one process, data in memory, no DDP.")
    parser.add_argument("--dataset", default="mnist", choices=["mnist", "fashion-mnist"])
    parser.add_argument("--root", required=True)
    parser.add_argument("--world", type=int, default=1, help="mirror the optimizer steps of a run at this world size")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=128, help="per rank of the mirrored run")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (default: all usable cores)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--train-subset", type=int, default=0)
    parser.add_argument("--json", default=None)
    a = parser.parse_args(argv)
    result = run(a.dataset, a.root, a.world, a.epochs, a.batch_size, a.lr, a.threads, a.device, a.train_subset)
    if a.json:
        write_json(a.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
