"""Where the test suite's CPU goes: a command (the README's test command by default) run under the kernel's process
accounting, every process that ended joined to the command line it started with and the test it started under.

    python -m benchmarks.suite_cpu [--json out.json] [--heavy 1.5] [-- COMMAND ...]

Needs root and Debian's ``acct`` package (``accton``, ``dump-acct``). While COMMAND runs, every Python process writes
one line as it starts (pid, parent, time, ``PYTEST_CURRENT_TEST``, command line: a ``sitecustomize`` on
``PYTHONPATH``) and each pytest process writes when each test starts and ends (a plugin, ``-p``, added where COMMAND
runs pytest or scripts/test.sh). The kernel writes one record per process that ends (CPU time, pid, parent pid at
its end, start time in whole seconds). A process without a line of its own (forked, or not Python) takes the line of
its nearest ancestor that has one; one forked by a pytest worker takes the test the worker ran when it started.

It prints the CPU-s of COMMAND's processes by kind (an ipyparallel engine, a torchrun agent, a rank server …), by
test, and how many processes used ``--heavy`` CPU-s or more: at torch 2.14 those are the ones that import torch
(1.2–2 CPU-s; DDP's constructor adds torch._dynamo, 1–1.3; a normal exit with both loaded 0.6–1.2 more, by machine).
The kernel counts CPU by ticks here (``CONFIG_TICK_CPU_ACCOUNTING``): the totals hold (every tick is charged to a
process), but on an oversubscribed machine a short process is charged far less than it used: a Python process that
burns 0.62 CPU-s is recorded as 0.44–0.48 beside 2 busy loops on 2 cores, 0.08–0.09 beside 4 and 0.02–0.06 beside 8
(2026-12-07). The suite keeps the machine about 90 % busy, so read the kinds of short processes as lower bounds.
A test's SLURM jobs take the test that submitted them (sbatch passes the environment on; the lab's ``lab.env`` says
the test running when it is read). The JSON also lists every heavy process with its command line.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ddp_tutorial import atomic

REPO = Path(__file__).resolve().parents[1]
HELD = "DDP_TUTORIAL_SUITE_CPU"  # set for COMMAND: the kernel's accounting is held (there is one for the machine)

SITECUSTOMIZE = '''import os, time
try:
    with open("/proc/self/cmdline", "rb") as _c:
        _cmd = _c.read().replace(b"\\0", b" ").decode(errors="replace")[:400]
    _test = os.environ.get("PYTEST_CURRENT_TEST", "")
    with open({log!r}, "a") as _f:
        _f.write(f"{{os.getpid()}}\\t{{os.getppid()}}\\t{{time.time():.2f}}\\t{{_test}}\\t{{_cmd}}\\n")
except Exception:
    pass
'''

PLUGIN = '''import os, time
_out = None
_controller = [False]
def pytest_configure(config):  # pytest-xdist's controller hears of every test its workers run: not counted twice
    _controller[0] = bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")
def _write(kind, nodeid):
    global _out
    if _controller[0]:
        return
    if _out is None:
        _out = open(os.path.join({folder!r}, f"tests.{{os.getpid()}}"), "a", buffering=1)
    _out.write(f"{{kind}} {{time.time():.3f}} {{nodeid}}\\n")
def pytest_runtest_logstart(nodeid, location):
    _write("S", nodeid)
def pytest_runtest_logfinish(nodeid, location):
    _write("E", nodeid)
'''

# (pattern in the command line, kind): the first that matches names the process
KINDS = (
    (r"multiprocessing\.forkserver", "rank server (forkserver)"),  # first: its imports name ipyparallel.engine
    (r"ipyparallel\.engine|ipengine", "ipyparallel engine"),
    (r"ipyparallel\.controller|ipcontroller", "ipyparallel controller"),
    (r"ipykernel", "Jupyter kernel"),
    (r"multiprocessing\.spawn|multiprocessing\.resource_tracker", "multiprocessing spawn child"),
    (r"torchrun|torch\.distributed\.run", "torchrun agent"),
    (r"jupyter-lab|jupyterlab", "JupyterLab"),
    (r"-m ddp_tutorial\.train\b", "ddp_tutorial.train (a torchrun/srun worker)"),
    (r"ddp-tutorial|ddp_tutorial", "the package's CLI"),
    (r"-m benchmarks\.|benchmarks/", "a benchmark"),
    (r"import sys;exec\(eval\(sys\.stdin", "pytest-xdist worker"),
    (r"-m pytest\b|bin/pytest\b", "pytest"),
    (r"python[\d.]*\s+(-\w+\s+)*\S+\.py\b", "a Python script (own scripts: torchrun/srun workers …)"),
)


def kind_of(command: str) -> str:
    for pattern, kind in KINDS:
        if re.search(pattern, command):
            return kind
    return "other Python" if "python" in command else "other"


def read_accounting(path: Path) -> list:
    """dump-acct's records: comm, CPU-s (user + system), start and end (epoch seconds), pid, ppid."""
    shown = subprocess.run(["dump-acct", str(path)], capture_output=True, text=True, check=True).stdout
    records = []
    for line in shown.splitlines():
        f = [x.strip() for x in line.split("|")]
        start = datetime.datetime.strptime(f[14], "%a %b %d %H:%M:%S %Y").replace(
            tzinfo=datetime.timezone.utc).timestamp()
        records.append({"comm": f[0], "cpu": (float(f[2]) + float(f[3])) / 100, "start": start,
                        "end": start + float(f[4]) / 100, "pid": int(f[9]), "ppid": int(f[10])})
    return records


