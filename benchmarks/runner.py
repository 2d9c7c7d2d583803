"""Running one pipeline of the benchmark in fresh processes, and summarising repeated runs.

Three pipelines are measured on the same data (see :mod:`benchmarks.throughput`):
``seed`` (:mod:`benchmarks.seed_pipeline`), ``package`` (``ddp_tutorial.train`` through
``python -m ddp_tutorial.spawn``) and ``bound`` (:mod:`benchmarks.bound`). Every run is a fresh
set of processes; the JSON it writes is read back with the wall time and the load around it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from ddp_tutorial.i18n import TutorialError, t
from ddp_tutorial.threads import threads_for as package_threads

from .common import busy_fraction, load_average

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ("seed", "package", "bound")
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                      "MASTER_PORT", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NPROCS", "SLURM_NTASKS")


def clean_environment(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Our environment without a launcher's variables (they would confuse the runs). The children run
    from the repository root (``cwd``), so ``python -m benchmarks.…`` finds this folder."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for name in LAUNCHER_VARIABLES:
        env.pop(name, None)
    env.update(extra or {})
    return env


def threads_for(variant: str, world: int, o: argparse.Namespace) -> int:
    """Intra-op threads per process: ``--threads``, else the package's policy
    (:func:`ddp_tutorial.threads.threads_for`; the bound is one process)."""
    return o.threads or package_threads(1 if variant == "bound" else world)


def command_for(variant: str, world: int, o: argparse.Namespace, out: Path, extra=(),
                evaluate=False) -> List[str]:
    """The command line that runs ``variant`` at world size ``world`` and writes its result to ``out``
    (without the test at the end unless ``evaluate``; the bound never tests)."""
    common = ["--dataset", o.dataset, "--root", str(o.root), "--epochs", str(o.epochs),
              "--batch-size", str(o.batch_size)]
    if o.train_subset:
        common += ["--train-subset", str(o.train_subset)]
    threads = threads_for(variant, world, o)
    if variant == "seed":
        return [sys.executable, "-m", "benchmarks.seed_pipeline", *common, "--world", str(world),
                "--threads", str(threads), "--device", o.device, "--json", str(out),
                *([] if evaluate else ["--no-eval"])]
    if variant == "bound":
        return [sys.executable, "-m", "benchmarks.bound", *common, "--world", str(world),
                "--threads", str(threads), "--device", o.device, "--json", str(out)]
    command = [sys.executable, "-m", "ddp_tutorial.spawn", "--nproc-per-node", str(world), *common,
               "--device", o.device, "--quiet", "--no-progress", "--json", str(out)]
    if not evaluate:
        command.append("--no-eval")
    if o.threads:  # otherwise the package's own policy
        command += ["--threads", str(o.threads)]
    return command + list(extra)


def wait_for_idle(o) -> Optional[float]:
    """The CPUs' busy share just before a run; with ``--wait-idle F`` first wait (at most
    ``--wait-max`` seconds) until other work leaves them below F busy."""
    busy = busy_fraction()
    deadline = time.monotonic() + o.wait_max
    while o.wait_idle is not None and busy is not None and busy > o.wait_idle and time.monotonic() < deadline:
        time.sleep(2.0)
        busy = busy_fraction()
    return busy


def run_command(command: List[str], out: Path, timeout: float, busy: Optional[float] = None,
                env: Optional[Dict[str, str]] = None) -> dict:
    """Run ``command``; return the JSON it wrote plus the wall time and the load around it."""
    load_before = load_average()
    started = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=REPO, env=clean_environment(env), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TutorialError("bench.run_timeout", seconds=timeout, command=" ".join(command)) from None
    wall = time.perf_counter() - started
    if done.returncode != 0 or not out.exists():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise TutorialError("bench.run_failed", code=done.returncode, command=" ".join(command), tail=tail)
    result = json.loads(out.read_text())
    if "samples_per_second" in result and "train_seconds" in result:  # the package's JSON does not say it
        result.setdefault("samples", round(result["samples_per_second"] * result["train_seconds"]))
    result.update(wall_seconds=wall, load_before=load_before, load_after=load_average(), busy_before=busy)
    return result


def say(o, text: str) -> None:
    if not o.quiet:
        print(text, flush=True)


def pct(fraction: Optional[float]) -> str:
    return "?" if fraction is None else t("bench.percent", value=100 * fraction)


def rate(value: float) -> str:
    return f"{value:,.0f}".replace(",", " ")


def median(values):
    values = list(values)
    return statistics.median(values) if values else None


def summarize(runs: List[dict], epochs: int) -> dict:
    """Medians (and the range) of one pipeline's repeated runs."""
    rates = [r["samples_per_second"] for r in runs]
    return {
        "samples_per_second": median(rates),
        "samples_per_second_min": min(rates),
        "samples_per_second_max": max(rates),
        "seconds_per_epoch": median([r["train_seconds"] / epochs for r in runs]),
        "wall_seconds": median([r["wall_seconds"] for r in runs]),
        "busy_before": median([r["busy_before"] for r in runs if r.get("busy_before") is not None]),
        "load_before": median([r["load_before"] for r in runs if r.get("load_before") is not None]),
        "threads": runs[0].get("threads"),
        "omp_wait_policies": [r.get("omp_wait_policy", "") for r in runs],  # "" = OpenMP's default (spinning)
        "steps_per_epoch": runs[0].get("steps_per_epoch"),
        "repeats": len(runs),
    }
