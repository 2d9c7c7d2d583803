"""SLURM's names on every CPU path (issue 47 item 3): a SLURM-convention script that reads
``SLURM_GPUS_ON_NODE`` with ``[]`` (Princeton's mnist_classify_ddp.py: SLURM sets it only in a job with GPUs)
and ``SLURM_CPUS_PER_TASK`` runs on the per-gpu CPU form on the lab, in ``ipp.run`` and in ``ipp.run_script``,
each saying in one line before the run the value it sets (the processes per node: the script's local rank,
``rank - gpus_per_node * (rank // gpus_per_node)``, comes out right; 0 would be a division by zero); and
``check-script --run`` gives ``SLURM_CPUS_PER_TASK`` as sbatch would. Before, each of these ended in a
KeyError. Everything runs for real: real engines, a real ``check-script`` process, the real SLURM lab.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_tutorial.cli import main

SCRIPT = Path(__file__).resolve().parent / "helpers" / "user_scripts" / "gpus_on_node.py"
NOTES = {"en": "reads SLURM_GPUS_ON_NODE, which SLURM sets only in a job with GPUs",
         "tr": "SLURM'ün yalnızca GPU'lu bir işte tanımladığı SLURM_GPUS_ON_NODE'u okuyor"}


def results_of(text: str) -> list:
    found = [json.loads(m.group(1)) for m in re.finditer(r"RESULT (\{[^{}]*\})", text)]
    return sorted(found, key=lambda r: r["rank"])


def test_check_script_run_gives_slurm_cpus_per_task(tmp_path):
    """A dry start that reads SLURM_CPUS_PER_TASK (Princeton's num_workers) was a bare KeyError."""
    script = tmp_path / "workers.py"
    script.write_text('import os\nprint("WORKERS", int(os.environ["SLURM_CPUS_PER_TASK"]), '
                      'int(os.environ["SLURM_PROCID"]))\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    done = subprocess.run([sys.executable, "-m", "ddp_tutorial", "check-script", str(script), "--run"],
                          cwd=tmp_path, env={**env, "DDP_TUTORIAL_LANG": "en"}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WORKERS 1 0" in done.stdout and "KeyError" not in done.stdout + done.stderr, done.stdout


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_render_cpu_form_sets_gpus_on_node_and_says_so(tmp_path, lang, monkeypatch, capsys):
    """--gpus-per-node 0: the job gives its tasks SLURM_GPUS_ON_NODE=<processes per node> (through
    DDP_TUTORIAL_GPUS_ON_NODE: slurmstepd unsets SLURM_GPUS_ON_NODE in a task without GPUs), said in one line;
    a value given with --env is the user's (no line, not overwritten); a script that does not read it gets
    nothing."""
    monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
    common = ["slurm", "render", "--template", "per-gpu", "--nodes", "2", "--gpus-per-node", "0",
              "--nproc-per-node", "3", "--time", "00:05:00"]
    out = tmp_path / "job.sbatch"
    assert main([*common, "--script", str(SCRIPT), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if NOTES[lang] in line]
    assert len(notes) == 1 and " 3" in notes[0] and "--env SLURM_GPUS_ON_NODE=" in notes[0], err
    assert "export DDP_TUTORIAL_GPUS_ON_NODE=3" in out.read_text()
    assert main([*common, "--script", str(SCRIPT), "--env", "SLURM_GPUS_ON_NODE=1", "-o", str(out)]) == 0
    assert NOTES[lang] not in capsys.readouterr().err
    text = out.read_text()
    assert "export DDP_TUTORIAL_GPUS_ON_NODE=1" in text and "GPUS_ON_NODE=3" not in text
    plain = tmp_path / "plain.py"
    plain.write_text(SCRIPT.read_text().replace('int(os.environ["SLURM_GPUS_ON_NODE"])', "1"))
    assert main([*common, "--script", str(plain), "-o", str(out)]) == 0
    assert NOTES[lang] not in capsys.readouterr().err and "export DDP_TUTORIAL_GPUS_ON_NODE" not in out.read_text()


def test_ipp_run_and_run_script_set_it_on_cpu_engines(two_engines, capsys):
    """ipp.run (a function that reads it) and ipp.run_script (the script): the line first, then each rank's
    local rank from the script's own arithmetic; a function that does not read it still does not get it."""
    from ddp_tutorial import ipp

    def princeton_start():
        import os
        gpus_per_node = int(os.environ["SLURM_GPUS_ON_NODE"])
        rank = int(os.environ["SLURM_PROCID"])
        return rank, rank - gpus_per_node * (rank // gpus_per_node), gpus_per_node, \
            int(os.environ["SLURM_CPUS_PER_TASK"]) >= 1

    assert ipp.run(princeton_start, n=2, keep=True) == [(0, 0, 2, True), (1, 1, 2, True)]
    assert NOTES["en"] in capsys.readouterr().out

    def reads_no_gpu_variable():
        import os
        return int(os.environ["SLURM_PROCID"]), "SLURM_GPUS_ON_NODE" in os.environ

    assert ipp.run(reads_no_gpu_variable, n=2, keep=True) == [(0, False), (1, False)]
    assert NOTES["en"] not in capsys.readouterr().out

    assert ipp.run_script(SCRIPT, n=2, output="all", keep=True) == [None, None]
    out = capsys.readouterr().out
    assert NOTES["en"] in out, out
    assert [(r["rank"], r["local_rank"], r["gpus_per_node"], r["sum_of_ranks"]) for r in results_of(out)] == \
        [(0, 0, 2, 1.0), (1, 1, 2, 1.0)], out


@pytest.mark.slurm
@pytest.mark.slow
def test_the_per_gpu_cpu_form_runs_it_on_two_nodes(slurm_cluster, tmp_path):
    """Outsider's job 9: the per-gpu CPU form, 2 nodes × 2 processes, through a plain sbatch."""
    lab = slurm_cluster
    job_file = tmp_path / "job.sbatch"
    assert main(["slurm", "render", "--template", "per-gpu", "--nodes", "2", "--gpus-per-node", "0",
                 "--nproc-per-node", "2", "--cpus-per-process", "1", "--python", sys.executable,
                 "--time", "00:05:00", "--workdir", str(tmp_path), "--run-dir", str(tmp_path / "runs"),
                 "--script", str(SCRIPT), "-o", str(job_file)]) == 0
    done = subprocess.run(["sbatch", "--parsable", str(job_file)], env=lab.env, capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    from ddp_tutorial import slurm
    info = slurm.wait(job, timeout=240, poll=0.5, max_poll=2, env=lab.env)
    log_file = tmp_path / "runs" / f"slurm-{job}.out"
    log = log_file.read_text() if log_file.exists() else "(no log)"
    assert info.succeeded, f"{info.describe()}\n{log}"
    results = results_of(log)
    assert [(r["rank"], r["local_rank"], r["gpus_per_node"], r["workers"]) for r in results] == \
        [(0, 0, 2, 1), (1, 1, 2, 1), (2, 0, 2, 1), (3, 1, 2, 1)], log
    assert {r["sum_of_ranks"] for r in results} == {6.0}, log
