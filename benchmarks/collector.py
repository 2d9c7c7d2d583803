"""What the cycle collector policy of ``ddp_tutorial/collector.py`` saves: each case run in turn with it and
without it, the machine's busy CPU-s counted for each run (from ``/proc/stat``: the server the ranks are forked
from, which no one waits for, is counted too; keep the machine otherwise idle).

    python -m benchmarks.collector [--repeats 6] [--cases import gpu train spawn] [--json out.json]

The cases, each once as the package runs it and once as plain Python runs the same code:

* ``import``: ``import torch, torch._dynamo`` and exit — with ``collector.pause()`` before and ``resume()`` after,
  and without;
* ``gpu``: ``python -m ddp_tutorial.gpu`` (the report, torch imported) against the same module run through
  ``runpy`` from ``python -c`` (a command line the package does not treat as its own command);
* ``train``: ``python -m ddp_tutorial.train`` on 512 Fashion-MNIST images, one epoch, world 1, likewise;
* ``spawn``: ``python -m ddp_tutorial.spawn --nproc-per-node 2``, likewise; without the policy the server the
  ranks are forked from is told to leave ``server_start`` out of its imports, so it imports torch as plain Python.

The median of each case's pairs is printed: CPU-s with the policy, without it, and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .common import _cpu_times, machine, write_json

REPO = Path(__file__).resolve().parents[1]
TINY = ["--epochs", "1", "--train-subset", "512", "--no-eval", "--quiet", "--dataset", "fashion-mnist"]

# Without the policy the ranks' server imports torch as plain Python does: server_start is left out of its imports.
PLAIN_SERVER = ("import multiprocessing.forkserver as f; _set = f.set_forkserver_preload; "
                "f.set_forkserver_preload = lambda names: _set([n for n in names if n != 'ddp_tutorial.server_start'])")


def _runpy(module: str, args, before: str = "pass") -> list:
    """``module`` run as ``__main__`` by plain Python: ``python -c`` is no command of the package's."""
    code = f"{before}; import runpy, sys; sys.argv = [{module!r}, *{list(args)!r}]; runpy.run_module({module!r}, " \
           "run_name='__main__', alter_sys=True)"
    return [sys.executable, "-c", code]


def cases(root: str) -> dict:
    """name → (with the policy, without it): two command lines."""
    data = ["--root", root]
    return {
        "import": ([sys.executable, "-c", "from ddp_tutorial import collector; collector.pause(); "
                    "import torch, torch._dynamo; collector.resume()"],
                   [sys.executable, "-c", "import torch, torch._dynamo"]),
        "gpu": ([sys.executable, "-m", "ddp_tutorial.gpu"], _runpy("ddp_tutorial.gpu", [])),
        "train": ([sys.executable, "-m", "ddp_tutorial.train", *TINY, *data],
                  _runpy("ddp_tutorial.train", [*TINY, *data])),
        "spawn": ([sys.executable, "-m", "ddp_tutorial.spawn", "--nproc-per-node", "2", *TINY, *data],
                  _runpy("ddp_tutorial.spawn", ["--nproc-per-node", "2", *TINY, *data], PLAIN_SERVER)),
    }


def busy_seconds(command: list, env: dict) -> float:
    """The machine's busy CPU-s while ``command`` runs (and half a second after: a server ending)."""
    before = _cpu_times()
    done = subprocess.run(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)[:200]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    time.sleep(0.5)
    after = _cpu_times()
    return (after[0] - before[0]) / os.sysconf("SC_CLK_TCK")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.collector", description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=6, help="pairs per case (default 6)")
    parser.add_argument("--cases", nargs="+", default=["import", "gpu", "train", "spawn"],
                        choices=["import", "gpu", "train", "spawn"])
    parser.add_argument("--root", default=os.environ.get("DDP_TUTORIAL_ROOT", str(REPO / ".data")),
                        help="where Fashion-MNIST is staged (train, spawn)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if _cpu_times() is None:
        print("benchmarks.collector: needs /proc/stat (Linux)", file=sys.stderr)
        return 2
    env = dict(os.environ, DDP_TUTORIAL_ROOT=args.root)
    table = {}
    for name in args.cases:
        paused, plain = cases(args.root)[name]
        busy_seconds(plain, env)  # one run unrecorded: the files in the page cache
        runs = [(busy_seconds(paused, env), busy_seconds(plain, env)) for _ in range(args.repeats)]
        row = {"with": statistics.median(a for a, _ in runs), "without": statistics.median(b for _, b in runs),
               "ratio": statistics.median(a / b for a, b in runs), "pairs": [list(r) for r in runs]}
        table[name] = row
        print(f"{name:7s} {row['with']:5.2f} CPU-s with the policy, {row['without']:5.2f} without: "
              f"× {row['ratio']:.2f} (median of {args.repeats} pairs)", flush=True)
    if args.json:
        write_json(args.json, {"machine": machine(), "repeats": args.repeats, "cases": table})
    return 0


if __name__ == "__main__":
    sys.exit(main())
