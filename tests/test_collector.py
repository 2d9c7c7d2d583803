"""The cycle collector in the package's own processes (ddp_tutorial/collector.py): off while a command imports torch,
what was imported frozen and the collector on again when its run begins; other processes that import the package
keep CPython's defaults. Real commands, watched by a ``sitecustomize`` that writes down the collector's state as
the process starts and as chosen imports begin (an audit hook). The ranks' server: tests/test_rank_server.py (each
rank starts with the collector on and torch frozen)."""

import json
import os
import subprocess
import sys

import pytest

from ddp_tutorial.collector import runs_a_command

WATCH = '''import gc, json, os, sys
_names = set(os.environ["WATCH_NAMES"].split())
def _write(**seen):
    with open(os.environ["WATCH_OUT"], "a") as out:
        out.write(json.dumps(seen) + "\\n")
def _imported(event, args):  # an import begins: the collector's state at that moment
    if event == "import" and args[0] in _names:
        _names.discard(args[0])
        _write(name=args[0], enabled=gc.isenabled(), frozen=gc.get_freeze_count())
_write(name="(start)", enabled=gc.isenabled(), frozen=gc.get_freeze_count())
sys.addaudithook(_imported)
'''


def _watched(tmp_path, command, names):
    """Run ``command`` with the sitecustomize; {module: (collector on?, objects frozen)} as each import began."""
    (tmp_path / "sitecustomize.py").write_text(WATCH)
    out = tmp_path / "seen.jsonl"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
               WATCH_OUT=str(out), WATCH_NAMES=" ".join(names))
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    return {seen["name"]: (seen["enabled"], seen["frozen"]) for seen in map(json.loads, out.read_text().splitlines())}


@pytest.mark.parametrize("argv, command", [
    (["python", "-m", "ddp_tutorial.train", "--epochs", "1"], True),
    (["python", "-m", "ddp_tutorial.spawn"], True),
    (["python", "-m", "ddp_tutorial", "env"], True),
    (["python", "-m", "ddp_tutorial.gpu", "choose"], True),
    (["/venv/bin/python", "/venv/bin/ddp-tutorial", "train"], True),
    (["python", "-m", "ddp_tutorial.resume", "runs"], False),  # torch-free: nothing to freeze
    (["python", "-m", "pytest", "ddp_tutorial"], False),
    (["python", "-m", "ipykernel_launcher", "-f", "k.json"], False),
    (["python", "-c", "import ddp_tutorial"], False),
    (["python", "train.py", "ddp-tutorial"], False),
])
def test_which_processes_are_the_packages_commands(argv, command):
    assert runs_a_command(argv) is command


def test_a_training_command_imports_torch_with_the_collector_off_and_runs_with_it_on(tmp_path, fashion_root):
    """``python -m ddp_tutorial.train``: the sitecustomize, before the package, sees CPython's default; torch is
    imported with the collector off; during the run (DDP's constructor imports torch._dynamo) it is on, and
    torch's objects are frozen."""
    seen = _watched(tmp_path, [sys.executable, "-m", "ddp_tutorial.train", "--dataset", "fashion-mnist", "--root",
                               str(fashion_root), "--epochs", "1", "--train-subset", "256", "--no-eval", "--quiet"],
                    names=["torch", "torch._dynamo"])
    assert seen["(start)"] == (True, 0), seen
    assert seen["torch"] == (False, 0), f"torch was imported with the collector on: {seen}"
    enabled, frozen = seen["torch._dynamo"]
    assert enabled and frozen > 100_000, f"the run did not resume the collector with torch frozen: {seen}"


def test_a_process_that_only_imports_the_package_keeps_cpythons_collector(tmp_path):
    """A notebook kernel, a test, a user's script: importing ddp_tutorial changes nothing in their collector."""
    seen = _watched(tmp_path, [sys.executable, "-c", "import ddp_tutorial.entry, ddp_tutorial.cli, fractions"],
                    names=["fractions"])
    assert seen == {"(start)": (True, 0), "fractions": (True, 0)}, seen
