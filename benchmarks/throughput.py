"""Throughput of the package's training path against the seed's pipeline and the compute bound.

    python -m benchmarks.throughput --dataset fashion-mnist --root /tmp/fm            # the table, world 1 and 2
    python -m benchmarks.throughput --root /tmp/fm --mode scaling --figure scaling.png
    python -m benchmarks.throughput --root /tmp/fm --mode all --world 1 2 4 --json out.json --figure out.png

``--mode table`` (default) runs three pipelines on the same data, at every world size W of
``--world``, **alternating and repeated** (``--repeats``, at least 3 for recorded figures;
the order of the three is rotated every repetition) and reports medians:

* ``seed`` — the seed tutorial's pipeline (:mod:`benchmarks.seed_pipeline`);
* ``package`` — ``ddp_tutorial.train`` through the package's own launcher
  (``python -m ddp_tutorial.spawn --nproc-per-node W``);
* ``bound`` — the compute bound (:mod:`benchmarks.bound`): one process, data in memory,
  the same model and optimizer steps (``W × 128`` samples each), no DDP.

Every run is a fresh set of processes. Two times are kept for each:

* ``train_seconds`` — measured *inside* the run, from a barrier just before the first
  batch to the end of the last epoch (start-up, data loading, process-group set-up and the
  test are excluded); samples/s and seconds per epoch come from it;
* ``wall_seconds`` — the whole command as the benchmark sees it: interpreter start,
  imports, loading the data, spawning, rendezvous, training, exit (no test: ``--no-eval``).

``--mode scaling`` measures the package's throughput and parallel efficiency versus world
size, and the time and optimizer steps to reach a target test accuracy (85 % on
Fashion-MNIST, 97 % on MNIST) with and without ``--scale-lr``: epoch by epoch, resuming from
the package's checkpoint, testing after every epoch. ``--figure`` draws both;
:func:`plot_results` redraws a written report (default: the recorded one, :data:`RECORDED`) as a
matplotlib Figure without measuring — notebooks 04 and 06 show it that way.

Threads: by default every process gets the package's policy — the usable cores divided
among the processes of the run (``--threads N`` overrides it for all three pipelines).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from ddp_tutorial import data as datasets
from ddp_tutorial.i18n import TutorialError, t

from . import comm, gpu
from .common import busy_fraction, load_average, machine, threads_per_process, usable_cores, write_json

REPO = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
# The recorded run of benchmarks/README.md (section 4): 2-core CPU, Fashion-MNIST, --mode all --repeats 5.
RECORDED = RESULTS / "cpu-2core-fashion-mnist.json"
VARIANTS = ("seed", "package", "bound")
TARGET_ACCURACY = {"fashion-mnist": 85.0, "mnist": 97.0}
# The goals of the benchmark issue, on a 2-core CPU machine.
GOALS = {"package_over_seed": 4.0, "package_over_bound": 0.8, "world2_over_world1": 1.7}


# --------------------------------------------------------------------------------------
# Running one pipeline in fresh processes


def _clean_environment() -> Dict[str, str]:
    """Our environment without a launcher's variables (they would confuse the runs)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                 "MASTER_PORT", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NPROCS", "SLURM_NTASKS"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def threads_for(variant: str, world: int, o: argparse.Namespace) -> int:
    """Intra-op threads per process: ``--threads``, else the package's policy (the usable cores shared
    among the run's processes; the bound is one process)."""
    return o.threads or threads_per_process(1 if variant == "bound" else world)


def command_for(variant: str, world: int, o: argparse.Namespace, out: Path, extra=(), evaluate=False) -> List[str]:
    """The command line that runs ``variant`` at world size ``world`` and writes its result to ``out``
    (without the test at the end unless ``evaluate``; the bound never tests)."""
    common = ["--dataset", o.dataset, "--root", str(o.root), "--epochs", str(o.epochs), "--batch-size", str(o.batch_size)]
    if o.train_subset:
        common += ["--train-subset", str(o.train_subset)]
    threads = threads_for(variant, world, o)
    if variant == "seed":
        return [sys.executable, "-m", "benchmarks.seed_pipeline", *common, "--world", str(world),
                "--threads", str(threads), "--device", o.device, "--json", str(out)] + ([] if evaluate else ["--no-eval"])
    if variant == "bound":
        return [sys.executable, "-m", "benchmarks.bound", *common, "--world", str(world),
                "--threads", str(threads), "--device", o.device, "--json", str(out)]
    command = [sys.executable, "-m", "ddp_tutorial.spawn", "--nproc-per-node", str(world), *common,
               "--device", o.device, "--quiet", "--no-progress", "--json", str(out)]
    if not evaluate:
        command.append("--no-eval")
    if o.threads:  # otherwise the package's own policy (cores / processes)
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


