"""What does DDP's communication cost per step, next to the step's own computation?

Runs ``--world`` processes (gloo on the CPU, as on this machine) that take turns, round after
round, at four ways of doing the same training step on a batch of 128 per rank:

* ``compute`` — forward, backward, Adam, no communication (every rank alone, all at once:
  what the cores can do in parallel);
* ``ddp`` — the same through ``DistributedDataParallel``: gradients all-reduced in backward;
* ``allreduce`` — only the all-reduce of a tensor as large as the gradient (539 KB), back to back;
* ``tiny`` — the all-reduce of one number: the pure latency of a round trip through all ranks
  (what the package's per-step "should we stop?" question used to cost);
* ``ddp_buckets`` — DDP with small buckets (``bucket_cap_mb=0.1``): the last layers' gradients
  travel while the first layer's backward still computes (overlap);
* ``ddp_view`` — DDP with ``gradient_as_bucket_view=True`` (no copy of the gradients into the bucket).

Medians over the rounds, in milliseconds per step (per call). Alternating rounds share the
same load, so the comparison holds on a busy machine too, while the absolute times do not.

From ``compute`` (c) and ``allreduce`` (a) follow the limits of world W against one rank alone:
W·c / (c + a) without any overlap of communication and computation, W·c / max(c, a) with perfect
overlap; ``ddp`` gives where DDP itself stands (W·c / ddp).

    python -m benchmarks.comm --world 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ddp_tutorial.whoami import find_free_port
from ddp_tutorial.i18n import number, t
from ddp_tutorial.model import DeepNeuralNetwork
from ddp_tutorial.supervisor import run_processes

from .common import write_json
from .common import COMM_LABELS

KINDS = ("compute", "ddp", "allreduce", "tiny", "ddp_buckets", "ddp_view")


def _rank(rank: int, world: int, port: int, rounds: int, steps: int, batch: int, out: str) -> None:
    torch.set_num_threads(1)  # the package's policy when the ranks share the cores
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    x, y = torch.rand(batch, 784), torch.randint(0, 10, (batch,))
    criterion = torch.nn.CrossEntropyLoss()

    def setup(wrap: bool, **ddp_options):
        torch.manual_seed(0)
        model = DeepNeuralNetwork(4, 784, 128, 10)
        model = DistributedDataParallel(model, **ddp_options) if wrap else model
        return model, torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)  # as in train.py

    plain, ddp = setup(False), setup(True)
    buckets, view = setup(True, bucket_cap_mb=0.1), setup(True, gradient_as_bucket_view=True)
    gradient = torch.ones(sum(p.numel() for p in plain[0].parameters()))
    one = torch.zeros(1)

    def step(model_and_optimizer):
        model, optimizer = model_and_optimizer
        optimizer.zero_grad(set_to_none=True)
        criterion(model(x), y).backward()
        optimizer.step()

    work = {"compute": lambda: step(plain), "ddp": lambda: step(ddp),
            "allreduce": lambda: dist.all_reduce(gradient), "tiny": lambda: dist.all_reduce(one),
            "ddp_buckets": lambda: step(buckets), "ddp_view": lambda: step(view)}
    times = {kind: [] for kind in KINDS}
    for r in range(rounds):
        for kind in (KINDS if r % 2 == 0 else KINDS[::-1]):
            for _ in range(3):  # warm-up
                work[kind]()
            dist.barrier()
            started = time.perf_counter()
            for _ in range(steps):
                work[kind]()
            times[kind].append((time.perf_counter() - started) / steps * 1e3)
    if rank == 0:
        result = {kind: statistics.median(v) for kind, v in times.items()}
        result.update(world_size=world, batch_per_rank=batch, gradient_bytes=gradient.numel() * 4, rounds=rounds)
        result.update(limits(result))
        write_json(out, result)
    dist.destroy_process_group()


def limits(result: dict) -> dict:
    """What communication allows world W, as speed-ups over one rank alone (samples/s of W ranks
    divided by those of one rank computing without communication)."""
    w, c, a = result["world_size"], result["compute"], result["allreduce"]
    return {
        "limit_no_overlap": w * c / (c + a),     # compute, then all-reduce, one after the other
        "limit_overlap": w * c / max(c, a),      # the all-reduce entirely hidden behind the backward pass
        "ddp_speedup": w * c / result["ddp"],    # where DDP stands (default buckets)
        "ddp_buckets_speedup": w * c / result["ddp_buckets"],
        "ddp_view_speedup": w * c / result["ddp_view"],
    }


def measure(world: int = 2, rounds: int = 12, steps: int = 40, batch: int = 128) -> dict:
    import json

    with tempfile.TemporaryDirectory() as folder:
        out = str(Path(folder) / "comm.json")
        code = run_processes(world, _rank, (world, find_free_port(), rounds, steps, batch, out))
        if code != 0:
            raise RuntimeError(f"the communication benchmark failed (exit code {code})")
        return json.loads(Path(out).read_text())


def print_result(result: dict) -> None:
    print(t("bench.comm.title", world=result["world_size"], batch=result["batch_per_rank"],
            gradient=result["gradient_bytes"] // 1024, rounds=result["rounds"]))
    for kind in KINDS:
        if kind in result:
            print(f"  {t(COMM_LABELS[kind]):<44} {result[kind]:7.3f} ms")
    print(t("bench.comm.summary", overhead=result["ddp"] - result["compute"], compute=result["compute"],
            world=result["world_size"], limit=result["world_size"] * result["compute"] / result["ddp"]))
    if "limit_overlap" in result:
        n = {key: number(result[key], decimals=2) for key in
             ("limit_no_overlap", "limit_overlap", "ddp_speedup", "ddp_buckets_speedup", "ddp_view_speedup")}
        print(t("bench.comm.limits", world=result["world_size"], no_overlap=n["limit_no_overlap"],
                overlap=n["limit_overlap"], ddp=n["ddp_speedup"], buckets=n["ddp_buckets_speedup"],
                view=n["ddp_view_speedup"]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.comm", description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    result = measure(args.world, args.rounds, args.steps, args.batch_size)
    print_result(result)
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
