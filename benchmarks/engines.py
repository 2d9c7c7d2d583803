"""How long from ``ipp.train(...)`` to the first training step, on local ipyparallel engines?

The time an attendee waits in 03/04 before the first loss line is not training: it is engine
start, ``import torch`` on every engine, loading the data set, forming the process group. This
script measures each case in fresh engine clusters (``--repeats`` times, alternating):

* ``start`` — ``ipp.start(n)``: the engines start and register (the notebook's ``[*]``);
* ``cold`` — ``ipp.train`` right after ``ipp.start``: the engines still import torch and
  load the data (what the first call costs without a pause; equal to the old code, which
  imported and loaded inside the first call);
* ``after_pause`` — ``ipp.train`` after the attendee read the next cell: the warm-up that
  ``ipp.start`` sends (imports) has finished meanwhile;
* ``again_reload`` — a later ``ipp.train`` on the same engines with the data cache emptied
  first: what every later cell cost before the per-engine data cache;
* ``again`` — a later ``ipp.train`` on the same engines as the package does it now (data
  kept in each engine's memory).

"To the first step" is the call's wall time minus the training's own time (``train_seconds``,
measured by rank 0 from just before the first step); training is a short run
(``--subset`` images, no test) so the rest of the call is small.

    python -m benchmarks.engines --n 2 --repeats 3 --json runs/engines.json

``--checks`` measures instead what an attendee waits for an exercise's ``check()`` in 03 and 04
(the solution, so every check passes): the first check of a notebook starts the two engines, every
later one reuses them (issue 26 asks ≤ 3 s for those)::

    python -m benchmarks.engines --checks --repeats 3 --json runs/engine-checks.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from ddp_tutorial import ipp
from ddp_tutorial.config import TrainConfig

from .common import write_json

CASES = ("start", "cold", "after_pause", "again_reload", "again")


def forget_data(env) -> int:
    """On an engine: empty the per-engine data cache (the behaviour before the cache)."""
    from ddp_tutorial.ipp import remote
    return remote.forget_data()


def ready(env) -> bool:
    """Queued behind the warm-up on each engine: returns once the warm-up has finished."""
    return True


def to_first_step(config: TrainConfig, n: int) -> float:
    began = time.perf_counter()
    results = ipp.train(config, n=n, keep=True)
    return time.perf_counter() - began - results[0].train_seconds


def one_round(config: TrainConfig, n: int, pause: float) -> dict:
    row = {}
    try:
        began = time.perf_counter()
        ipp.start(n)
        row["start"] = time.perf_counter() - began
        row["cold"] = to_first_step(config, n)
        ipp.run(forget_data, n=n, keep=True)
        row["again_reload"] = to_first_step(config, n)
        row["again"] = to_first_step(config, n)
    finally:
        ipp.stop()
    try:
        ipp.start(n)
        ipp.run(ready, n=n, keep=True)  # waits for the warm-up …
        time.sleep(pause)               # … and the attendee reads on
        row["after_pause"] = to_first_step(config, n)
    finally:
        ipp.stop()
    return row


CHECKED = ("mean_over_ranks", "average_gradients", "train_ddp_steps", "evaluate_rank0")


def check_round() -> dict:
    """Seconds of each exercise's ``check()`` with its solution, in the notebooks' order, starting
    with no engines running; the first starts them, the others reuse them."""
    from ddp_tutorial import exercises
    row = {}
    try:
        for name in CHECKED:
            exercise, namespace = exercises.get(name), {}
            exec(exercise.code, namespace)  # the solution, as the attendee would have written it
            began = time.perf_counter()
            outcome = exercise.evaluate(namespace[name])
            row[name] = time.perf_counter() - began
            if outcome.status != "correct":
                raise SystemExit(f"{name}: the solution did not pass: {outcome.text}")
    finally:
        ipp.stop()
    return row


def checks(args) -> int:
    rows = []
    for repeat in range(args.repeats):
        rows.append(check_round())
        print(f"round {repeat + 1}: " + ", ".join(f"{k} {rows[-1][k]:.2f} s" for k in CHECKED), flush=True)
    later = [r[k] for r in rows for k in CHECKED[1:]]
    medians = {k: statistics.median(r[k] for r in rows) for k in CHECKED}
    print(f"\nseconds per check() over {len(rows)} rounds (the first starts the engines):")
    for k in CHECKED:
        print(f"  {k:<18} {medians[k]:6.2f}   ({min(r[k] for r in rows):.2f}–{max(r[k] for r in rows):.2f})")
    print(f"  every later check: max {max(later):.2f} s")
    if args.json:
        write_json(args.json, {"kind": "checks", "rounds": rows, "medians": medians, "later_max": max(later)})
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engines", description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2, help="engines (world size)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--subset", type=int, default=4096, help="training images per run")
    parser.add_argument("--pause", type=float, default=2.0, help="seconds between the warm-up and the call")
    parser.add_argument("--dataset", default=None)
    parser.add_argument("--root", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--checks", action="store_true",
                        help="time the exercise checks of 03 and 04 instead (first vs later)")
    args = parser.parse_args(argv)
    if args.checks:
        return checks(args)
    options = {"dataset": args.dataset, "root": args.root}
    config = TrainConfig(**{k: v for k, v in options.items() if v}, epochs=1, train_subset=args.subset,
                         evaluate=False, progress=False, quiet=True)
    rows = []
    for repeat in range(args.repeats):
        rows.append(one_round(config, args.n, args.pause))
        print(f"round {repeat + 1}: " + ", ".join(f"{k} {rows[-1][k]:.2f} s" for k in CASES), flush=True)
    medians = {k: statistics.median(r[k] for r in rows) for k in CASES}
    print(f"\nworld {args.n}, medians over {len(rows)} rounds (seconds to the first step):")
    for k in CASES:
        spread = f"{min(r[k] for r in rows):.2f}–{max(r[k] for r in rows):.2f}"
        print(f"  {k:<13} {medians[k]:6.2f}   ({spread})")
    if args.json:
        write_json(args.json, {"n": args.n, "subset": args.subset, "pause": args.pause, "rounds": rows,
                               "medians": medians})
    return 0


if __name__ == "__main__":
    sys.exit(main())