def run_command(command: List[str], out: Path, timeout: float, busy: Optional[float] = None) -> dict:
    """Run ``command``; return the JSON it wrote plus the wall time and the load around it."""
    load_before = load_average()
    started = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=REPO, env=_clean_environment(), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TutorialError("bench.run_timeout", seconds=timeout, command=" ".join(command)) from None
    wall = time.perf_counter() - started
    if done.returncode != 0 or not out.exists():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise TutorialError("bench.run_failed", code=done.returncode, command=" ".join(command), tail=tail)
    result = json.loads(out.read_text())
    result.update(wall_seconds=wall, load_before=load_before, load_after=load_average(), busy_before=busy)
    return result


def _say(o, text: str) -> None:
    if not o.quiet:
        print(text, flush=True)


def _pct(fraction: Optional[float]) -> str:
    return "?" if fraction is None else t("bench.percent", value=100 * fraction)


def _median(values):
    return statistics.median(values) if values else None


def summarize(runs: List[dict], epochs: int) -> dict:
    """Medians (and the range) of one pipeline's repeated runs."""
    rates = [r["samples_per_second"] for r in runs]
    return {
        "samples_per_second": _median(rates),
        "samples_per_second_min": min(rates),
        "samples_per_second_max": max(rates),
        "seconds_per_epoch": _median([r["train_seconds"] / epochs for r in runs]),
        "wall_seconds": _median([r["wall_seconds"] for r in runs]),
        "busy_before": _median([r["busy_before"] for r in runs if r.get("busy_before") is not None]),
        "threads": runs[0].get("threads"),
        "steps_per_epoch": runs[0].get("steps_per_epoch"),
        "repeats": len(runs),
    }


# --------------------------------------------------------------------------------------
# Mode "table": seed vs package vs bound


def measure_table(o, workdir: Path) -> dict:
    jobs = []
    for rep in range(o.repeats):
        for world in o.world:
            shift = (rep + o.world.index(world)) % len(VARIANTS)  # rotate the order: no pipeline always first
            for variant in VARIANTS[shift:] + VARIANTS[:shift]:
                jobs.append((rep, world, variant))
    runs: Dict[str, Dict[int, List[dict]]] = {v: {w: [] for w in o.world} for v in VARIANTS}
    for n, (rep, world, variant) in enumerate(jobs, 1):
        busy = wait_for_idle(o)
        _say(o, t("bench.running", n=n, total=len(jobs), variant=variant, world=world, rep=rep + 1, busy=_pct(busy)))
        out = workdir / f"{variant}-w{world}-r{rep}.json"
        result = run_command(command_for(variant, world, o, out), out, o.run_timeout, busy)
        result.setdefault("threads", threads_for(variant, world, o))  # the package's JSON does not say
        result.setdefault("samples", round(result["samples_per_second"] * result["train_seconds"]))  # nor this
        runs[variant][world].append(result)
    table = {}
    for world in o.world:
        row = {v: summarize(runs[v][world], o.epochs) for v in VARIANTS}
        package = row["package"]["samples_per_second"]
        row["package_over_seed"] = package / row["seed"]["samples_per_second"]
        row["package_over_bound"] = package / row["bound"]["samples_per_second"]
        table[str(world)] = row
    return {"rows": table, "runs": {v: {str(w): r for w, r in by_world.items()} for v, by_world in runs.items()}}


def goals(table: dict) -> dict:
    """The issue's goals, where the measured world sizes allow checking them."""
    found = {}
    rows = table["rows"]
    if "1" in rows:
        found["package_over_seed"] = rows["1"]["package_over_seed"]
        found["package_over_bound"] = rows["1"]["package_over_bound"]
        if "2" in rows:
            found["world2_over_world1"] = (rows["2"]["package"]["samples_per_second"]
                                           / rows["1"]["package"]["samples_per_second"])
    return {name: {"value": value, "goal": GOALS[name], "met": value >= GOALS[name]} for name, value in found.items()}


def _rate(value: float) -> str:
    return f"{value:,.0f}".replace(",", " ")


def print_table(o, table: dict, checked: dict) -> None:
    print()
    print(t("bench.title", dataset=o.dataset, epochs=o.epochs, batch=o.batch_size, device=o.device, repeats=o.repeats))
    print(t("bench.header"))
    for world, row in table["rows"].items():
        for variant in VARIANTS:
            s = row[variant]
            spread = f"{_rate(s['samples_per_second'])} ({_rate(s['samples_per_second_min'])}-" \
                     f"{_rate(s['samples_per_second_max'])})"
            ratios = ""
            if variant == "package":
                ratios = f"{row['package_over_seed']:>11.2f}×  {row['package_over_bound']:>11.2f}×"
            print(f"{world:>5}  {t('bench.variant.' + variant):<9}  {spread:<28}  {s['seconds_per_epoch']:>7.2f}  "
                  f"{s['wall_seconds']:>7.2f}   {ratios}")
    print(t("bench.legend"))
    if checked:
        print(t("bench.goals"))
        for name, g in checked.items():
            verdict = t("bench.met") if g["met"] else t("bench.missed", pct=100 * (1 - g["value"] / g["goal"]))
            print(t("bench.goal", name=t("bench.goal." + name), value=g["value"], goal=g["goal"], verdict=verdict))