def read_starts(path: Path) -> dict:
    starts = collections.defaultdict(list)
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            parts = line.split("\t")
            if len(parts) == 5:
                test = re.sub(r" \((setup|call|teardown)\)$", "", parts[3])
                starts[int(parts[0])].append({"t": float(parts[2]), "test": test, "cmd": parts[4].strip()})
    return starts


def read_timelines(folder: Path) -> dict:
    """Each pytest process's tests: pid → sorted (start, end, nodeid)."""
    timelines = {}
    for path in folder.glob("tests.*"):
        spans, begun = [], {}
        for line in path.read_text(errors="replace").splitlines():
            kind, at, nodeid = line.split(" ", 2)
            if kind == "S":
                begun[nodeid] = float(at)
            else:
                spans.append((begun.pop(nodeid, float(at)), float(at), nodeid))
        timelines[int(path.name.split(".")[1])] = sorted(spans)
    return timelines


def test_at(spans: list, when: float) -> str:
    k = bisect.bisect_right([s[0] for s in spans], when + 1) - 1
    if k >= 0 and spans[k][0] - 1 <= when <= spans[k][1] + 1:
        return spans[k][2]
    return "(between tests)"


def attribute(records: list, starts: dict, timelines: dict) -> list:
    """Each record with its kind and the test it ran under: from its own start line, else its nearest ancestor's
    (a child of that command), else the test its pytest process ran when it started."""
    by_pid = collections.defaultdict(list)
    for i, r in enumerate(records):
        by_pid[r["pid"]].append(i)

    def own_line(r):
        for s in starts.get(r["pid"], []):
            if r["start"] - 2 <= s["t"] <= r["end"] + 2:  # pids are reused: the line of this life
                return s
        return None

    def parent(r):
        for j in by_pid.get(r["ppid"], []):
            p = records[j]
            if p["start"] - 2 <= r["start"] <= p["end"] + 2:
                return p
        return None

    found = []
    for r in records:
        line = own_line(r)
        command = r["comm"]
        if r["pid"] in timelines:
            kind, test = "pytest process", "(pytest itself)"
        elif line is not None:
            kind, test, command = kind_of(line["cmd"]), line["test"] or "(no test)", line["cmd"]
        else:
            kind, test, node = f"not Python, or not logged: {r['comm']}", "(no test)", r
            for _ in range(60):
                node = parent(node)
                if node is None:
                    break
                if node["pid"] in timelines:
                    kind, test = f"started by pytest: {r['comm']}", test_at(timelines[node["pid"]], r["start"])
                    break
                above = own_line(node)
                if above is not None:
                    kind, test = f"child of: {kind_of(above['cmd'])}", above["test"] or "(no test)"
                    command = f"{r['comm']} (child of: {above['cmd']})"
                    if r["comm"] == "ipengine":  # an engine forked from a rank server (ddp_tutorial/ipp/forked.py)
                        kind = "ipyparallel engine (forked)"
                    server_parent = parent(node) if kind_of(above["cmd"]) == "rank server (forkserver)" else None
                    if server_parent is not None and server_parent["pid"] in timelines:
                        # a pytest process's server serves many tests: the one running when this was forked
                        test = test_at(timelines[server_parent["pid"]], r["start"])
                    break
        found.append({**r, "kind": kind, "test": test, "command": command})
    return found


