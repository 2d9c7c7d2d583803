"""The benchmark's recorded figures, drawn from results installed with the package.

``benchmarks/throughput.py --mode all`` measures throughput against world size and the time to a
target accuracy, and writes a JSON report; the recorded one of this workshop's 2-core CPU machine is
package data (``ddp_tutorial/results/cpu-2core-fashion-mnist.json``), so a notebook draws it with

    from ddp_tutorial import figures
    figures.plot_results(lang="tr")       # a matplotlib Figure; or plot_results("runs/bench.json")

without the repository on ``sys.path``. ``--figure`` draws the same figure from a fresh run
(:func:`scaling_figure` written by :func:`save_figure`). Figures are not registered with pyplot: no display
needed, no backend changed.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import List, Optional, Union

from .i18n import localise_axes, t

RECORDED_NAME = "cpu-2core-fashion-mnist.json"
# The label of each measured variant (literal message keys: grep finds every use).
VARIANT_LABELS = {"seed": "bench.variant.seed", "package": "bench.variant.package", "bound": "bench.variant.bound"}


def recorded_path(name: str = RECORDED_NAME) -> Path:
    """Where the installed package keeps the recorded report ``name``."""
    return Path(str(resources.files("ddp_tutorial") / "results" / name))


RECORDED = recorded_path()


def load_results(path: Union[str, Path, None] = None) -> dict:
    """A report written by ``benchmarks.throughput --json`` (default: the recorded 2-core CPU run)."""
    path = Path(path) if path is not None else RECORDED
    report = json.loads(path.read_text(encoding="utf-8"))
    if "scaling" not in report or "time_to_accuracy" not in report:
        raise ValueError(f"{path} has no scaling results: it was not written by --mode scaling or --mode all")
    return report


def scaling_figure(target: float, throughput: dict, curves: List[dict], lang: Optional[str] = None,
                   limits: Optional[dict] = None):
    """Left: samples/s against world size (the linear ideal, the parallel efficiency and, where the
    communication benchmark measured them, the limits gloo's all-reduce implies: ``limits`` maps a
    world size to ``{"no_overlap": r, "overlap": r}``, ratios to the first world size's samples/s); right: test accuracy
    against training time, with the optimizer steps it took to reach ``target``."""
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
    limit_labels = (("no_overlap", "v", "plot.limit_no_overlap"), ("overlap", "^", "plot.limit_overlap"))
    for key, style, label in limit_labels:  # what communication allows (benchmarks.comm)
        points = [(int(w), rates[0] * lim[key]) for w, lim in (limits or {}).items() if lim.get(key)]
        if points:
            left.plot(*zip(*points), style, color="tab:red", linestyle="none", label=say(label))
    left.set_xticks(worlds)
    left.set_xlabel(say("plot.world"))
    left.set_ylabel(say("plot.throughput"))
    left.set_title(say("plot.title_throughput"))
    left.set_ylim(bottom=0)
    left.legend(fontsize=8)

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
    localise_axes(fig, lang)
    fig.tight_layout()
    return fig


def contention_figure(contention: dict, lang: Optional[str] = None):
    """Samples/s at world 1, idle against ``N`` busy processes, for the package and the seed's pipeline
    (what ``benchmarks.throughput --contention N`` records)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    conditions = ("idle", "loaded")
    variants = [v for v in ("package", "seed") if v in contention["rows"]]
    width = 0.8 / max(1, len(variants))
    for i, variant in enumerate(variants):
        values = [contention["rows"][variant][c]["samples_per_second"] for c in conditions]
        xs = [k + (i - (len(variants) - 1) / 2) * width for k in range(len(conditions))]
        ax.bar(xs, values, width, label=t(VARIANT_LABELS[variant], lang=lang))
    ax.set_xticks(range(len(conditions)))
    ax.set_xticklabels([t("plot.idle", lang=lang), t("plot.loaded", lang=lang, busy=contention["busy"])])
    ax.set_ylabel(t("plot.throughput", lang=lang))
    ax.set_title(t("plot.title_contention", lang=lang))
    ax.legend()
    localise_axes(fig, lang)
    fig.tight_layout()
    return fig


def report_figures(report: dict, lang: Optional[str] = None) -> list:
    """Every figure a report holds the numbers for (scaling and/or contention)."""
    figures = []
    if "scaling" in report and "time_to_accuracy" in report:
        tta = report["time_to_accuracy"]
        figures.append(scaling_figure(tta["target"], report["scaling"], tta["curves"], lang,
                                      report.get("limits")))
    if "contention" in report:
        figures.append(contention_figure(report["contention"], lang))
    return figures


def save_figure(path, fig) -> Path:
    """Write any of these figures to ``path`` (PNG, atomically)."""
    from .atomic import write_with

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_with(path, lambda f: fig.savefig(f, format="png", dpi=110))


def plot_results(path=None, lang: Optional[str] = None):
    """The scaling figure of a report (default: the recorded run installed with the package) — what
    notebooks 04 and 06 show."""
    report = load_results(path)
    tta = report["time_to_accuracy"]
    return scaling_figure(tta["target"], report["scaling"], tta["curves"], lang, report.get("limits"))
