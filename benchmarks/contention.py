"""Contention mode: the package and the seed's pipeline at world 1, idle against N busy processes.

Workshop machines are shared (a login node, a node where many attendees run notebooks, a laptop
with a browser open). ``python -m benchmarks.throughput --contention N`` starts N busy processes
itself — one spinning Python loop each, the way ``yes > /dev/null`` holds a core — around every
"loaded" run and stops them right after it; "idle" runs alternate with them (paired, the order
flipped every repetition), so both see the same background from other users. Each busy process
also ends by itself after a deadline, so none outlives the benchmark even if it is killed.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, List

from ddp_tutorial.i18n import t
from ddp_tutorial.figures import VARIANT_LABELS

from .common import GOAL_LABELS

from .runner import command_for, pct, rate, run_command, say, summarize, wait_for_idle

CONDITIONS = ("idle", "loaded")
VARIANTS = ("package", "seed")
# The goals of the shared-machine issue: with one busy core the package keeps ≥ 0.6× its idle
# throughput, and stays ≥ 4× the seed's pipeline measured under the same load.
GOALS = {"loaded_over_idle": 0.6, "package_over_seed_loaded": 4.0}

_SPIN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


@contextmanager
def busy_processes(count: int, seconds: float):
    """``count`` processes that keep one core busy each, for at most ``seconds``; always stopped
    on leaving (normal exit, error, Ctrl-C or SIGTERM)."""
    previous = signal.getsignal(signal.SIGTERM)
    if previous in (signal.SIG_DFL, None):  # a SIGTERM must still run the clean-up below
        signal.signal(signal.SIGTERM, _raise_interrupt)
    children: List[subprocess.Popen] = []
    try:
        for _ in range(count):
            children.append(subprocess.Popen([sys.executable, "-c", _SPIN.format(seconds=float(seconds))],
                                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL))
        yield [c.pid for c in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
        for child in children:
            child.wait()
        if previous in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def measure_contention(o, workdir: Path) -> dict:
    """Paired, alternating runs at world 1: every repetition runs both pipelines idle and under
    ``o.contention`` busy processes (the order of the conditions flips, that of the pipelines rotates)."""
    runs: Dict[str, Dict[str, List[dict]]] = {v: {c: [] for c in CONDITIONS} for v in VARIANTS}
    jobs = []
    for rep in range(o.repeats):
        conditions = CONDITIONS if rep % 2 == 0 else CONDITIONS[::-1]
        variants = VARIANTS if rep % 2 == 0 else VARIANTS[::-1]
        jobs += [(rep, c, v) for c in conditions for v in variants]
    for n, (rep, condition, variant) in enumerate(jobs, 1):
        busy = wait_for_idle(o)
        label = t("plot." + condition, busy=o.contention)
        say(o, t("bench.contention_running", n=n, total=len(jobs), variant=variant, condition=label, rep=rep + 1,
                 busy=pct(busy)))
        out = workdir / f"contention-{variant}-{condition}-r{rep}.json"
        command = command_for(variant, 1, o, out)
        if condition == "loaded":
            with busy_processes(o.contention, o.run_timeout + 30):
                result = run_command(command, out, o.run_timeout, busy)
        else:
            result = run_command(command, out, o.run_timeout, busy)
        result["condition"] = condition
        runs[variant][condition].append(result)
    rows = {v: {c: summarize(runs[v][c], o.epochs) for c in CONDITIONS} for v in VARIANTS}
    package, seed = rows["package"], rows["seed"]
    ratios = {
        "loaded_over_idle": package["loaded"]["samples_per_second"] / package["idle"]["samples_per_second"],
        "package_over_seed_loaded": package["loaded"]["samples_per_second"] / seed["loaded"]["samples_per_second"],
        "package_over_seed_idle": package["idle"]["samples_per_second"] / seed["idle"]["samples_per_second"],
        "seed_loaded_over_idle": seed["loaded"]["samples_per_second"] / seed["idle"]["samples_per_second"],
    }
    checked = {name: {"value": ratios[name], "goal": goal, "met": ratios[name] >= goal} for name, goal in GOALS.items()}
    return {"busy": o.contention, "rows": rows, "ratios": ratios, "goals": checked, "runs": runs}


def print_contention(o, contention: dict) -> None:
    print()
    print(t("bench.contention_title", busy=contention["busy"], repeats=o.repeats))
    for variant in VARIANTS:
        for condition in CONDITIONS:
            s = contention["rows"][variant][condition]
            print(t("bench.contention_row", variant=t(VARIANT_LABELS[variant]),
                    condition=t("plot." + condition, busy=contention["busy"]), rate=rate(s["samples_per_second"]),
                    low=rate(s["samples_per_second_min"]), high=rate(s["samples_per_second_max"]),
                    load=s["load_before"] if s["load_before"] is not None else "?"))
    for name, g in contention["goals"].items():
        verdict = t("bench.met") if g["met"] else t("bench.missed", pct=100 * (1 - g["value"] / g["goal"]))
        print(t("bench.goal", name=t(GOAL_LABELS[name]), value=g["value"], goal=g["goal"], verdict=verdict))
