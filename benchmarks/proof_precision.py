"""How far notebook 08's proof is from zero, in float32 and in float64, on each vector path of the CPU.

    python -m benchmarks.proof_precision            # every ATEN_CPU_CAPABILITY this CPU has
    python -m benchmarks.proof_precision --json out.json

08's proof: two ranks × 32 samples with DDP (the checklist's solution, ``train_ddp``, under a
torchrun-style environment on gloo) against one process replaying the union of both ranks'
batches, 512 samples of the training set, one epoch, SGD lr 0.1. Printed per capability and type:

* ``gap``: the largest weight difference between the two (what 08 compares);
* ``mistake``: the same against a replay that leaves rank 1's batch out of every step — the size of
  a real mistake, for the tolerance's other side.

``measure(..., replayed=("float64",))`` replays only those types (the tests check float64's figures and
only the weights' type of the float32 run): the other types get ``weights_dtype`` and ``ranks_equal``.

Each capability runs in its own interpreter (torch reads ``ATEN_CPU_CAPABILITY`` when it starts;
a value above what the CPU has falls back to the CPU's own). The figures in 08's text and in
``ddp_tutorial.exercises.capstone.EXACT`` come from this command. Needs a staged MNIST or
Fashion-MNIST in ``--root`` (default: ``DDP_TUTORIAL_ROOT``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

LIMIT, BATCH, LR = 512, 32, 0.1   # as notebook 08's sections 3–5
DTYPES = ("float32", "float64")


def capabilities() -> list:
    """The ATEN_CPU_CAPABILITY values this CPU can run: default, avx2, avx512 (x86 flags)."""
    flags = ""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        pass
    found = ["default"]
    if " avx2" in flags:
        found.append("avx2")
    if " avx512f" in flags and " avx512bw" in flags and " avx512vl" in flags and " avx512dq" in flags:
        found.append("avx512")
    return found


def _rank(rank: int, ports: list, root: str, folder: str) -> None:
    """One rank of the DDP run (torch.multiprocessing.spawn's target): float32, then float64, each
    through a torchrun-style environment and its own port (the solution creates its own group)."""
    import torch

    from ddp_tutorial.exercises import capstone
    sys.path.insert(0, str(capstone.SCRIPT.parent))           # train_ddp imports cnn_single
    env = argparse.Namespace(rank=rank, local_rank=rank, world_size=2, local_world_size=2)
    train_ddp = capstone.solution_function()
    for dtype, port in zip(DTYPES, ports):
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        run = capstone.in_float64(train_ddp) if dtype == "float64" else train_ddp
        result = run(env, root, LIMIT, 1, BATCH, LR, save=os.path.join(folder, f"{dtype}-{rank}.pt"))
        torch.save({"batches": result["batches"], "weights": result["weights"]},
                   os.path.join(folder, f"result-{dtype}-{rank}.pt"))


def measure_here(root: str, replayed=DTYPES) -> dict:
    """This interpreter's capability: {dtype: {"gap": …, "mistake": …}} (both figures for the types in
    ``replayed``; every type's ``weights_dtype`` and ``ranks_equal``)."""
    import torch
    import torch.multiprocessing as mp

    from ddp_tutorial.exercises import capstone
    from ddp_tutorial.whoami import find_free_port
    with tempfile.TemporaryDirectory(prefix="proof-precision-") as folder:
        ports = [find_free_port(), find_free_port()]
        mp.spawn(_rank, args=(ports, root, folder), nprocs=2, join=True)
        found = {}
        for dtype in DTYPES:
            r0, r1 = (torch.load(os.path.join(folder, f"result-{dtype}-{rank}.pt")) for rank in (0, 1))
            found[dtype] = {"weights_dtype": str(r0["weights"].dtype).replace("torch.", ""),
                            "ranks_equal": bool(torch.equal(r0["weights"], r1["weights"]))}
            if dtype not in replayed:
                continue
            replay = capstone.in_float64(capstone.replay) if dtype == "float64" else capstone.replay
            same = replay(root, LIMIT, LR, [r0["batches"], r1["batches"]])
            wrong = replay(root, LIMIT, LR, [r0["batches"]])  # a mistake: rank 1's batch left out
            found[dtype].update(gap=(r0["weights"] - same).abs().max().item(),
                                mistake=(r0["weights"] - wrong).abs().max().item())
        return found


def measure(capability: str, root: str, replayed=DTYPES) -> dict:
    """``measure_here`` in a fresh interpreter under ``ATEN_CPU_CAPABILITY=capability``."""
    code = ("import json, sys; from benchmarks.proof_precision import measure_here; "
            "print('RESULT ' + json.dumps(measure_here(sys.argv[1], sys.argv[2:])))")
    env = dict(os.environ, ATEN_CPU_CAPABILITY=capability)
    done = subprocess.run([sys.executable, "-c", code, root, *replayed], env=env, capture_output=True, text=True,
                          timeout=600, cwd=Path(__file__).resolve().parent.parent)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"proof_precision: {capability} failed (rc {done.returncode}):\n{done.stdout}{done.stderr}")
    return json.loads(lines[-1][len("RESULT "):])


def main(argv=None) -> int:
    from ddp_tutorial.datasets import default_root
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=str(default_root()), help="the staged data (default: %(default)s)")
    parser.add_argument("--capability", action="append", choices=["default", "avx2", "avx512"],
                        help="only these (repeatable; default: every one this CPU has)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    figures = {}
    print(f"{'capability':<11} {'type':<8} {'gap':>9} {'mistake':>9}  ranks equal")
    for capability in args.capability or capabilities():
        figures[capability] = measure(capability, args.root)
        for dtype, row in figures[capability].items():
            print(f"{capability:<11} {dtype:<8} {row['gap']:9.1e} {row['mistake']:9.1e}  {row['ranks_equal']}")
    if args.json:
        from ddp_tutorial.atomic import write_text
        write_text(args.json, json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
