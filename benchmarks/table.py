"""Mode "table": the seed's pipeline vs the package vs the compute bound, alternating and repeated.

At every world size W of ``--world`` the three pipelines run in fresh processes, their order rotated
every repetition (no pipeline always first), and the medians are reported with the goals of the
benchmark issue on a 2-core CPU machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

from ddp_tutorial.i18n import t
from ddp_tutorial.figures import VARIANT_LABELS

from .common import GOAL_LABELS

from .runner import VARIANTS, command_for, pct, rate, run_command, say, summarize, threads_for, wait_for_idle

# The goals of the benchmark issue, on a 2-core CPU machine.
GOALS = {"package_over_seed": 4.0, "package_over_bound": 0.8, "world2_over_world1": 1.7}

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
        say(o, t("bench.running", n=n, total=len(jobs), variant=variant, world=world, rep=rep + 1, busy=pct(busy)))
        out = workdir / f"{variant}-w{world}-r{rep}.json"
        result = run_command(command_for(variant, world, o, out), out, o.run_timeout, busy)
        result.setdefault("threads", threads_for(variant, world, o))  # the package's JSON does not say
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


def print_table(o, table: dict, checked: dict) -> None:
    print()
    print(t("bench.title", dataset=o.dataset, epochs=o.epochs, batch=o.batch_size, device=o.device, repeats=o.repeats))
    print(t("bench.header"))
    for world, row in table["rows"].items():
        for variant in VARIANTS:
            s = row[variant]
            spread = f"{rate(s['samples_per_second'])} ({rate(s['samples_per_second_min'])}-" \
                     f"{rate(s['samples_per_second_max'])})"
            ratios = ""
            if variant == "package":
                ratios = f"{row['package_over_seed']:>11.2f}×  {row['package_over_bound']:>11.2f}×"
            print(f"{world:>12}  {t(VARIANT_LABELS[variant]):<9}  {spread:<28}  {s['seconds_per_epoch']:>7.2f}  "
                  f"{s['wall_seconds']:>7.2f}   {ratios}")
    print(t("bench.legend"))
    if checked:
        print(t("bench.goals"))
        for name, g in checked.items():
            verdict = t("bench.met") if g["met"] else t("bench.missed", pct=100 * (1 - g["value"] / g["goal"]))
            print(t("bench.goal", name=t(GOAL_LABELS[name]), value=g["value"], goal=g["goal"], verdict=verdict))
