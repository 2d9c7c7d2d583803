"""A script that reads the other launcher's convention (issue 47 item 4, ddp_tutorial/convention.py):

* at render time, a rank taken from a helper module of the script's folder that reads SLURM_PROCID is read as
  SLURM's convention (and refused under ``--template torchrun``), not as torchrun's ``env://``;
* at run time, the rank check every own-script job runs its script through stops a process whose
  ``init_process_group`` rank or world size is not the launcher's, in seconds, with the fix named: for real
  under torchrun in an srun task's environment, and on the two-node SLURM lab with each template forced onto
  a script of the other convention (before: "rank 0 of 4" twice, and a wait until the time limit);
* a script that fits its launcher runs through the check as it did without it (``sys.argv``, its folder on
  ``sys.path``, ``__main__``).

Everything runs for real: torchrun, gloo on the CPU, real SLURM.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddp_tutorial.cli import main
from ddp_tutorial.script_check import read_script

USER_SCRIPTS = Path(__file__).resolve().parent / "helpers" / "user_scripts"
FROM_HELPER = USER_SCRIPTS / "rank_from_helper.py"   # rank and world from slurm_numbers.py (SLURM_PROCID)
PROCID_WORLD = USER_SCRIPTS / "procid_world_size.py"  # SLURM_PROCID with WORLD_SIZE (the Princeton mix)
GROUP_RANK = USER_SCRIPTS / "group_rank.py"           # GROUP_RANK × LOCAL_WORLD_SIZE + LOCAL_RANK (torchrun's)
TORCHRUN_STYLE = Path(__file__).resolve().parent / "data" / "own_scripts" / "torchrun_ddp.py"
VENV_BIN = Path(sys.executable).parent
LAUNCHER_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                  "MASTER_PORT", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS")
FIX = {"en": {"torchrun": "--template per-gpu", "slurm": "--template torchrun"},
       "tr": {"torchrun": "--template per-gpu ile yazın", "slurm": "--template torchrun ile yazın"}}


def render(cwd, *args, lang="en"):
    """``ddp-tutorial slurm render`` in a fresh process: (rc, stdout, stderr)."""
    env = dict(os.environ, DDP_TUTORIAL_LANG=lang)
    done = subprocess.run([str(VENV_BIN / "ddp-tutorial"), "slurm", "render", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout, done.stderr


# ---------------------------------------------------------------------------------------------------
# render time: the helper module is read too


def test_a_rank_from_a_helper_module_is_read_as_slurms(tmp_path):
    report = read_script(FROM_HELPER)
    assert report.convention == "slurm" and report.slurm_names == ["SLURM_PROCID", "SLURM_NTASKS"], report
    rc, _, err = render(tmp_path, "--template", "torchrun", "--nodes", "2", "--nproc-per-node", "2",
                        "--script", str(FROM_HELPER))
    assert rc == 2 and "--template per-gpu" in err and "SLURM_PROCID" in err, err
    # ``from . import helper`` and a helper that imports another one are followed the same way
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "numbers.py").write_text("import os\nRANK = int(os.environ['SLURM_PROCID'])\n")
    (tmp_path / "pkg" / "setup_ddp.py").write_text("from numbers import RANK\n")
    (tmp_path / "pkg" / "train.py").write_text(
        "import torch.distributed as dist\nfrom . import setup_ddp\n"
        "dist.init_process_group('gloo', rank=setup_ddp.RANK, world_size=4)\n")
    assert read_script(tmp_path / "pkg" / "train.py").convention == "slurm"
    # a module that is not in the script's folder (here: the standard library's) is not read
    (tmp_path / "alone.py").write_text("import json\nimport torch.distributed as dist\ndist.init_process_group()\n")
    assert read_script(tmp_path / "alone.py").convention == "torchrun"


# ---------------------------------------------------------------------------------------------------
# run time: the rank check, as the rendered job runs it


def checked_command(tmp_path, template: str, script: Path, lang: str = "en") -> tuple:
    """The job's own lines that set up the check (rendered for ``template``), run in bash: (env, CHECKED)."""
    rc, out, err = render(tmp_path, "--template", template, "--nodes", "2", "--nproc-per-node", "2",
                          "--script", str(script), "--script-convention", "torchrun" if template == "torchrun"
                          else "slurm", lang=lang)
    assert rc == 0, err
    block = re.search(r"^export DDP_TUTORIAL_CONVENTION=.*?^CHECKED=.*?$", out, re.M | re.S).group(0)
    done = subprocess.run(["bash", "-c", block + '\nprintf "%s\\0%s\\0%s" "$DDP_TUTORIAL_CONVENTION" '
                           '"$DDP_TUTORIAL_RANK_CHECK" "$CHECKED"'], capture_output=True, text=True, timeout=30)
    meant, code, checked = done.stdout.split("\0")
    return {"DDP_TUTORIAL_CONVENTION": meant, "DDP_TUTORIAL_RANK_CHECK": code}, checked


