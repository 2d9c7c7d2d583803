"""``ddp-tutorial check-script`` never claims what it has not shown (issue 47 item 2), with scripts written here
in tests/helpers/user_scripts/, each marking with ``# CUDA`` the lines that need a GPU:

* a GPU's number followed through parameters into functions and classes, whatever its name;
* ``torch.cuda.device_count()`` used as a count (the seed's job that "completed" having trained nothing),
  not when it is only asked about;
* the seed's ``.to(gpu_id_in_node)``; Princeton's file after the checker's five suggestions of round 4;
* lines that already choose by device, and defaults the command line overrides, are not lines to change;
* "ready for a CPU" only after ``--run`` started the script here with no GPU visible and it ended with 0;
  a failed start names its error line; one past the limit is stopped with all its processes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ddp_tutorial.cli import main
from ddp_tutorial.script_check import read_script

USER_SCRIPTS = Path(__file__).resolve().parent / "helpers" / "user_scripts"
CLI = [sys.executable, "-m", "ddp_tutorial"]


def marked(path: Path) -> list:
    return [n for n, line in enumerate(path.read_text().splitlines(), 1) if line.endswith("# CUDA")]


@pytest.mark.parametrize("name, kinds", [
    ("device_int_parameter.py", ["to_cuda", "device_ids", "to_cuda", "device_number_arg", "device_number_arg",
                                 "to_cuda"]),
    ("device_count_count.py", ["device_count_count", "device_count_count"]),
    ("seed_per_node.py", ["to_cuda", "to_cuda", "to_cuda", "device_count_count"]),
    ("princeton_after_suggestions.py", ["gpu_variable", "device_number_arg", "device_number_arg"]),
])
def test_every_line_that_needs_a_gpu_is_listed_and_only_those(name, kinds):
    """Each script's ``# CUDA`` lines, with the finding that says why (the old checker missed the int passed
    on under a name of the script's own, ``device_count()`` as a count, ``.to(gpu_id_in_node)`` and
    ``SLURM_GPUS_ON_NODE``)."""
    script = USER_SCRIPTS / name
    report = read_script(script)
    assert [(f.line, f.kind) for f in report.findings] == list(zip(marked(script), kinds)), report.findings


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_lines_that_already_choose_are_not_to_change(lang, monkeypatch, capsys):
    """nanoGPT's layout made to run everywhere: rc 0; its config defaults are named as defaults to give
    on a CPU, and the verdict says it was not run (never "ready")."""
    monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
    script = USER_SCRIPTS / "chooses_by_device.py"
    assert main(["check-script", str(script)]) == 0
    out = capsys.readouterr().out
    report = read_script(script)
    assert report.findings == [] and [(f.line, f.kind) for f in report.defaults] == [
        (13, "default_nccl"), (14, "default_cuda")]
    expected = {"en": ("2 default(s) that pick a GPU", "not run here", "give gloo there"),
                "tr": ("GPU seçen 2 varsayılan değer", "burada çalıştırılmadı", "orada gloo verin")}[lang]
    assert all(part in out for part in expected), out
    assert "ready" not in out and "hazır" not in out


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_device_count_as_a_count_says_nothing_would_train(lang, monkeypatch, capsys):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
    script = USER_SCRIPTS / "seed_per_node.py"
    assert main(["check-script", str(script)]) == 1
    out = capsys.readouterr().out
    entry = re.search(rf"^  {re.escape(str(script))}:31: .*\n      → (.*)$", out, re.M)
    assert entry and {"en": "mp.spawn(nprocs=0) starts nothing", "tr": "mp.spawn(nprocs=0) hiçbir süreç"}[lang] \
        in entry.group(1), out


def test_an_argument_default_of_nccl_is_a_default_not_a_line():
    from ddp_tutorial.script_check import read_source
    source = textwrap.dedent("""\
        import argparse, os
        import torch.distributed as dist
        parser = argparse.ArgumentParser()
        parser.add_argument("--backend", default="nccl")
        parser.add_argument("--device", default="cuda")
        args = parser.parse_args()
        dist.init_process_group(args.backend)
        dist.destroy_process_group()
        """)
    report = read_source(source)
    assert report.findings == [] and [(f.line, f.kind) for f in report.defaults] == [
        (4, "default_nccl"), (5, "default_cuda")]


# ---------------------------------------------------------------------------------------------------
# --run: shown, or said that it was not


def check(tmp_path, source: str, *options: str, lang: str = "en"):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    env = {**os.environ, "DDP_TUTORIAL_LANG": lang, "SLURM_GPUS_ON_NODE": "4"}
    done = subprocess.run(CLI + ["check-script", str(script), "--run", *options], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_ready_only_after_a_start_here_that_ended_with_0(tmp_path, lang):
    """One process of a one-process job, no GPU visible, none of SLURM's GPU-only variables (set here in
    the caller's environment), with the script's own arguments."""
    rc, out, err = check(tmp_path, """\
        import os, sys
        names = ("CUDA_VISIBLE_DEVICES", "RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NPROCS", "SLURM_GPUS_ON_NODE")
        print("SEEN", {n: os.environ.get(n) for n in names}, sys.argv[1:])
        """, "--script-args", "--epochs=1 --dry-run", lang=lang)
    assert rc == 0, (out, err)
    assert "SEEN {'CUDA_VISIBLE_DEVICES': '', 'RANK': '0', 'WORLD_SIZE': '1', 'SLURM_PROCID': '0', " \
           "'SLURM_NPROCS': '1', 'SLURM_GPUS_ON_NODE': None} ['--epochs=1', '--dry-run']" in out, out
    assert {"en": "ready for a CPU", "tr": "CPU'ya hazır"}[lang] in out, out


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_a_start_that_fails_names_its_error_line(tmp_path, lang):
    """What the reading cannot see (a device from a table): the start fails, rc 1, and the error line is
    named with the script's line."""
    rc, out, err = check(tmp_path, """\
        CONFIG = {"device": "gpu"}

        def move():
            raise RuntimeError("Found no NVIDIA driver on your system.")

        move()
        """, lang=lang)
    assert rc == 1, (out, err)
    assert "train.py:4: RuntimeError: Found no NVIDIA driver on your system." in out, out
    assert {"en": "exit code 1", "tr": "1 çıkış koduyla başarısız"}[lang] in out, out
    assert "ready" not in out and "hazır" not in out
    assert "Traceback" in err  # the script's own output passes through