# --------------------------------------------------------------------------------------
# Mode "scaling": throughput vs world size, and time to a target accuracy


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
                _say(o, t("bench.running", n=n, total=total, variant="package", world=world, rep=rep + 1,
                          busy=_pct(busy)))
                out = workdir / f"scaling-w{world}-r{rep}.json"
                runs[world].append(run_command(command_for("package", world, o, out), out, o.run_timeout, busy))
    rows = {}
    base = None
    for world in sorted(runs):
        rate = _median([r["samples_per_second"] for r in runs[world]])
        if world == min(runs):
            base = rate / world  # per-process rate of the smallest world (normally world 1)
        speedup = rate / (base * 1.0) if base else None
        rows[str(world)] = {"samples_per_second": rate, "speedup": speedup,
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
            _say(o, t("bench.running", n=epoch, total=o.max_epochs, variant="time-to-accuracy"
                      + (" --scale-lr" if scale else ""), world=world, rep=1, busy=_pct(busy)))
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
        print(f"{world:>5}  {_rate(row['samples_per_second']):>10}  {row['speedup']:>7.2f}×  {_pct(row['efficiency']):>10}")
    print()
    print(t("bench.tta_title", target=o.target_accuracy))
    print(t("bench.tta_header"))
    for c in curves:
        accs = " ".join(f"{p['test_accuracy']:.1f}" for p in c["epochs"])
        lr = f"{c['lr']:g}" + (" " + t("bench.scaled") if c["scale_lr"] else "")
        if c["reached"]:
            r = c["reached"]
            print(f"{c['world_size']:>5}  {lr:<18}  {r['epoch']:>6}  {r['steps']:>5}  {r['train_seconds']:>7.1f}  {accs}")
        else:
            print(f"{c['world_size']:>5}  {lr:<18}  {t('bench.not_reached', epochs=len(c['epochs'])):<30}  {accs}")


def scaling_figure(target: float, throughput: dict, curves: List[dict], lang: Optional[str] = None):
    """The scaling figure as a :class:`matplotlib.figure.Figure`. Left: samples/s against world size
    (with the linear ideal and the parallel efficiency); right: test accuracy against training time,
    with the optimizer steps it took to reach ``target``. Labels in ``lang`` (default: ``DDP_TUTORIAL_LANG``).

    The figure is not registered with pyplot, so this needs no display and changes no backend: a notebook
    shows it inline when it is a cell's value (or given to ``display``), a script saves it."""
    from matplotlib.figure import Figure

    def say(key, **fields):
        return t(key, lang=lang, **fields)

    worlds = [int(w) for w in throughput]
    rates = [throughput[str(w)]["samples_per_second"] for w in worlds]
    base = rates[0] / worlds[0]
    fig = Figure(figsize=(11, 4.2))
    left, right = fig.subplots(1, 2)
    left.plot(worlds, [base * w for w in worlds], "--", color="grey", label=say("plot.ideal"))
    left.plot(worlds, rates, "o-", label=say("plot.measured"))
    for w, r in zip(worlds, rates):
        left.annotate(say("plot.efficiency", eff=100 * throughput[str(w)]["efficiency"]), (w, r),
                      textcoords="offset points", xytext=(4, -12), fontsize=8)
    left.set_xticks(worlds)
    left.set_xlabel(say("plot.world"))
    left.set_ylabel(say("plot.throughput"))
    left.set_title(say("plot.title_throughput"))
    left.set_ylim(bottom=0)
    left.legend()

    for c in curves:
        xs = [p["train_seconds"] for p in c["epochs"]]
        ys = [p["test_accuracy"] for p in c["epochs"]]
        right.plot(xs, ys, "o-" if not c["scale_lr"] else "s--",
                   label=say("plot.curve", world=c["world_size"], lr=c["lr"]))
        if c["reached"]:  # how many optimizer steps it took
            right.annotate(say("plot.steps", steps=c["reached"]["steps"]),
                           (c["reached"]["train_seconds"], c["reached"]["test_accuracy"]),
                           textcoords="offset points", xytext=(-10, 6), fontsize=8, ha="right")
    right.axhline(target, color="grey", linestyle=":", label=say("plot.target", target=target))
    right.set_xlabel(say("plot.train_time"))
    right.set_ylabel(say("plot.accuracy"))
    right.set_title(say("plot.title_accuracy"))
    right.set_xlim(left=0)
    right.margins(y=0.15)  # room for the step labels
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig


def draw_figure(path: Path, target: float, throughput: dict, curves: List[dict], lang: Optional[str] = None) -> None:
    """Write :func:`scaling_figure` to ``path`` (PNG)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    scaling_figure(target, throughput, curves, lang).savefig(path, dpi=110)


def load_results(path=RECORDED) -> dict:
    """A report written by ``--json`` (default: the recorded 2-core CPU run, :data:`RECORDED`)."""
    report = json.loads(Path(path).read_text(encoding="utf-8"))
    if "scaling" not in report or "time_to_accuracy" not in report:
        raise ValueError(f"{path} has no scaling results: it was not written by --mode scaling or --mode all")
    return report


def plot_results(path=RECORDED, lang: Optional[str] = None):
    """The scaling figure of a recorded report (default :data:`RECORDED`), as a Figure — what notebook 06
    shows; ``--figure`` draws the same from a fresh run."""
    report = load_results(path)
    tta = report["time_to_accuracy"]
    return scaling_figure(tta["target"], report["scaling"], tta["curves"], lang)


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
    parser.add_argument("--mode", choices=["table", "scaling", "all"], default="table")
    parser.add_argument("--dataset", default="fashion-mnist", choices=list(datasets.DATASETS))
    parser.add_argument("--root", default=None, help="staged data root (default: $DDP_TUTORIAL_ROOT or "
                                                     "~/.cache/ddp-tutorial/data)")
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
                        help="scaling mode: rounds of the communication benchmark (benchmarks.comm)")
    parser.add_argument("--json", default="runs/benchmarks/throughput.json", help="where to write the results")
    parser.add_argument("--figure", default=None, help="scaling mode: write the PNG figure here")
    parser.add_argument("--wait-idle", type=float, default=None, metavar="F",
                        help="before each run wait until other work keeps the CPUs below F busy (0-1)")
    parser.add_argument("--wait-max", type=float, default=300.0, help="seconds to wait for --wait-idle per run")
    parser.add_argument("--run-timeout", type=float, default=1800.0, help="seconds allowed to one run")
    parser.add_argument("--quiet", action="store_true", help="print only the tables")
    o = parser.parse_args(argv)
    o.root = Path(o.root or datasets.default_root()).expanduser().resolve()
    o.world = list(dict.fromkeys(o.world))  # unique, in the given order
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
    datasets.check(o.dataset, o.root)  # a clear error now, not in the first child
    _resolve_device(o)
    cores = usable_cores()
    for world in o.world:
        if o.device == "cpu" and world > cores:
            _say(o, t("bench.oversubscribed", world=world, cores=cores))
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
            if o.device == "cpu":  # why the speed-up is what it is: communication next to computation
                report["communication"] = []
                for world in o.world:
                    if world > 1:
                        out = workdir / f"comm-w{world}.json"
                        report["communication"].append(run_command(
                            [sys.executable, "-m", "benchmarks.comm", "--world", str(world), "--json", str(out),
                             "--batch-size", str(o.batch_size), "--rounds", str(o.comm_rounds)],
                            out, o.run_timeout))
        if o.device == "cuda":
            out = workdir / "gpu.json"
            report["gpu"] = run_command([sys.executable, "-m", "benchmarks.gpu", "--json", str(out)], out,
                                        o.run_timeout)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report["load_after"] = load_average()
    report["busy_median"] = _median([r["busy_before"] for r in _all_runs(report) if r.get("busy_before") is not None])
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    return report


def _all_runs(report: dict) -> List[dict]:
    runs = [r for by_world in report.get("table", {}).get("runs", {}).values() for rs in by_world.values() for r in rs]
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
        if o.figure:
            draw_figure(Path(o.figure), o.target_accuracy, report["scaling"], report["time_to_accuracy"]["curves"])
            print(t("bench.figure_written", path=o.figure))
    for result in report.get("communication", []):
        print()
        comm.print_result(result)
    if "gpu" in report:
        print()
        gpu.print_result(report["gpu"])
    cores = report["machine"]["usable_cores"]
    # Other people's work: the CPUs' busy share measured just before each of our runs.
    busy = report["busy_median"] if report["busy_median"] is not None else report["busy_before"]
    print(t("bench.load", before=report["load_before"], after=report["load_after"], cores=cores,
            busy=_pct(busy), warning=t("bench.load_warning") if (busy or 0) > 0.1 else ""))
    if o.json:
        write_json(o.json, report)
        print(t("bench.json_written", path=o.json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