def torchrun_in_an_srun_task(tmp_path, script: Path, extra_env: dict, checked: str, timeout: float = 120):
    """torchrun with two workers in what one srun task of the torchrun template gives it (SLURM_PROCID=0 …),
    the script run through the check as the job runs it: (rc, output, seconds)."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_NAMES}
    env.update(OMP_NUM_THREADS="1", SLURM_PROCID="0", SLURM_NTASKS="1", SLURM_LOCALID="0", **extra_env)
    start = time.monotonic()
    done = subprocess.run([str(VENV_BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", "--max-restarts",
                           "0", "--no-python", sys.executable, "-u", "-c", checked, str(script), "--dry-run"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
    # a worker stopped by torchrun's SIGTERM between print's two writes leaves stdout without its last newline
    return done.returncode, done.stdout + "\n" + done.stderr, time.monotonic() - start


def said(text):
    """The package's '!! ' lines, wherever another process's unfinished line left them (two processes write
    to one log: 'Hello from rank 0 of 2!! torchrun made this process …' was one line of a clean-clone run)."""
    return [line[line.index("!! "):] for line in text.splitlines() if "!! " in line]


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_under_torchrun_a_slurm_rank_stops_at_once_with_the_fix(tmp_path, lang):
    """Before: the two workers both took rank 0 of 2 from SLURM_PROCID/WORLD_SIZE and waited for rank 1
    (gloo's 30-minute rendezvous); now each says so in one line and the run ends."""
    env, checked = checked_command(tmp_path, "torchrun", PROCID_WORLD, lang)
    rc, output, seconds = torchrun_in_an_srun_task(tmp_path, PROCID_WORLD, env, checked, timeout=60)
    lines = said(output)
    assert rc != 0 and lines, output
    assert all(FIX[lang]["torchrun"] in line and "SLURM_PROCID" in line for line in lines), lines
    # worker 0's numbers happen to be right (0 of 2); worker 1, rank 1 of 2 for torchrun, asked for 0 of 2
    assert len(lines) == 1 and (lang == "tr" or "rank 1 of 2" in lines[0] and "rank 0 of 2" in lines[0]), lines
    assert "RANK_CHECK_PY" not in output and "import importlib" not in output  # the check's code is not echoed
    assert seconds < 30, seconds


def test_a_script_that_fits_runs_through_the_check_as_it_is(tmp_path):
    """torchrun's script under torchrun: the same two results as without the check, its arguments, and its
    folder on sys.path (torchrun_ddp.py imports nothing local, rank_from_helper.py does under srun's names)."""
    env, checked = checked_command(tmp_path, "torchrun", TORCHRUN_STYLE)
    rc, output, _ = torchrun_in_an_srun_task(tmp_path, TORCHRUN_STYLE, env, checked)
    assert rc == 0 and output.count("RESULT ") == 2 and '"argv": ["--dry-run"]' in output, output
    # per-gpu's processes: RANK=$SLURM_PROCID …, the helper module found next to the script
    env, checked = checked_command(tmp_path, "per-gpu", FROM_HELPER)
    base = {k: v for k, v in os.environ.items() if k not in LAUNCHER_NAMES}
    runs = []
    for rank in (0, 1):
        names = dict(SLURM_PROCID=str(rank), SLURM_NTASKS="2", RANK=str(rank), WORLD_SIZE="2",
                     MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29000 + os.getpid() % 1000))
        runs.append(subprocess.Popen([sys.executable, "-c", checked, str(FROM_HELPER)], cwd=tmp_path,
                                     env={**base, **env, **names, "OMP_NUM_THREADS": "1"},
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    try:
        outputs = [run.communicate(timeout=120)[0] for run in runs]
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
                run.wait()
    assert [run.returncode for run in runs] == [0, 0], outputs
    assert all('"world_size": 2, "sum": 3.0' in text for text in outputs), outputs


# ---------------------------------------------------------------------------------------------------
# the two-node SLURM lab: each template forced onto a script of the other convention


@pytest.mark.slurm
@pytest.mark.slow
def test_a_wrong_convention_ends_the_job_in_seconds_on_two_nodes(slurm_cluster, tmp_path, monkeypatch):
    """SLURM_PROCID under torchrun (forced past the render-time reading, as in the review: "rank 0 of 4"
    twice and a wait to the time limit), and GROUP_RANK under per-gpu: each job ends well within a minute,
    its log naming the template that fits. Before the check both ran to their 5-minute limit."""
    lab = slurm_cluster
    monkeypatch.chdir(tmp_path)
    cases = {"torchrun": (PROCID_WORLD, "torchrun"), "per-gpu": (GROUP_RANK, "slurm")}
    jobs, started = {}, time.monotonic()
    for template, (script, meant) in cases.items():
        out = tmp_path / f"{template}.sbatch"
        rc = main(["slurm", "render", "--template", template, "--nodes", "2", "--gpus-per-node", "0",
                   "--nproc-per-node", "2", "--cpus-per-process", "1", "--python", sys.executable,
                   "--time", "00:05:00", "--job-name", f"convention-{template}", "--workdir", str(tmp_path),
                   "--run-dir", f"runs-{template}", "--script", str(script), "--script-convention", meant,
                   "-o", str(out)])
        assert rc == 0, template
        done = subprocess.run(["sbatch", "--parsable", str(out)], env=lab.env, capture_output=True, text=True,
                              timeout=60, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        jobs[template] = done.stdout.strip().split(";")[0]
    from ddp_tutorial import slurm
    for template, job in jobs.items():
        info = slurm.wait(job, timeout=120, poll=0.5, max_poll=2, env=lab.env)
        log_file = tmp_path / f"runs-{template}" / f"slurm-{job}.out"
        log = log_file.read_text() if log_file.exists() else "(no log)"
        assert not info.succeeded, f"{template}: {info.describe()}\n{log}"
        lines = [line for line in said(log) if "init_process_group" in line]
        fix = FIX["en"]["torchrun" if template == "torchrun" else "slurm"]
        assert lines and all(fix in line for line in lines), f"{template}:\n{log}"
        assert "TIME LIMIT" not in log and "RESULT " not in log, log
    assert time.monotonic() - started < 60, time.monotonic() - started


def test_a_script_that_numbers_its_processes_its_own_way_can_turn_the_check_off(tmp_path):
    """A rank other than the launcher's stops the process (exit 2, one !! line) — unless the job says
    DDP_TUTORIAL_RANK_CHECK_OFF=1 (``slurm render --env``), for a script that numbers its processes on purpose:
    here a one-process group of its own while the launcher said rank 1 of 2."""
    own = tmp_path / "own_numbering.py"
    own.write_text("import socket\nimport torch.distributed as dist\n"
                   "s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()\n"
                   "dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=0, world_size=1)\n"
                   "print('JOINED', dist.get_rank(), dist.get_world_size())\ndist.destroy_process_group()\n")
    env, checked = checked_command(tmp_path, "per-gpu", own)
    base = {k: v for k, v in os.environ.items() if k not in LAUNCHER_NAMES}
    names = dict(SLURM_PROCID="1", SLURM_NTASKS="2", RANK="1", WORLD_SIZE="2", OMP_NUM_THREADS="1")
    for off, code, said in ((None, 2, "!! "), ("1", 0, "JOINED 0 1")):
        extra = {"DDP_TUTORIAL_RANK_CHECK_OFF": off} if off else {}
        done = subprocess.run([sys.executable, "-c", checked, str(own)], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, env={**base, **env, **names, **extra})
        assert done.returncode == code and said in done.stdout + done.stderr, (off, done.stdout + done.stderr)