def test_a_start_past_the_limit_is_stopped_with_its_children(tmp_path):
    rc, out, err = check(tmp_path, """\
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        open("pids", "w").write(f"{child.pid}\\n")
        print("started", flush=True)
        time.sleep(300)
        """, "--run-seconds", "3")
    assert rc == 0, (out, err)
    assert "stopped at the limit" in out and "ready" not in out, out
    child = int((tmp_path / "pids").read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and Path(f"/proc/{child}").exists() and \
            not Path(f"/proc/{child}/stat").read_text().split(") ")[1].startswith("Z"):
        time.sleep(0.1)
    assert not Path(f"/proc/{child}").exists() or \
        Path(f"/proc/{child}/stat").read_text().split(") ")[1].startswith("Z"), "the script's child outlived it"


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "abc"])
def test_a_wrong_run_limit_is_one_line(tmp_path, value):
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    done = subprocess.run(CLI + ["check-script", str(script), "--run", f"--run-seconds={value}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "--run-seconds" in done.stderr, done.stderr


def test_unclosed_quotes_in_script_args_are_one_line(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    assert main(["check-script", str(script), "--run", "--script-args", "--name 'a b"]) == 2
    assert "close its quotes" in capsys.readouterr().err


def test_a_cuda_tensor_the_reading_cannot_see_fails_the_start(tmp_path):
    """With torch: a device from a table is invisible to the reading ("not run"), and the start here
    shows the CUDA error with its line."""
    source = """\
        import torch
        CONFIG = {"device": "cuda"}
        x = torch.zeros(1, device=CONFIG["device"])
        """
    from ddp_tutorial.script_check import read_source
    assert read_source(textwrap.dedent(source)).findings == []
    rc, out, err = check(tmp_path, source)
    assert rc == 1 and "train.py:3: RuntimeError" in out, (out, err)
