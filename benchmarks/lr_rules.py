"""Which learning-rate rule wins, for Adam and for SGD? (06's "measure and choose", issue 26 R6)

06 grows the global batch 6× (1 × 128 → 768) and asks how the learning rate should follow: keep it
(``none``), the linear rule (× 6, Goyal et al. 2017, derived for SGD with momentum) or the square-root
rule (× √6, the usual heuristic for Adam). This script trains each rule with both optimizers the
package offers (``--optimizer adam``: the seed's; ``sgd``: momentum 0.9) for several seeds and
records the test accuracy after the same number of epochs, beside the 1 × 128 reference.

The global batch of 768 is formed in one process (batch 768): 03 shows that DDP at world W × B
computes the same step as one process with batch W × B (bit for bit at world 2), so the rules
compare the same way at world 6 × 128 — at a fraction of the time on a 2-core machine. The
package's real 2 × 3 runs of the Adam case are in ``benchmarks.seed_headline`` (section 7d).

    python -m benchmarks.lr_rules --root .data --seeds 0 1 2 --json benchmarks/results/lr-rules-mnist.json
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

from ddp_tutorial.config import TrainConfig
from ddp_tutorial.train import train

from .common import machine, write_json

BASE_LR = {"adam": 0.001, "sgd": 0.01}   # each optimizer's usual rate for a batch of 128
RULES = {"none": lambda k: 1.0, "linear": lambda k: float(k), "sqrt": math.sqrt}


def one(optimizer: str, batch: int, lr: float, seed: int, args) -> float:
    config = TrainConfig(dataset=args.dataset, root=args.root, epochs=args.epochs, batch_size=batch, lr=lr,
                         optimizer=optimizer, seed=seed, quiet=True, progress=False)
    return train(config).test_accuracy


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lr_rules", description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--root", default=".data")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--factor", type=int, default=6, help="how many times the global batch grows (06: 6)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    began = time.time()
    rows = []
    for optimizer, base in BASE_LR.items():
        cases = [("reference", 128, base)] + [(rule, 128 * args.factor, base * scale(args.factor))
                                              for rule, scale in RULES.items()]
        for case, batch, lr in cases:
            accuracies = [one(optimizer, batch, lr, seed, args) for seed in args.seeds]
            rows.append({"optimizer": optimizer, "rule": case, "batch": batch, "lr": lr,
                         "accuracy": accuracies, "mean": statistics.mean(accuracies)})
            print(f"{optimizer:<4} {case:<9} batch {batch:<4} lr {lr:<8.5g} "
                  + " ".join(f"{a:5.2f}" for a in accuracies) + f"  mean {rows[-1]['mean']:.2f} %", flush=True)
    winners = {}
    for optimizer in BASE_LR:
        scaled = [r for r in rows if r["optimizer"] == optimizer and r["rule"] != "reference"]
        best = max(scaled, key=lambda r: r["mean"])
        winners[optimizer] = best["rule"]
        print(f"{optimizer}: best rule at batch {best['batch']}: {best['rule']} ({best['mean']:.2f} %)")
    if args.json:
        write_json(args.json, {"dataset": args.dataset, "epochs": args.epochs, "factor": args.factor,
                               "seeds": args.seeds, "base_lr": BASE_LR, "rows": rows, "winners": winners,
                               "seconds": round(time.time() - began, 1), "machine": machine()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
