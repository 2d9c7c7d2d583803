"""A SLURM controller that does not answer (frozen, restarting, down) is not a verdict on a job (issue 44:
SW01, SK01, SK02, SK04), on the real two-node lab.

slurmctld is frozen with SIGSTOP while a job runs: ``slurm.wait`` and ``ddp-tutorial slurm wait`` keep
waiting, say once that the controller does not answer, and report the job's real end after SIGCONT;
``slurm status`` and site-check's SLURM line say the controller does not answer. The clients here read a
copy of the lab's slurm.conf with ``MessageTimeout=2`` (the lab's 20 makes one unanswered ``scontrol`` last
40 s), so a 10 s freeze outlasts the "does not know the job" budget the test gives ``wait`` (2 s) twice over.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ddp_tutorial import slurm
from ddp_tutorial.i18n import TutorialError
from ddp_tutorial.site_check import check_slurm

REPO = Path(__file__).resolve().parent.parent
FREEZE_S = 10.0


def quick_client(lab, name: str) -> dict:
    """``lab.env`` with a slurm.conf whose MessageTimeout is 2 s (clients only: the daemons keep theirs)."""
    conf = re.sub(r"(?m)^MessageTimeout=\d+$", "MessageTimeout=2", Path(lab.env["SLURM_CONF"]).read_text())
    path = lab.path("etc", f"{name}.conf")  # beside slurm.conf: gres.conf is looked up there
    path.write_text(conf)
    return dict(lab.env, SLURM_CONF=str(path), DDP_TUTORIAL_LANG="en", PYTHONUNBUFFERED="1")


def running(job: str, env: dict, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while slurm.job_info(job, env=env).state != "RUNNING":
        assert time.monotonic() < deadline, slurm.job_info(job, env=env)
        time.sleep(0.3)


@pytest.mark.slurm
def test_wait_outlasts_a_frozen_controller_and_reports_the_real_end(slurm_cluster, tmp_path):
    lab = slurm_cluster
    env = quick_client(lab, "quick-client-sw01")
    job = lab.run(["sbatch", "--parsable", f"--output={tmp_path}/slurm-%j.out", "--wrap", "sleep 16"]).stdout.strip()
    running(job, env)
    seen, outcome = [], {}

    def waiter() -> None:
        try:
            outcome["info"] = slurm.wait(job, timeout=120, poll=0.3, max_poll=1, env=env, forgotten_after=2,
                                         on_change=seen.append)
        except Exception as error:  # noqa: BLE001 - the assertion below shows it
            outcome["error"] = error

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    cli = subprocess.Popen([sys.executable, "-m", "ddp_tutorial", "slurm", "wait", job, "--poll", "1",
                            "--timeout", "120"], env=env, cwd=str(REPO), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    controller = int(lab.path("run", "slurmctld.pid").read_text())
    time.sleep(1.5)  # both have seen RUNNING
    os.kill(controller, signal.SIGSTOP)
    frozen = time.monotonic()
    try:
        status = subprocess.run([sys.executable, "-m", "ddp_tutorial", "slurm", "status", job], env=env,
                                cwd=str(REPO), capture_output=True, text=True, timeout=60)
        line, _ = check_slurm(dict(partition="", account="", reservation=""), 10, env=env)
        time.sleep(max(0.0, FREEZE_S - (time.monotonic() - frozen)))
    finally:
        os.kill(controller, signal.SIGCONT)
    thread.join(120)
    out, err = cli.communicate(timeout=120)

    assert "error" not in outcome, outcome.get("error")
    assert outcome["info"].state == "COMPLETED", outcome["info"]
    silent = [info for info in seen if info.no_answer]
    assert len(silent) == 1 and seen.index(silent[0]) > 0, [(i.state, i.no_answer) for i in seen]
    assert seen[0].state == "RUNNING" and seen[-1].state == "COMPLETED"
    assert re.search(r"Socket timed out|Unable to contact", silent[0].no_answer), silent[0].no_answer

    assert cli.returncode == 0, out + err
    lines = out.splitlines()
    said = [line for line in lines if "the SLURM controller does not answer" in line]
    assert len(said) == 1 and "Jobs keep running" in said[0], out
    assert lines[0] == f"job {job}: RUNNING" and lines[-1] == f"job {job}: COMPLETED, exit code 0", out
    assert "does not know" not in out + err and "Traceback" not in err

    assert status.returncode == 1 and "Traceback" not in status.stderr, status.stdout + status.stderr
    assert f"job {job}: the SLURM controller does not answer" in status.stdout, status.stdout   # SK02
    assert line.key == "site.slurm_no_answer" and not line.ok, line                              # SK04
    assert "refuses" not in line.text("en") and "check the names" not in line.text("en")
    assert "denetleyicisi yanıt vermiyor" in line.text("tr")


def test_the_controllers_own_answer_that_it_does_not_know_a_job_still_ends_the_wait(tmp_path):
    """Only "Invalid job id specified" (and no accounting record) means "does not know job N" (a stand-in
    scontrol prints SLURM's own line: no controller needed)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / "scontrol"
    stand_in.write_text("#!/bin/sh\necho 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1\n")
    stand_in.chmod(0o755)
    env = dict(os.environ, PATH=str(bin_dir))  # no sacct either
    started = time.monotonic()
    with pytest.raises(TutorialError) as caught:
        slurm.wait("7", timeout=30, poll=0.1, max_poll=0.2, env=env, forgotten_after=0.5)
    assert caught.value.key == "slurm.unknown_job", caught.value
    assert time.monotonic() - started < 10
    assert not slurm.job_info("7", env=env).no_answer
