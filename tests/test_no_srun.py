"""A job script that forgot ``srun``, and a job submitted from another folder (issue 47 items 5 and 6a):

* the package's training run by the batch script itself in a job of several SLURM tasks (no ``srun`` before
  it) stops in seconds with one line that names ``srun``, in English and Turkish; before, it was read as rank
  0 of all the job's tasks and waited for the others until its ``--timeout`` or the time limit (outsider jobs
  15 and 16). The batch step's environment is SLURM's own, as the lab's batch step shows it: ``SLURM_JOB_ID``,
  the job's ``SLURM_NTASKS``, ``SLURM_PROCID=0`` and no ``SLURM_STEP_ID``;
* ``slurm render --workdir`` writes an absolute ``#SBATCH --chdir``, so a plain ``sbatch`` from another folder
  starts the job where it was meant (before: ``--chdir=../../x``, and slurmstepd went to /tmp, job 14).

Everything runs for real: the package's trainer and the two-node SLURM lab.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddp_tutorial.cli import main
from ddp_tutorial.i18n import TutorialError
from ddp_tutorial.whoami import resolve_environment

# The batch step of `sbatch --nodes=2 --ntasks-per-node=2` on the lab (its SLURM_* launcher names, as printed
# by `env` in the job script itself).
BATCH_STEP = {"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2",
              "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NPROCS": "4", "SLURM_NTASKS": "4",
              "SLURM_NTASKS_PER_NODE": "2", "SLURM_PROCID": "0", "SLURM_TASKS_PER_NODE": "2(x2)"}
NEEDLE = {"en": "Put srun before the command", "tr": "komutun başına srun ekleyin"}


def test_the_batch_step_of_a_job_of_several_tasks_is_not_rank_0_of_them():
    with pytest.raises(TutorialError) as caught:
        resolve_environment(environ=BATCH_STEP)
    assert caught.value.key == "env.no_srun" and "srun" in str(caught.value), caught.value
    # The seed's per-node parent run by the batch script of a two-node job: the same mistake.
    with pytest.raises(TutorialError) as caught:
        resolve_environment(local_rank=0, nproc_per_node=1, environ=dict(BATCH_STEP, SLURM_NPROCS="2",
                                                                         SLURM_NTASKS="2"))
    assert caught.value.key == "env.no_srun"
    # One node, four tasks, no srun: rank 0 of 4 would wait all the same.
    one_node = dict(BATCH_STEP, SLURM_JOB_NUM_NODES="1", SLURM_NNODES="1", SLURM_JOB_NODELIST="n1",
                    SLURM_TASKS_PER_NODE="4")
    with pytest.raises(TutorialError):
        resolve_environment(environ=one_node)


def test_srun_steps_and_one_task_jobs_are_read_as_before():
    step = dict(BATCH_STEP, SLURM_STEP_ID="0", SLURM_STEP_NUM_NODES="2", SLURM_STEP_TASKS_PER_NODE="2(x2)")
    env = resolve_environment(environ=step)
    assert (env.scheme, env.rank, env.world_size, env.local_world_size) == ("slurm", 0, 4, 2)
    one_task = dict(BATCH_STEP, SLURM_NPROCS="1", SLURM_NTASKS="1", SLURM_JOB_NUM_NODES="1", SLURM_NNODES="1",
                    SLURM_TASKS_PER_NODE="1", SLURM_NTASKS_PER_NODE="1")
    assert resolve_environment(environ=one_task).world_size == 1
    # ddp-tutorial train --nproc-per-node 4 in a one-task job (the class's own jobs): its children are given
    # their node, so the batch step is where they belong.
    children = [resolve_environment(local_rank=i, nproc_per_node=4, node_rank=0, num_nodes=1, environ=one_task)
                for i in range(4)]
    assert [c.rank for c in children] == [0, 1, 2, 3]
    # torchrun started by the batch script of a one-node job reads torchrun's names, as before.
    torchrun = dict(BATCH_STEP, RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", MASTER_PORT="29500")
    assert resolve_environment(environ=torchrun).scheme == "torchrun"


def _wait(lab, job: str, limit: float) -> str:
    """The job's final state (``slurm.wait``; TIMEOUT of the wait itself after ``limit`` seconds)."""
    from ddp_tutorial import slurm
    try:
        return slurm.wait(job, timeout=limit, poll=0.5, max_poll=1, env=lab.env).state
    except TutorialError:
        subprocess.run(["scancel", job], env=lab.env, capture_output=True, timeout=30)
        return "STILL RUNNING"


@pytest.mark.slurm
@pytest.mark.slow
def test_a_two_node_job_without_srun_stops_in_seconds_naming_srun(slurm_cluster, tmp_path):
    lab = slurm_cluster
    jobs = {}
    for lang in ("en", "tr"):
        script = tmp_path / f"nosrun-{lang}.sbatch"
        script.write_text(
            "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=2\n#SBATCH --cpus-per-task=1\n"
            f"#SBATCH --time=00:03:00\n#SBATCH --output={tmp_path}/nosrun-{lang}-%j.out\n"
            f"export DDP_TUTORIAL_LANG={lang}\n"
            f"{sys.executable} -m ddp_tutorial.train --dataset mnist --epochs 1 --device cpu --timeout 60\n")
        done = subprocess.run(["sbatch", "--parsable", str(script)], env=lab.env, capture_output=True, text=True,
                              timeout=60, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        jobs[lang] = (done.stdout.strip().split(";")[0], time.monotonic())
    for lang, (job, started) in jobs.items():
        state = _wait(lab, job, 60)
        took = time.monotonic() - started
        log = Path(tmp_path / f"nosrun-{lang}-{job}.out")
        text = log.read_text() if log.exists() else "(no log)"
        assert took < 30 and state.startswith("FAILED"), (lang, state, round(took, 1), text)
        assert NEEDLE[lang] in " ".join(text.split()), (lang, text)
        assert "Traceback" not in text, text


@pytest.mark.slurm
@pytest.mark.slow
def test_a_job_rendered_with_a_relative_workdir_runs_there_when_submitted_from_elsewhere(
        slurm_cluster, tmp_path, monkeypatch):
    lab = slurm_cluster
    (tmp_path / "jobs" / "here").mkdir(parents=True)
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "where.py").write_text(
        "import os\nprint('CWD', os.getcwd(), 'rank', os.environ['SLURM_PROCID'], flush=True)\n")
    monkeypatch.chdir(tmp_path / "jobs" / "here")
    rc = main(["slurm", "render", "--template", "per-gpu", "--nodes", "1", "--nproc-per-node", "1",
               "--python", sys.executable, "--time", "00:05:00", "--job-name", "chdir", "--workdir", "../../project",
               "--script", "where.py", "-o", "where.sbatch"])
    assert rc == 0
    text = (tmp_path / "jobs" / "here" / "where.sbatch").read_text()
    assert re.search(r"^#SBATCH --chdir=(\S+)", text, re.M).group(1) == str(tmp_path / "project"), text
    # Submitted from two folders up, as job 14 was.
    done = subprocess.run(["sbatch", "--parsable", "jobs/here/where.sbatch"], env=lab.env, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    state = _wait(lab, job, 120)
    log = tmp_path / "project" / "runs" / f"slurm-{job}.out"
    out = log.read_text() if log.exists() else "(no log)"
    assert state.startswith("COMPLETED"), (state, out)
    assert f"CWD {tmp_path / 'project'} rank 0" in out, out
