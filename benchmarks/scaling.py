"""Mode "scaling": the package's throughput and parallel efficiency against world size, and the time
(and optimizer steps) to a target test accuracy with and without ``--scale-lr``.

The time to accuracy trains epoch by epoch, resuming from the package's checkpoint and testing after
every epoch. The figure is :func:`ddp_tutorial.figures.scaling_figure`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import List, Optional

from ddp_tutorial.i18n import t

from .runner import command_for, median, pct, rate, run_command, say, wait_for_idle

TARGET_ACCURACY = {"fashion-mnist": 85.0, "mnist": 97.0}


def measure_scaling_throughput(o, workdir: Path, table: Optional[dict]) -> dict:
    """The package's samples/s at every world size (reusing the table's runs when there are some)."""
    if table is not None:
        runs = {int(w): r for w, r in table["runs"]["package"].items()}
    else:
        runs = {w: [] for w in o.world}
        total = o.repeats * len(o.world)
        n = 0
        for rep in range(o.repeats):
            for world in (o.world if rep % 2 == 0 else list(reversed(o.world))):  # alternate the order
                n += 1
                busy = wait_for_idle(o)
                say(o, t("bench.running", n=n, total=total, variant="package", world=world, rep=rep + 1,
                          busy=pct(busy)))
                out = workdir / f"scaling-w{world}-r{rep}.json"
                runs[world].append(run_command(command_for("package", world, o, out), out, o.run_timeout, busy))
    rows = {}
    base = None
    for world in sorted(runs):
        value = median([r["samples_per_second"] for r in runs[world]])
        if world == min(runs):
            base = value / world  # per-process rate of the smallest world (normally world 1)
        speedup = value / base if base else None
        rows[str(world)] = {"samples_per_second": value, "speedup": speedup,
                            "efficiency": speedup / world if speedup else None, "repeats": len(runs[world])}
    return rows


def time_to_accuracy(o, workdir: Path) -> List[dict]:
    """Train epoch by epoch (resuming from the package's checkpoint), test after each epoch, until the
    target accuracy or ``--max-epochs``. ``--scale-lr`` changes nothing at world size 1, so it runs once there."""
    curves = []
    settings = [(w, s) for w in o.world for s in (False, True) if not (s and w == 1)]
    for world, scale in settings:
        ckpt = workdir / f"tta-w{world}-{'scaled' if scale else 'plain'}"
        curve = {"world_size": world, "scale_lr": scale, "lr": None, "epochs": [], "reached": None}
        seconds = 0.0
        for epoch in range(1, o.max_epochs + 1):
            busy = wait_for_idle(o)
            say(o, t("bench.running", n=epoch, total=o.max_epochs, variant="time-to-accuracy"
                      + (" --scale-lr" if scale else ""), world=world, rep=1, busy=pct(busy)))
            out = ckpt / f"epoch{epoch}.json"
            extra = ["--resume", "--checkpoint-dir", str(ckpt)] + (["--scale-lr"] if scale else [])
            command = command_for("package", world, argparse.Namespace(**{**vars(o), "epochs": epoch}), out, extra,
                                  evaluate=True)
            result = run_command(command, out, o.run_timeout, busy)
            seconds += result["train_seconds"]  # this invocation trained one epoch
            curve["lr"] = result["lr"]
            point = {"epoch": epoch, "steps": epoch * result["steps_per_epoch"], "train_seconds": seconds,
                     "test_accuracy": result["test_accuracy"], "loss": result["epochs"][-1]}
            curve["epochs"].append(point)
            if result["test_accuracy"] >= o.target_accuracy:
                curve["reached"] = point
                break
        curves.append(curve)
    return curves


def print_scaling(o, throughput: dict, curves: List[dict]) -> None:
    print()
    print(t("bench.scaling_title"))
    print(t("bench.scaling_header"))
    for world, row in throughput.items():
        print(f"{world:>12}  {rate(row['samples_per_second']):>10}  {row['speedup']:>7.2f}×  "
              f"{pct(row['efficiency']):>10}")
    print()
    print(t("bench.tta_title", target=o.target_accuracy))
    print(t("bench.tta_header"))
    for c in curves:
        accs = " ".join(f"{p['test_accuracy']:.1f}" for p in c["epochs"])
        lr = f"{c['lr']:g}" + (" " + t("bench.scaled") if c["scale_lr"] else "")
        if c["reached"]:
            r = c["reached"]
            print(f"{c['world_size']:>12}  {lr:<18}  {r['epoch']:>6}  {r['steps']:>5}  "
                  f"{r['train_seconds']:>7.1f}  {accs}")
        else:
            print(f"{c['world_size']:>12}  {lr:<18}  {t('bench.not_reached', epochs=len(c['epochs'])):<30}  {accs}")
