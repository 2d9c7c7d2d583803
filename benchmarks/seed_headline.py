"""The seed's headline, reproduced by a command: 2 "nodes" × 3 processes, batch 128, Adam 1e-3, 2 epochs, MNIST.

The seed tutorial printed, after training on TRUBA's Palamut-cuda partition (2 nodes × 3 GPUs):
per-rank loss sums of 71.6–73.4 (epoch 1) and 21.8–23.3 (epoch 2), and **92.79 %** test accuracy.
This benchmark runs the same recipe through the package's per-node parent, exactly as the seed starts
it — one ``python -m ddp_tutorial.spawn --nnodes 2 --node-rank K --nproc-per-node 3`` per "node", here
both on this machine (``MASTER_ADDR=127.0.0.1`` and a free ``MASTER_PORT``, as the tests start two
nodes) — for several seeds, and beside it the same recipe at world size 1 and with the learning rate
scaled by the linear (× 6) and square-root (× √6) rules. Each run is a fresh set of processes on the
CPU (gloo); the rank-0 JSON of the package gives the test accuracy and every rank's loss sums.

    ddp-tutorial data prepare --dataset mnist --root DATA --from DIR    # or: python scripts/fetch_mnist.py
    python -m benchmarks.seed_headline --root DATA --seeds 0 1 2 \\
        --json benchmarks/results/seed-headline-cpu-2core.json \\
        --figure benchmarks/results/seed-headline-cpu-2core-en.png
    # the figure again, from the recorded JSON, in Turkish (no training):
    DDP_TUTORIAL_LANG=tr python -m benchmarks.seed_headline --redraw benchmarks/results/seed-headline-cpu-2core.json \\
        --figure benchmarks/results/seed-headline-cpu-2core-tr.png
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

from ddp_tutorial.datasets import default_root
from ddp_tutorial.i18n import TutorialError, localise_axes, number, t
from ddp_tutorial.whoami import find_free_port

from .common import load_average, machine, write_json
from .runner import REPO, clean_environment

# What the seed printed (shared/seed/000_80d87b41d3f73e2c.txt), rank by rank.
SEED_PRINTED = {
    "test_accuracy": 92.79,
    "rank_losses": [
        [73.36946105957031, 72.8398208618164, 72.82304382324219, 71.55941009521484, 73.31228637695312,
         72.71366119384766],
        [23.250808715820312, 21.87244415283203, 21.772422790527344, 21.87774085998535, 23.012968063354492,
         22.71541976928711],
    ],
    "nodes": 2, "nproc_per_node": 3, "world_size": 6, "batch_size": 128, "lr": 0.001, "epochs": 2,
    "where": "TRUBA Palamut-cuda, 2 nodes x 3 GPUs, NCCL/gloo, the seed's DataLoader pipeline, no fixed seed",
}
# name → (nodes, processes per node, --scale-lr)
CONFIGS = {
    "seed": (2, 3, "none"),
    "world1": (1, 1, "none"),
    "linear": (2, 3, "linear"),
    "sqrt": (2, 3, "sqrt"),
}
BATCH, LR = 128, 0.001


def node_commands(config: str, o: argparse.Namespace, seed: int, out: Path) -> List[List[str]]:
    """One per-node parent command per "node" (the seed's ``srun -N 2 -n 2 python 01_distributed.py``)."""
    nnodes, nproc, scale = CONFIGS[config]
    commands = []
    for node in range(nnodes):
        command = [sys.executable, "-m", "ddp_tutorial.spawn", "--nnodes", str(nnodes), "--node-rank", str(node),
                   "--nproc-per-node", str(nproc), "--dataset", o.dataset, "--root", str(o.root),
                   "--epochs", str(o.epochs), "--batch-size", str(BATCH), "--lr", str(LR), "--scale-lr", scale,
                   "--seed", str(seed), "--device", "cpu", "--quiet", "--no-progress"]
        if o.train_subset:
            command += ["--train-subset", str(o.train_subset)]
        if o.threads:
            command += ["--threads", str(o.threads)]
        if node == 0:  # global rank 0 lives on node 0 and writes the result
            command += ["--json", str(out)]
        commands.append(command)
    return commands


def run_once(config: str, o: argparse.Namespace, seed: int, workdir: Path) -> dict:
    """Start the nodes together, wait for all of them, return rank 0's result plus the wall time."""
    out = workdir / f"{config}-seed{seed}.json"
    env = clean_environment({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(find_free_port("127.0.0.1"))})
    commands = node_commands(config, o, seed, out)
    logs = [workdir / f"{config}-seed{seed}-node{k}.log" for k in range(len(commands))]
    load_before, started = load_average(), time.perf_counter()
    nodes = []
    for command, log in zip(commands, logs):
        with open(log, "w") as sink:
            nodes.append(subprocess.Popen(command, cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                          start_new_session=True))
    try:
        deadline = started + o.run_timeout
        codes = [node.wait(timeout=max(1.0, deadline - time.perf_counter())) for node in nodes]
    except subprocess.TimeoutExpired:
        codes = None
    finally:
        for node in nodes:  # whatever is left (a timeout, a failed peer): the whole process group
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait()
    command_line = " ".join(commands[0])
    if codes is None:
        raise TutorialError("bench.run_timeout", seconds=o.run_timeout, command=command_line)
    if any(codes) or not out.exists():
        tail = "\n".join(line for log in logs for line in log.read_text().strip().splitlines()[-8:])
        raise TutorialError("bench.run_failed", code=max(codes, key=abs), command=command_line, tail=tail)
    result = json.loads(out.read_text())
    return {
        "config": config, "seed": seed, "nodes": CONFIGS[config][0], "nproc_per_node": CONFIGS[config][1],
        "world_size": result["world_size"], "scale_lr": result["scale_lr"], "lr": result["lr"],
        "batch_size": result["batch_size"], "test_accuracy": result["test_accuracy"],
        "rank_losses": result["rank_losses"], "epoch_mean_losses": result["epochs"],
        "steps_per_epoch": result["steps_per_epoch"], "train_seconds": result["train_seconds"],
        "wall_seconds": round(time.perf_counter() - started, 2), "threads": result.get("threads"),
        "launcher": result.get("launcher"), "load_before": load_before, "load_after": load_average(),
    }


def summarize(runs: List[dict]) -> Dict[str, dict]:
    """Per configuration: the accuracies over the seeds, and the range of every rank's loss sums per epoch."""
    summary = {}
    for config in CONFIGS:
        mine = [r for r in runs if r["config"] == config]
        if not mine:
            continue
        accuracies = [r["test_accuracy"] for r in mine]
        epochs = len(mine[0]["rank_losses"])
        summary[config] = {
            "seeds": [r["seed"] for r in mine],
            "world_size": mine[0]["world_size"], "lr": mine[0]["lr"], "steps_per_epoch": mine[0]["steps_per_epoch"],
            "test_accuracy": accuracies,
            "test_accuracy_mean": round(statistics.mean(accuracies), 3),
            "test_accuracy_min": min(accuracies), "test_accuracy_max": max(accuracies),
            "rank_loss_range": [[round(min(v for r in mine for v in r["rank_losses"][e]), 2),
                                 round(max(v for r in mine for v in r["rank_losses"][e]), 2)] for e in range(epochs)],
            "rank0_losses": [[round(r["rank_losses"][e][0], 2) for e in range(epochs)] for r in mine],
        }
    return summary


def label(config: str) -> str:
    """The configuration's name on the figure (two lines)."""
    return {"seed": t("bench.headline.config_seed"), "world1": t("bench.headline.config_world1"),
            "linear": t("bench.headline.config_linear"), "sqrt": t("bench.headline.config_sqrt")}[config]


def one_line(config: str) -> str:
    return label(config).replace("\n", " ")


def figure(report: dict):
    """Left: test accuracy per configuration (one dot per seed, the mean as a bar, the seed's 92.79 % dashed).
    Right, one panel per epoch: every rank's loss sum for the seed's recipe (dots: these runs, one per seed;
    crosses: the seed's printout)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.6), layout="constrained")
    epochs = min(2, report["epochs"])
    axes = fig.subplot_mosaic([["acc", f"e{e}"] for e in range(epochs)], width_ratios=[1.15, 1])
    left, summary, printed = axes["acc"], report["summary"], report["seed_printed"]
    names = [c for c in CONFIGS if c in summary]
    for x, config in enumerate(names):
        values = summary[config]["test_accuracy"]
        left.scatter([x] * len(values), values, color="tab:blue", alpha=0.7, zorder=3)
        left.hlines(statistics.mean(values), x - 0.25, x + 0.25, color="tab:blue")
        left.annotate(t("bench.headline.mean", value=statistics.mean(values)), (x + 0.27, statistics.mean(values)),
                      va="center", fontsize=8)
    left.axhline(printed["test_accuracy"], color="tab:red", linestyle="--",
                 label=t("bench.headline.printed", value=printed["test_accuracy"]))
    left.set_xticks(range(len(names)), [label(c) for c in names], fontsize=8)
    left.set_xlim(-0.5, len(names) - 0.2)
    low = min([printed["test_accuracy"]] + [v for c in names for v in summary[c]["test_accuracy"]])
    left.set_ylim(bottom=low - 0.4)
    left.set_ylabel(t("bench.headline.accuracy_axis"))
    left.set_title(t("bench.headline.accuracy_title", seeds=len(summary[names[0]]["seeds"]), epochs=report["epochs"]),
                   fontsize=10)
    left.legend(loc="lower right", fontsize=8)
    seed_runs = [r for r in report["runs"] if r["config"] == "seed"]
    for epoch, color in zip(range(epochs), ("tab:green", "tab:purple")):
        ax = axes[f"e{epoch}"]
        for n, run in enumerate(seed_runs):
            ax.scatter(range(len(run["rank_losses"][epoch])), run["rank_losses"][epoch], color=color, alpha=0.5,
                       label=t("bench.headline.measured_epoch", epoch=epoch + 1) if n == 0 else None)
        ax.scatter(range(6), printed["rank_losses"][epoch], color="black", marker="x", s=50,
                   label=t("bench.headline.printed_epoch", epoch=epoch + 1))
        ax.set_ylabel(t("bench.headline.loss_axis", steps=seed_runs[0]["steps_per_epoch"] if seed_runs else "?"),
                      fontsize=8)
        ax.legend(fontsize=7, ncols=2, loc="upper center")
        ax.margins(y=0.35)
        if epoch == 0:
            ax.set_title(t("bench.headline.loss_title"), fontsize=10)
    axes[f"e{epochs - 1}"].set_xlabel(t("bench.headline.rank_axis"))
    return localise_axes(fig)  # 96,5 and 60.000 on a Turkish figure


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.seed_headline", description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="mnist")
    p.add_argument("--root", type=Path, default=default_root())
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--train-subset", type=int, default=None, help="quick runs only (the recipe uses all 60 000)")
    p.add_argument("--threads", type=int, default=None, help="default: the package's thread policy")
    p.add_argument("--run-timeout", type=float, default=900.0)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--figure", type=Path, default=None)
    p.add_argument("--redraw", type=Path, default=None, help="draw --figure from this recorded JSON; no training")
    p.add_argument("--append", action="store_true",
                   help="add these seeds' runs to those already recorded in --json (same recipe), then summarise all")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> int:
    o = parse(argv)
    if o.redraw:
        report = json.loads(o.redraw.read_text())
    else:
        workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"seed-headline-{os.getpid()}"
        workdir.mkdir(parents=True, exist_ok=True)
        runs, total, started = [], len(o.seeds) * len(o.configs), time.perf_counter()
        for seed in o.seeds:  # seed-major: every configuration meets the same machine conditions in turn
            for config in o.configs:
                if not o.quiet:
                    print(t("bench.headline.running", n=len(runs) + 1, total=total, config=one_line(config),
                            seed=seed), flush=True)
                run = run_once(config, o, seed, workdir)
                runs.append(run)
                if not o.quiet:
                    print(t("bench.headline.row", accuracy=run["test_accuracy"], lr=run["lr"],
                            first="; ".join(number(v, decimals=2) for v in run["rank_losses"][0]),
                            last="; ".join(number(v, decimals=2) for v in run["rank_losses"][-1]),
                            seconds=run["wall_seconds"]), flush=True)
        commands = ["python -m benchmarks.seed_headline " + " ".join(sys.argv[1:] if argv is None else argv)]
        seconds = round(time.perf_counter() - started, 1)
        if o.append and o.json and o.json.exists():  # an earlier invocation's seeds come first
            earlier = json.loads(o.json.read_text())
            runs = [r for r in earlier["runs"] if r["seed"] not in o.seeds] + runs
            commands = earlier.get("commands", [earlier.get("command")]) + commands
            seconds += earlier.get("total_seconds", 0)
        report = {
            "benchmark": "seed_headline",
            "commands": commands,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "dataset": o.dataset, "epochs": o.epochs, "batch_size": BATCH, "base_lr": LR,
            "train_subset": o.train_subset, "device": "cpu", "backend": "gloo",
            "total_seconds": seconds,
            "machine": machine(), "seed_printed": SEED_PRINTED, "runs": runs, "summary": summarize(runs),
            "lr_rules": {"linear": 6, "sqrt": round(math.sqrt(6), 4)},
        }
        if o.json:
            write_json(o.json, report)
            print(t("bench.json_written", path=o.json))
    if not o.quiet:
        for config, row in sorted(report["summary"].items(), key=lambda item: list(CONFIGS).index(item[0])):
            print(t("bench.headline.summary", config=one_line(config), world=row["world_size"], lr=row["lr"],
                    mean=row["test_accuracy_mean"], low=row["test_accuracy_min"], high=row["test_accuracy_max"],
                    seeds=len(row["seeds"])))
    if o.figure:
        o.figure.parent.mkdir(parents=True, exist_ok=True)
        figure(report).savefig(o.figure, dpi=110)
        print(t("bench.figure_written", path=o.figure))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TutorialError as error:
        print(error, file=sys.stderr)
        sys.exit(2)
