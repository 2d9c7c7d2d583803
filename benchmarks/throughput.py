"""Throughput of the package's training path against the seed's pipeline and the compute bound.

    python -m benchmarks.throughput --dataset fashion-mnist --root /tmp/fm            # the table, world 1 and 2
    python -m benchmarks.throughput --root /tmp/fm --mode scaling --figure scaling.png
    python -m benchmarks.throughput --root /tmp/fm --mode all --world 1 2 4 --json out.json --figure out.png
    python -m benchmarks.throughput --root /tmp/fm --contention 1 --world 1   # idle vs one busy core

The modes, one module each:

* ``--mode table`` (default, :mod:`benchmarks.table`): ``seed`` (:mod:`benchmarks.seed_pipeline`),
  ``package`` (``ddp_tutorial.train`` through ``python -m ddp_tutorial.spawn``) and ``bound``
  (:mod:`benchmarks.bound`) at every world size, **alternating and repeated** (``--repeats``, at
  least 3 for recorded figures), medians reported;
* ``--mode scaling`` (:mod:`benchmarks.scaling`): throughput and parallel efficiency versus world
  size, the time and optimizer steps to a target accuracy, and on the CPU the communication
  benchmark (:mod:`benchmarks.comm`): the limits gloo's all-reduce implies for world 2, without
  and with overlap, reported beside the measured world 2;
* ``--contention N`` (:mod:`benchmarks.contention`): world 1, package vs seed, idle vs N busy
  processes the benchmark starts and stops itself.

Every run is a fresh set of processes (:mod:`benchmarks.runner`). ``train_seconds`` is measured
inside the run (barrier before the first batch to the end of the last epoch); ``wall_seconds`` is
the whole command. The JSON report goes to ``--json`` (atomically); ``--record`` also copies it to
the package's recorded results (``ddp_tutorial/results/``), which :mod:`ddp_tutorial.figures` draws.

Threads: by default every process gets the package's policy (:func:`ddp_tutorial.threads.threads_for`);
``--threads N`` overrides it for all three pipelines.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import List

from ddp_tutorial import datasets, figures
from ddp_tutorial import data as staging
from ddp_tutorial.i18n import TutorialError, number, t

from . import comm, gpu
from .common import busy_fraction, load_average, machine, usable_cores, write_json
from .contention import measure_contention, print_contention
from .runner import median, pct, run_command, say
from .scaling import TARGET_ACCURACY, measure_scaling_throughput, print_scaling, time_to_accuracy
from .table import goals, measure_table, print_table



def world_limits(report: dict) -> dict:
    """World W's samples/s that gloo's all-reduce allows, as ratios to the measured world 1 (without
    and with perfect overlap of communication and backward), beside what world W measured."""
    rows = report.get("scaling") or {w: {"samples_per_second": r["package"]["samples_per_second"]}
                                     for w, r in report.get("table", {}).get("rows", {}).items()}
    if "1" not in rows:
        return {}
    world1 = rows["1"]["samples_per_second"]
    found = {}
    for result in report.get("communication", []):
        w = str(result["world_size"])
        one_rank = result["batch_per_rank"] / (result["compute"] / 1e3)  # samples/s of one rank, no talking
        entry = {key: result["limit_" + key] * one_rank / world1 for key in ("no_overlap", "overlap")}
        entry["ddp_buckets"] = result["ddp_buckets_speedup"] * one_rank / world1
        entry["ddp_view"] = result["ddp_view_speedup"] * one_rank / world1
        if w in rows:
            entry["measured"] = rows[w]["samples_per_second"] / world1
            entry["measured_over_no_overlap"] = entry["measured"] / entry["no_overlap"]
        found[w] = entry
    return found


def print_limits(limits: dict) -> None:
    for world, entry in limits.items():
        n = {key: number(value, decimals=2) for key, value in entry.items()}
        print(t("bench.limits", world=world, measured=n.get("measured", "?"), no_overlap=n["no_overlap"],
                overlap=n["overlap"], buckets=n["ddp_buckets"], view=n["ddp_view"]))


# --------------------------------------------------------------------------------------
# Command line


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} < 1")
    return value


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.throughput",
                                     description="Seed pipeline vs package vs compute bound; scaling.")
    parser.add_argument("--mode", choices=["table", "scaling", "all", "none"], default=None,
                        help="default: table (none with --contention)")
    parser.add_argument("--contention", type=int, default=0, metavar="N",
                        help="also measure world 1 idle against N busy processes started by the benchmark")
    parser.add_argument("--dataset", default="fashion-mnist", choices=list(datasets.NAMES))
    parser.add_argument("--root", default=None, help="staged data root (default: $DDP_TUTORIAL_ROOT or "
                                                     "~/ddp-data)")
    parser.add_argument("--world", type=_positive, nargs="+", default=[1, 2], help="world sizes (default: 1 2)")
    parser.add_argument("--repeats", type=_positive, default=3, help="repetitions of every run (median reported)")
    parser.add_argument("--epochs", type=_positive, default=1, help="epochs per throughput run")
    parser.add_argument("--batch-size", type=_positive, default=128, help="per process (the seed's 128)")
    parser.add_argument("--train-subset", type=_positive, default=None, help="first N training images only")
    parser.add_argument("--threads", type=_positive, default=None,
                        help="intra-op threads per process for all pipelines (default: cores / processes)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--target-accuracy", type=float, default=None,
                        help="scaling mode: test accuracy to reach (default 85 Fashion-MNIST, 97 MNIST)")
    parser.add_argument("--max-epochs", type=_positive, default=6, help="scaling mode: give up after this many")
    parser.add_argument("--comm-rounds", type=_positive, default=12,
                        help="rounds of the communication benchmark (benchmarks.comm), at world sizes > 1")
    parser.add_argument("--json", default="runs/benchmarks/throughput.json", help="where to write the results")
    parser.add_argument("--figure", default=None, help="scaling mode: write the PNG figure here")
    parser.add_argument("--wait-idle", type=float, default=None, metavar="F",
                        help="before each run wait until other work keeps the CPUs below F busy (0-1)")
    parser.add_argument("--wait-max", type=float, default=300.0, help="seconds to wait for --wait-idle per run")
    parser.add_argument("--run-timeout", type=float, default=1800.0, help="seconds allowed to one run")
    parser.add_argument("--record", action="store_true",
                        help="also copy the report into the package's recorded results (ddp_tutorial/results/)")
    parser.add_argument("--quiet", action="store_true", help="print only the tables")
    o = parser.parse_args(argv)
    o.root = Path(o.root or datasets.default_root()).expanduser().resolve()
    o.world = list(dict.fromkeys(o.world))  # unique, in the given order
    if o.contention < 0:
        parser.error(f"--contention {o.contention} < 0")
    if o.mode is None:
        o.mode = "none" if o.contention else "table"
    if o.target_accuracy is None:
        o.target_accuracy = TARGET_ACCURACY[o.dataset]
    return o


def _resolve_device(o) -> None:
    import torch
    available = torch.cuda.is_available()
    if o.device == "cuda" and not available:
        raise TutorialError("device.no_gpu")
    if o.device == "auto":
        o.device = "cuda" if available else "cpu"
    if o.device == "cuda":
        count = torch.cuda.device_count()
        for world in o.world:
            if world > count:
                raise TutorialError("bench.too_few_gpus", world=world, count=count)


def run(o: argparse.Namespace) -> dict:
    staging.check(o.dataset, o.root)  # a clear error now, not in the first child
    _resolve_device(o)
    cores = usable_cores()
    for world in o.world:
        if o.device == "cpu" and world > cores:
            say(o, t("bench.oversubscribed", world=world, cores=cores))
    report = {"options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(o).items()},
              "machine": machine(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
              "load_before": load_average(), "busy_before": busy_fraction(1.0), "goals": {}}
    workdir = Path(tempfile.mkdtemp(prefix="ddp-bench-"))
    try:
        table = None
        if o.mode in ("table", "all"):
            table = measure_table(o, workdir)
            report["table"] = table
            report["goals"] = goals(table)
        if o.mode in ("scaling", "all"):
            report["scaling"] = measure_scaling_throughput(o, workdir, table)
            report["time_to_accuracy"] = {"target": o.target_accuracy, "curves": time_to_accuracy(o, workdir)}
        if o.device == "cpu" and o.mode != "none":  # why world W is what it is: communication next to compute
            report["communication"] = []
            for world in o.world:
                if world > 1:
                    out = workdir / f"comm-w{world}.json"
                    report["communication"].append(run_command(
                        [sys.executable, "-m", "benchmarks.comm", "--world", str(world), "--json", str(out),
                         "--batch-size", str(o.batch_size), "--rounds", str(o.comm_rounds)],
                        out, o.run_timeout))
        if o.contention:
            report["contention"] = measure_contention(o, workdir)
        report["limits"] = world_limits(report)
        if o.device == "cuda":
            out = workdir / "gpu.json"
            report["gpu"] = run_command([sys.executable, "-m", "benchmarks.gpu", "--no-tests", "--json", str(out)], out,
                                        o.run_timeout)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report["load_after"] = load_average()
    report["busy_median"] = median([r["busy_before"] for r in _all_runs(report) if r.get("busy_before") is not None])
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    return report


def _all_runs(report: dict) -> List[dict]:
    runs = [r for by_world in report.get("table", {}).get("runs", {}).values() for rs in by_world.values() for r in rs]
    runs += [r for by_condition in report.get("contention", {}).get("runs", {}).values()
             for rs in by_condition.values() for r in rs]
    return runs


def main(argv=None) -> int:
    o = parse_args(argv)
    try:
        report = run(o)
    except TutorialError as error:
        print(f"{t('error.prefix')}: {error}", file=sys.stderr, flush=True)
        return error.exit_code
    if "table" in report:
        print_table(o, report["table"], report["goals"])
    if "scaling" in report:
        print_scaling(o, report["scaling"], report["time_to_accuracy"]["curves"])
    for result in report.get("communication", []):
        print()
        comm.print_result(result)
    print_limits(report.get("limits", {}))
    if "contention" in report:
        print_contention(o, report["contention"])
    if o.figure:
        drawn = figures.report_figures(report)
        for n, fig in enumerate(drawn):  # scaling first; a second figure gets a suffix
            path = Path(o.figure) if n == 0 else Path(o.figure).with_name(Path(o.figure).stem + "-contention.png")
            figures.save_figure(path, fig)
            print(t("bench.figure_written", path=path))
    if "gpu" in report:
        print()
        gpu.print_result(report["gpu"])
    cores = report["machine"]["usable_cores"]
    # Other people's work: the CPUs' busy share measured just before each of our runs.
    busy = report["busy_median"] if report["busy_median"] is not None else report["busy_before"]
    print(t("bench.load", before=report["load_before"], after=report["load_after"], cores=cores,
            busy=pct(busy), warning=t("bench.load_warning") if (busy or 0) > 0.1 else ""))
    if o.json:
        write_json(o.json, report)
        print(t("bench.json_written", path=o.json))
    if o.record:
        name = Path(o.json).name if o.json else "throughput.json"
        target = figures.recorded_path(name)
        write_json(target, report)
        print(t("bench.json_written", path=target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
