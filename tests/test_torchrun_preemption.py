"""Preemption under torchrun, with a real SIGUSR1, launched exactly as the torchrun template launches it.

The rendered ``slurm/torchrun.sbatch`` runs here as a batch script would on one node: the same text, with
only the ``srun …`` prefix of its launch taken away (the step is then torchrun itself, the process srun
would start on this node, and the script's trap signals torchrun alone), and SLURM's variables set as SLURM
sets them (``scontrol show hostnames`` reads a one-node slurm.conf). Under srun, slurmstepd signals every
process of the step, workers included: the SLURM lab's test covers that, for every template
(tests/test_slurm_jobs.py::test_sigusr1_reaches_every_worker_of_every_template_on_the_lab, which reads the
requeued jobs it shares with the weights test named below).
SIGUSR1 goes to the batch script, as ``#SBATCH --signal=B:USR1@S`` and ``scancel --signal=USR1 --batch``
send it: its trap passes it to torchrun, which must pass it to both workers (``--signals-to-handle``:
torchrun overwrites an exported ``TORCHELASTIC_SIGNALS_TO_HANDLE``, so without the option SIGUSR1 kills
torchrun, exit 138, and the workers train on). Every worker checkpoints and exits 75, the script exits 75,
and the rerun (``SLURM_RESTART_COUNT=1``) resumes at the saved step. The requeue itself (``scontrol
requeue``) needs a controller: the SLURM lab's test covers it for every template
(tests/test_slurm_jobs.py::test_requeue_resumes_with_the_same_weights).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddp_tutorial import slurm

REPO = Path(__file__).resolve().parent.parent
# 64 steps per epoch and rank here (≈0.2 s quiet): the signal is sent when the test has read epoch 0's line, and a
# loaded test process may read it seconds late (a CI run: 6 epochs were over first); 30 give it that runway, and a
# stopped run and its resumed rest take about as long as one uninterrupted run
EPOCHS = 30

LAUNCH = re.compile(r"^srun [^\n]*\\\n\s*(?=\"\$PYTHON\" -m torch\.distributed\.run)", re.M)


def _local_script(text: str) -> str:
    """The rendered batch script, its launch run on this node: the ``srun …`` prefix removed, nothing else."""
    local, count = LAUNCH.subn("", text)
    assert count == 1, "the torchrun template's launch is not `srun … \\ \"$PYTHON\" -m torch.distributed.run`"
    return local


def _free_port_from_15000() -> int:
    """A free port the script's rule (15000 + job id % 15000) gives for some job id."""
    import socket
    for port in range(15000 + os.getpid() % 10000, 30000):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port in 15000–29999")


def _session(pid: int) -> list:
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == pid and fields[0] not in "ZX":  # field 6 of stat: the session id
            members.append(int(stat.parent.name))
    return members


def _run_job(script: Path, work: Path, job_id: int, restart: int, usr1_after: str = "") -> tuple:
    """Run the batch script as SLURM would on one node; with ``usr1_after``, send the script SIGUSR1 once
    its output shows that line. Returns (exit code, output). Nothing of it outlives the call."""
    conf = work / "slurm.conf"
    conf.write_text("ClusterName=local\nSlurmctldHost=localhost\nNodeName=localhost CPUs=2\n"
                    "PartitionName=local Nodes=localhost\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "DDP_TUTORIAL_", "TORCHELASTIC_", "PET_"))
           and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(SLURM_CONF=str(conf), SLURM_JOB_ID=str(job_id), SLURM_JOB_NODELIST="localhost", SLURM_NNODES="1",
               SLURM_JOB_NUM_NODES="1", SLURM_CPUS_PER_TASK="2", SLURM_RESTART_COUNT=str(restart),
               DDP_TUTORIAL_LANG="en", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(["/bin/bash", str(script)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = []
    try:
        signalled = not usr1_after
        for line in proc.stdout:
            lines.append(line)
            if not signalled and line.startswith(usr1_after):
                assert proc.poll() is None, "the job ended before the test read its line " \
                    f"{usr1_after!r} (a test process starved for seconds):\n{''.join(lines)}"
                proc.send_signal(signal.SIGUSR1)  # to the batch script: what --signal=B:USR1@S does
                signalled = True
        proc.wait(timeout=120)
        assert signalled, f"no line {usr1_after!r}:\n{''.join(lines)}"
        deadline = time.monotonic() + 10
        while _session(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _session(proc.pid), "processes of the job outlived its batch script:\n" + "".join(lines)
        return proc.returncode, "".join(lines)
    finally:
        for pid in _session(proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigusr1_reaches_every_torchrun_worker_checkpoint_75_and_resume(mnist_root, tmp_path):
    """The torchrun template's own launch: SIGUSR1 to the batch script → both workers stop at one step with a
    checkpoint and exit 75 → the script exits 75 → the rerun resumes at that step and finishes."""
    if shutil.which("scontrol") is None:
        pytest.skip("needs SLURM's scontrol: the script takes MASTER_ADDR from `scontrol show hostnames`")
    spec = slurm.JobSpec(template="torchrun", nodes=1, nproc_per_node=2, cpus_per_process=1, python=sys.executable,
                         workdir=str(REPO), run_dir=str(tmp_path / "runs"), root=str(mnist_root), dataset="mnist",
                         epochs=EPOCHS, batch_size=32, seed=0, time="00:10:00", signal_seconds=90,
                         train_args=("--no-eval", "--no-progress"))
    text = slurm.render(spec)
    assert "--signals-to-handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1" in text
    script = slurm.write_script(_local_script(text), tmp_path / "job.sh")
    job_id = _free_port_from_15000() - 15000

    began = time.monotonic()
    code, output = _run_job(script, tmp_path, job_id, restart=0, usr1_after="epoch 0:")
    stopped = re.findall(r"rank (\d): stop requested \(SIGUSR1\) — checkpoint written at epoch (\d+), step (\d+); "
                         r"exiting with code 75", output)
    assert sorted(rank for rank, _, _ in stopped) == ["0", "1"], output  # both workers, not torchrun's death
    assert len({(epoch, step) for _, epoch, step in stopped}) == 1, output  # at the same step
    epoch, step = int(stopped[0][1]), int(stopped[0][2])
    assert code == 75, (code, output)
    assert "training finished with exit code 1" in output, output  # torchrun's own code after forwarding
    assert f"epoch {EPOCHS - 1}:" not in output, output            # the run did stop
    first = time.monotonic() - began

    code, output = _run_job(script, tmp_path, job_id, restart=1)
    assert code == 0, (code, output)
    assert "restart 1," in output
    result = json.loads((tmp_path / "runs" / f"result-{job_id}.json").read_text())
    assert result["resumed_from"] == {"epoch": epoch, "step": step}, (result["resumed_from"], output)
    assert len(result["epochs"]) == EPOCHS and result["launcher"] == "torchrun"
    print(f"stopped at epoch {epoch} step {step}; stop run {first:.1f} s, resumed run "
          f"{time.monotonic() - began - first:.1f} s")
