"""Where does a training step's time go? ``ddp_tutorial.train`` under ``torch.profiler``.

Runs the package's training function in ``--world`` processes (through the package's own
process supervisor, as ``ddp-tutorial train`` does), each inside ``torch.profiler``, and
prints rank 0's operators sorted by their own CPU time, then a summary by kind of work:

* ``compute`` — forward, backward and the Adam step (``aten::addmm``, ``aten::mm``, …);
* ``data`` — cutting the batch out of the in-memory set and converting it
  (``aten::index_select``, ``aten::to``/``_to_copy``, ``aten::div_``);
* ``communication`` — DDP's gradient all-reduce and the other collectives (``gloo:*``,
  ``c10d::*``), including the time a rank *waits* for the slower one.

The profiler adds its own overhead to every operator (some µs each), so the absolute
times are larger than in an unprofiled run; the shares are what to read.

    python -m benchmarks.profile --dataset fashion-mnist --root /tmp/fm --world 2 --train-subset 20000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from ddp_tutorial import atomic
from ddp_tutorial.config import TrainConfig
from ddp_tutorial.whoami import find_free_port, resolve_environment
from ddp_tutorial.i18n import t
from ddp_tutorial.supervisor import run_processes

from .common import PROFILE_LABELS

KINDS = {
    "communication": ("gloo", "c10d", "nccl", "allreduce", "all_reduce", "all_gather", "barrier", "broadcast"),
    "data": ("aten::index_select", "aten::to", "aten::_to_copy", "aten::copy_", "aten::div_", "aten::reshape",
             "aten::split", "aten::as_strided"),
}


def kind_of(name: str) -> str:
    lowered = name.lower()
    if any(key in lowered for key in KINDS["communication"]):
        return "communication"
    if any(name.startswith(key) for key in KINDS["data"]):
        return "data"
    return "compute"


def _profiled_rank(local_rank: int, config: TrainConfig, world: int, outdir: str, rows: int) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from ddp_tutorial.train import train

    env = resolve_environment(local_rank=local_rank, nproc_per_node=world)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        result = train(config, env)
    averages = prof.key_averages()
    shares = {}
    for event in averages:
        if event.key.startswith(("ProfilerStep", "Optimizer.", "DistributedDataParallel", "autograd::")):
            continue  # wrappers: their time is counted in the operators they call
        shares[kind_of(event.key)] = shares.get(kind_of(event.key), 0.0) + event.self_cpu_time_total
    total = sum(shares.values()) or 1.0
    lines = [t("bench.profile.rank", rank=env.rank, rate=result.samples_per_second, threads=torch.get_num_threads(),
               steps=result.steps_per_epoch)]
    lines += [t("bench.profile.share", kind=t(PROFILE_LABELS[kind]), pct=100 * seconds / total)
              for kind, seconds in sorted(shares.items(), key=lambda kv: -kv[1])]
    table = averages.table(sort_by="self_cpu_time_total", row_limit=rows)
    atomic.write_text(Path(outdir, f"rank{env.rank}.txt"), "\n".join(lines) + "\n\n" + table + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="fashion-mnist", choices=["mnist", "fashion-mnist"])
    parser.add_argument("--root", required=True)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--train-subset", type=int, default=20000)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--rows", type=int, default=15, help="operators shown for rank 0")
    args = parser.parse_args(argv)
    config = TrainConfig(dataset=args.dataset, root=args.root, epochs=args.epochs, train_subset=args.train_subset,
                         threads=args.threads, evaluate=False, quiet=True, progress=False, device="cpu").validate()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(find_free_port(os.environ["MASTER_ADDR"]))
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # the profiler's own log lines: errors only
    with tempfile.TemporaryDirectory() as outdir:
        code = run_processes(args.world, _profiled_rank, (config, args.world, outdir, args.rows))
        if code != 0:
            return code
        for rank in range(args.world):
            text = Path(outdir, f"rank{rank}.txt").read_text()
            print(text if rank == 0 else text.split("\n\n")[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
