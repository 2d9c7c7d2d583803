"""Notebook 05's ddp_job check against a real SLURM (the lab of tests/helpers/slurmlab.py, two nodes shaped
like akya-cuda's: 4 fake GPUs and 40 cores each, its partitions called debug and workshop): sbatch --test-only
is asked only where the job's partition exists; a controller that does not answer (frozen, killed) is named as
such and the job graded by reading; and the lab's sbatch reads #SBATCH lines as the check does."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from ddp_tutorial import exercises as ex
from ddp_tutorial.exercises.core import CORRECT, GRADING_BOUND
from ddp_tutorial.exercises.job_script import SINFO_SECONDS, solution_text

pytestmark = pytest.mark.slurm


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """A started lab of its own (this test freezes and kills its controller), its client variables set."""
    from conftest import _slurm_cannot_run
    from slurmlab import LabError, SlurmLab

    if SlurmLab.missing():
        _slurm_cannot_run("needs " + "; ".join(SlurmLab.missing()))
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    lab = SlurmLab(cpus_per_node=40, gpus_per_node=4)
    try:
        lab.start()
    except (LabError, OSError) as error:
        lab.stop()
        _slurm_cannot_run(f"could not start it ({str(error).strip()[:2000]})")
    for name, value in lab.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SBATCH_PARTITION", raising=False)
    try:
        yield lab
    finally:
        controller = lab.procs.get("slurmctld")
        if controller is not None and controller.poll() is None:
            os.kill(controller.pid, signal.SIGCONT)
        lab.stop()


def _graded(seconds_at_most):
    started = time.monotonic()
    outcome = ex.ddp_job.evaluate(solution_text())
    took = time.monotonic() - started
    assert took < seconds_at_most, (took, outcome.text)
    return outcome


def test_ddp_job_asks_slurm_only_where_the_partition_exists_and_says_when_slurm_is_silent(lab, monkeypatch):
    # EX11: no akya-cuda here (a class reservation set, as the instructor kit sets it): graded by reading.
    monkeypatch.setenv("SBATCH_RESERVATION", "class")
    outcome = _graded(GRADING_BOUND)
    assert outcome.status == CORRECT, outcome.text
    assert "this SLURM has no partition akya-cuda" in outcome.text, outcome.text
    assert "sbatch --test-only was not asked" in outcome.text, outcome.text
    monkeypatch.delenv("SBATCH_RESERVATION")

    # Where the job's partition exists (SBATCH_PARTITION overrides the script's line, as for sbatch), it is asked.
    monkeypatch.setenv("SBATCH_PARTITION", "debug")
    outcome = _graded(GRADING_BOUND)
    assert outcome.status == CORRECT and "sbatch --test-only accepts it here" in outcome.text, outcome.text

    # EX01: the lab's sbatch skips a #SBATCH line below the first command, and the check names it.
    job = solution_text().replace("#SBATCH --nodes=2\n", "").replace(
        "export OMP_NUM_THREADS=10\n", "export OMP_NUM_THREADS=10\n#SBATCH --nodes=2\n")
    script = lab.dir / "late.sbatch"
    script.write_text(job)
    said = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True,
                          env=dict(lab.env, SBATCH_PARTITION="debug"), timeout=30).stderr
    assert "on nodes n1 in partition debug" in said, said  # one node: --nodes=2 was not read
    assert ex.ddp_job.evaluate(job).key == "ex.ddp_job.late_directive"
    assert lab.queue() == []  # --test-only submitted nothing

    # EX12: a frozen controller: SLURM's silence is said, within the check's bound, and the job graded by reading.
    controller = lab.procs["slurmctld"]
    os.kill(controller.pid, signal.SIGSTOP)
    try:
        outcome = _graded(SINFO_SECONDS + 5)
    finally:
        os.kill(controller.pid, signal.SIGCONT)
    assert outcome.status == CORRECT, outcome.text
    assert f"SLURM did not answer sinfo within {SINFO_SECONDS} s" in outcome.text, outcome.text

    # SK05: a killed controller: the same.
    controller.kill()
    controller.wait(timeout=10)
    outcome = _graded(SINFO_SECONDS + 5)
    assert outcome.status == CORRECT, outcome.text
    assert "SLURM did not answer sinfo" in outcome.text, outcome.text


def test_sbatch_ignores_a_directive_with_blanks_before_it(lab):
    """The reading the check's `indented` message rests on, asked of the lab's sbatch."""
    script = lab.dir / "indented.sbatch"
    script.write_text("#!/bin/bash\n  #SBATCH --nodes=2\n#SBATCH --ntasks-per-node=2\nsrun hostname\n")
    said = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True,
                          env=lab.env, timeout=30).stderr
    assert "2 processors on nodes n1 " in said, said
