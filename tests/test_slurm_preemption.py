"""PREEMPTED as SLURM means it (issue 48 item 6), on a lab whose partitions preempt.

The lab: two nodes and two partitions over them, ``low`` (PriorityTier=1) and ``high`` (PriorityTier=2), with
``PreemptType=preempt/partition_prio`` and ``PreemptMode=REQUEUE``: a job of ``high`` that needs the nodes
preempts the jobs of ``low``. What slurmctld shows then (recorded on this lab, SLURM 22.05, polled every 20 ms):

* a job that may be requeued (``--requeue``, ``Requeue=1``): RUNNING → COMPLETING (``Restarts=1``) → PENDING
  (``Reason=BeginTime``) → RUNNING again; never PREEMPTED;
* a job that may not (``--no-requeue``): RUNNING → PREEMPTED, and it stays so: PREEMPTED is final;
* with ``PreemptMode=CANCEL`` even a ``--requeue`` job ends PREEMPTED (``Requeue=1``), final.

So :func:`ddp_tutorial.slurm.wait`, which reads the controller (``scontrol show job``), counts PREEMPTED as
final (``slurm.jobs.TERMINAL``) and follows a requeued job through PENDING to its end. (submitit, which reads
``sacct``'s record of each run, counts PREEMPTED as not done.) Without PREEMPTED in TERMINAL, ``wait`` on a
``--no-requeue`` job that was preempted would wait for its whole timeout: the test then fails.
"""

from __future__ import annotations

import os
import time

import pytest

from ddp_tutorial import slurm

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

PREEMPTION = "PreemptType=preempt/partition_prio\nPreemptMode=REQUEUE\n"


@pytest.fixture(scope="module")
def preempting_lab():
    """A started two-node lab (2 cores per node, no GPUs) whose ``high`` partition preempts ``low``."""
    from slurmlab import LabError, SlurmLab

    class PreemptingLab(SlurmLab):
        def _write_files(self) -> None:
            super()._write_files()
            conf = self.path("etc", "slurm.conf")
            conf.write_text(conf.read_text() + PREEMPTION)

    missing = SlurmLab.missing()
    if missing:
        why = "SLURM test cluster unavailable: needs " + "; ".join(missing)
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail(why + " (CI=true: the SLURM tests must run here, not skip)", pytrace=False)
        pytest.skip(why)
    lab = PreemptingLab(nodes=2, cpus_per_node=2, gpus_per_node=0)
    lab.partitions = {"low": list(lab.node_names), "high": list(lab.node_names)}
    lab.max_time = {"low": "INFINITE", "high": "INFINITE"}
    lab.partition_extra = {"low": " PriorityTier=1", "high": " PriorityTier=2"}
    try:
        lab.start()
    except (LabError, OSError) as error:
        pytest.fail(f"the preempting lab did not start: {str(error).strip()[:2000]}", pytrace=False)
    try:
        yield lab
    finally:
        lab.stop()


def _sbatch(lab, *args: str) -> str:
    done = lab.run(["sbatch", "--parsable", "-o", str(lab.path("jobs", "slurm-%j.out")), *args])
    return done.stdout.strip().split(";")[0]


def _running(lab, job: str, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while slurm.job_info(job, env=lab.env).state != "RUNNING":
        assert time.monotonic() < end, slurm.job_info(job, env=lab.env).describe()
        time.sleep(0.1)


def test_a_preempted_job_is_followed_through_its_requeue_and_one_that_cannot_requeue_ends_preempted(preempting_lab):
    lab = preempting_lab
    # the first run sleeps until it is preempted; the requeued run ends at once
    again = _sbatch(lab, "-p", "low", "-w", "n1", "-n", "2", "--requeue", "--wrap",
                    'if [ "${SLURM_RESTART_COUNT:-0}" -eq 0 ]; then sleep 60; fi; echo run $SLURM_RESTART_COUNT')
    once = _sbatch(lab, "-p", "low", "-w", "n2", "-n", "2", "--no-requeue", "--wrap", "sleep 60")
    for job in (again, once):
        _running(lab, job)
    _sbatch(lab, "-p", "high", "-N", "2", "-n", "4", "--wrap", "sleep 1")

    seen = []
    info = slurm.wait(again, timeout=120, poll=0.2, max_poll=1, env=lab.env, on_change=lambda i: seen.append(i.state))
    assert info.state == "COMPLETED" and info.restarts == 1, (info.describe(), seen)
    assert "PENDING" in seen and "PREEMPTED" not in seen, seen  # requeued: back in the queue, never PREEMPTED
    assert lab.path("jobs", f"slurm-{again}.out").read_text().strip().endswith("run 1")

    started = time.monotonic()
    info = slurm.wait(once, timeout=30, poll=0.2, max_poll=1, env=lab.env)  # preempted long ago: the first poll ends it
    assert info.state == "PREEMPTED" and info.finished, info.describe()
    assert info.fields.get("Requeue") == "0" and info.restarts == 0, info.fields
    assert time.monotonic() - started < 10, "wait() ends when the job is preempted for good, not at its timeout"