def summary(found: list, heavy: float) -> dict:
    by_kind, count, by_test, heavy_n, heavy_cpu = (collections.Counter() for _ in range(5))
    for r in found:
        by_kind[r["kind"]] += r["cpu"]
        count[r["kind"]] += 1
        by_test[r["test"]] += r["cpu"]
        if r["cpu"] >= heavy:
            heavy_n[r["kind"]] += 1
            heavy_cpu[r["kind"]] += r["cpu"]
    return {"total_cpu_s": round(sum(r["cpu"] for r in found), 1), "processes": len(found),
            "heavy": {"threshold_cpu_s": heavy, "processes": sum(heavy_n.values()),
                      "cpu_s": round(sum(heavy_cpu.values()), 1)},
            "by_kind": {k: {"cpu_s": round(v, 1), "processes": count[k], "heavy": heavy_n[k]}
                        for k, v in by_kind.most_common()},
            "by_test": {k: round(v, 1) for k, v in by_test.most_common()},
            # every heavy process: what it was (its command line), under which test
            "heavy_processes": [{"cpu_s": r["cpu"], "kind": r["kind"], "test": r["test"], "command": r["command"][:300]}
                                for r in sorted(found, key=lambda r: -r["cpu"]) if r["cpu"] >= heavy]}


def module_seconds(timelines: dict) -> dict:
    """Seconds each test module (a notebook: its cells) took, setup to teardown of its tests, heaviest first."""
    seconds = collections.Counter()
    for spans in timelines.values():
        for start, end, nodeid in spans:
            seconds[nodeid.split("::")[0]] += end - start
    return {module: round(s, 1) for module, s in seconds.most_common()}


def workers(timelines: dict) -> list:
    """Each pytest process: when its first test started and its last one ended (seconds from the first start
    of any), and how many tests it ran: a worker that ends long before the others shows an idle tail."""
    began = min((spans[0][0] for spans in timelines.values() if spans), default=0.0)
    return sorted(({"pid": pid, "first_s": round(spans[0][0] - began, 1), "last_s": round(spans[-1][1] - began, 1),
                    "tests": len(spans)} for pid, spans in timelines.items() if spans), key=lambda w: w["last_s"])


def run(command: list, folder: Path) -> tuple:
    """COMMAND under process accounting, with the start lines and the test plugin; (exit code, seconds)."""
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE.format(log=str(folder / "starts.log")))
    (folder / "suite_cpu_tests.py").write_text(PLUGIN.format(folder=str(folder)))
    pacct = folder / "pacct"
    pacct.touch()
    if any("pytest" in word for word in command) or "scripts/test.sh" in command:
        command = command + ["-p", "suite_cpu_tests"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])),
               **{HELD: "1"})
    subprocess.run(["accton", str(pacct)], check=True, capture_output=True)
    began = time.monotonic()
    try:
        code = subprocess.run(command, cwd=REPO, env=env).returncode
    finally:
        subprocess.run(["accton", "off"], capture_output=True)
    return code, time.monotonic() - began


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suite_cpu", description=__doc__.split("\n")[0])
    parser.add_argument("--json", default=None, help="write the summary here")
    parser.add_argument("--heavy", type=float, default=1.5, help="CPU-s from which a process counts as heavy")
    parser.add_argument("--top", type=int, default=30, help="tests shown")
    parser.add_argument("command", nargs="*", help="what to run (default: bash scripts/test.sh)")
    args = parser.parse_args(argv)
    missing = [tool for tool in ("accton", "dump-acct") if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        print(f"suite_cpu: needs root and Debian's acct package ({', '.join(missing) or 'not root'}): "
              "apt-get install acct, then run it as root", file=sys.stderr)
        return 2
    if os.environ.get(HELD):
        print("suite_cpu: already inside a suite_cpu run (the machine has one process accounting): not nested",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="suite-cpu-") as tmp:
        folder = Path(tmp)
        code, seconds = run(args.command or ["bash", "scripts/test.sh"], folder)
        timelines = read_timelines(folder)
        found = attribute(read_accounting(folder / "pacct"), read_starts(folder / "starts.log"), timelines)
    report = {"command": args.command or ["bash", "scripts/test.sh"], "returncode": code,
              "wall_s": round(seconds, 1), **summary(found, args.heavy),
              "workers": workers(timelines), "module_seconds": module_seconds(timelines)}
    print(f"{report['total_cpu_s']:.0f} CPU-s in {report['processes']} processes, {seconds:.0f} s; "
          f"{report['heavy']['processes']} of ≥ {args.heavy} CPU-s make {report['heavy']['cpu_s']:.0f} CPU-s")
    print("by kind (CPU-s, processes, heavy ones):")
    for kind, row in report["by_kind"].items():
        print(f"  {row['cpu_s']:8.1f} {row['processes']:6d} {row['heavy']:5d}  {kind}")
    print(f"by test (top {args.top}):")
    for test, cpu in list(report["by_test"].items())[:args.top]:
        print(f"  {cpu:8.1f}  {test}")
    print("pytest processes (first test start, last test end, tests):")
    for w in report["workers"]:
        print(f"  {w['pid']:>8}  {w['first_s']:7.1f} s  {w['last_s']:7.1f} s  {w['tests']:5d}")
    if args.json:
        atomic.write_text(args.json, json.dumps(report, indent=2) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
