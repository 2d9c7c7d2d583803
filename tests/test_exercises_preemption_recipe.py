"""Issue 49 P1: the preemption recipe notebook 05's ``ddp_job`` teaches works on the pinned torch, and the recipe its
check refuses does not.

The solution's job script runs here as a batch script would on one node (as tests/test_torchrun_preemption.py runs
the torchrun template): the same text, with only what needs a cluster taken away (the ``srun …`` prefix, the venv
line, ``scontrol`` for MASTER_ADDR and for the requeue, which echoes instead: the SLURM lab's tests requeue for
real). Its training is a small worker that waits for SIGUSR1 and exits 75, as ``ddp_tutorial.train`` does after
its checkpoint. SIGUSR1 goes to the batch script, as ``#SBATCH --signal=B:USR1@300`` sends it.

* The solution: its trap passes SIGUSR1 to torchrun, which passes it to both workers (``--signals-to-handle``);
  both exit 75, torchrun 1, and the job requeues (STOP=1).
* The attendee's version the check refuses (``ex.ddp_job.signals_variable``): ``TORCHELASTIC_SIGNALS_TO_HANDLE``
  exported instead of the option. SIGUSR1 kills torchrun (138) and its workers never see it.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ddp_tutorial import exercises as ex
from ddp_tutorial.exercises.job_script import TORCHRUN_SIGNALS, solution_text

pytestmark = pytest.mark.exercises

WORKER = """import os, signal, sys, time
from pathlib import Path
Path(f"worker-{os.environ['RANK']}.pid").write_text(str(os.getpid()))
got = []
signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
os.write(1, f"worker {os.environ['RANK']} ready\\n".encode())  # one write: two workers' lines never glue
deadline = time.monotonic() + 30
while not got and time.monotonic() < deadline:
    time.sleep(0.05)
said = "got SIGUSR1: checkpoint, exit 75" if got else "timed out"
os.write(1, f"worker {os.environ['RANK']} {said}\\n".encode())
sys.exit(75 if got else 3)
"""

SIGNALS_OPTION = f"    --signals-to-handle={TORCHRUN_SIGNALS} \\\n"
VARIABLE = f"export TORCHELASTIC_SIGNALS_TO_HANDLE={TORCHRUN_SIGNALS}\n"


def _on_one_node(job: str) -> str:
    """The job's text with what needs a cluster taken away, nothing else; 2 workers on this machine's CPU."""
    edits = [('source "$HOME/ddp-tutorial/.venv/bin/activate"\n', ""),
             ('$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)', "127.0.0.1"),
             ("srun --kill-on-bad-exit=1 python", "python"),
             ("--nproc-per-node 4", "--nproc-per-node 2"),
             ('scontrol requeue "$SLURM_JOB_ID"', 'echo "requeue $SLURM_JOB_ID"')]
    for old, new in edits:
        assert old in job, old
        job = job.replace(old, new)
    return job


def _free_job_id() -> int:
    """A job id whose port (15000 + id % 15000, the solution's rule) is free here."""
    for port in range(15000 + os.getpid() % 10000, 30000):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port - 15000
    raise AssertionError("no free port in 15000–29999")


def _run(job: str, folder: Path, seconds_after_signal: float) -> tuple:
    """Run ``job`` in ``folder``; SIGUSR1 to it once both workers are ready. (exit code, output); nothing of it
    (workers included: torchrun starts each in a session of its own) outlives the call."""
    (folder / "train.py").write_text(WORKER)
    script = folder / "job.sh"
    script.write_text(job)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC_", "PET_"))
           and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}",
               SLURM_JOB_ID=str(_free_job_id()), SLURM_NNODES="1", SLURM_CPUS_PER_TASK="2", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(["/bin/bash", str(script)], cwd=folder, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        # print() writes a line and its newline apart: two workers' lines could glue ("worker 0 readyworker 1 ready")
        while len(set(re.findall(r"worker (\d+) ready", "".join(list(lines))))) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR1)  # to the batch script: what --signal=B:USR1@300 does
        try:
            proc.wait(timeout=seconds_after_signal)
        except subprocess.TimeoutExpired:
            pass
        time.sleep(1.0)  # what a worker still prints after the script ended
        return proc.poll(), "".join(lines)
    finally:
        for pid_file in folder.glob("worker-*.pid"):
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
        reader.join(timeout=10)


@pytest.fixture
def job_folder(tmp_path, monkeypatch):
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    return tmp_path


def test_the_taught_recipe_reaches_every_torchrun_worker_and_requeues(job_folder):
    job = solution_text()
    assert ex.ddp_job.evaluate(job).correct
    code, output = _run(_on_one_node(job), job_folder, seconds_after_signal=60)
    assert "worker 0 got SIGUSR1" in output and "worker 1 got SIGUSR1" in output, output
    assert "requeue " in output, output   # the trap fired: STOP=1
    assert code == 1, (code, output)      # torchrun's own code after passing the signal on


def test_the_refused_recipe_does_not_reach_the_workers(job_folder):
    job = solution_text().replace(SIGNALS_OPTION, "").replace("export OMP_NUM_THREADS=10\n",
                                                                "export OMP_NUM_THREADS=10\n" + VARIABLE)
    assert ex.ddp_job.evaluate(job).key == "ex.ddp_job.signals_variable"
    code, output = _run(_on_one_node(job), job_folder, seconds_after_signal=20)
    assert code == 138, (code, output)    # torchrun killed by SIGUSR1 (128 + 10)
    assert "got SIGUSR1" not in output, output


def test_05_says_how_torchrun_treats_sigusr1_with_the_option_these_runs_use():
    """05's paragraph "torchrun and SIGUSR1" (both languages) names the option the two runs above show working
    and missing (exit 138), and the exit code 1 torchrun gives after passing the signal on."""
    source = (Path(__file__).resolve().parents[1] / "notebooks" / "src" / "05_cluster_slurm.cells").read_text()
    paragraphs = [line for line in source.splitlines() if line.startswith(("**torchrun ve SIGUSR1.**",
                                                                            "**torchrun and SIGUSR1.**"))]
    assert len(paragraphs) == 2, paragraphs
    for paragraph in paragraphs:
        assert f"`torchrun --signals-to-handle={TORCHRUN_SIGNALS} …`" in paragraph, paragraph
        assert "138" in paragraph and "TORCHELASTIC_SIGNALS_TO_HANDLE" in paragraph, paragraph
        assert " 1 " in paragraph or "code 1" in paragraph, paragraph
