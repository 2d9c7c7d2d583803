"""``ddp-tutorial site-check``, the day-before check (issue 34 item 7), on the real two-node SLURM lab.

It runs on the lab's login node (the hub namespace, ``lab.login_command``), as the instructor runs it on
the site's login node: green with the lab's partition and a reservation created for the class, and with a
reservation that does not exist and a missing data root it says what to do, line by line, exit code 1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddp_tutorial import slurm
from ddp_tutorial.site_check import Line, node_script
from ddp_tutorial.slurm.jobs import reservation_note

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def class_data(tmp_path_factory) -> Path:
    from idx_files import write_mnist_like
    root = tmp_path_factory.mktemp("class-data")
    for dataset in ("mnist", "fashion-mnist"):
        write_mnist_like(root, dataset=dataset, n_train=256, n_test=64, seed=0)
    return root


def site_check(lab, *args: str, lang: str = "en") -> subprocess.CompletedProcess:
    environ = dict(lab.env, DDP_TUTORIAL_LANG=lang, PYTHONUNBUFFERED="1")
    environ.pop("DDP_TUTORIAL_ROOT", None)
    return subprocess.run(lab.login_command([sys.executable, "-m", "ddp_tutorial", "site-check", "--timeout", "90",
                                             *args]),
                          env=environ, capture_output=True, text=True, timeout=300, cwd=str(REPO))


@pytest.mark.slurm
def test_site_check_is_green_on_the_lab_with_a_class_reservation(slurm_cluster, class_data):
    lab = slurm_cluster
    lab.run(["scontrol", "create", "reservation", "ReservationName=class", "Users=root", "Nodes=n1,n2",
             "StartTime=now", "Duration=30", "Flags=IGNORE_JOBS"])
    try:
        done = site_check(lab, "--root", str(class_data), "--partition", "debug", "--reservation", "class")
    finally:
        lab.run(["scontrol", "delete", "ReservationName=class"], check=False)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    checks = lines[:-1]
    assert len(checks) == 7 and all(line.startswith("ok   ") for line in checks), done.stdout
    assert "reservation class" in checks[4] and "partition debug" in checks[4], checks[4]
    assert "reached this node at 10.233.0.254:" in checks[5], checks[5]
    assert checks[6].startswith("ok   interface rule on n") and "(10.233.0." in checks[6], checks[6]
    assert " lo " not in checks[6]
    assert lines[-1] == "All 7 checks ok."


@pytest.mark.slurm
def test_site_check_says_what_to_do_for_a_wrong_reservation_and_missing_data(slurm_cluster, tmp_path):
    done = site_check(slurm_cluster, "--root", str(tmp_path / "no-data"), "--reservation", "nosuch", lang="tr")
    lines = done.stdout.splitlines()
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    bad = [line for line in lines if line.startswith("!!   ")]
    assert len(bad) == 4, done.stdout      # two data sets, the reservation, the reach checks not run
    data = [line for line in bad if "hazır değil" in line]
    assert len(data) == 2 and all("ddp-tutorial data prepare --dataset" in line for line in data), data
    refused = next(line for line in bad if "SLURM işi reddediyor" in line)
    assert "rezervasyon nosuch" in refused and "scontrol show reservation" in refused, refused
    assert "denetlenmedi" in bad[-1]
    assert lines[-1] == "6 denetimden 4 tanesi işlem istiyor (!! ile başlayan satırlar).", lines[-1]
    assert not slurm_cluster.queue()          # --test-only queued nothing


def test_a_line_is_ok_or_says_what_to_do_in_both_languages():
    line = Line(False, "site.iface_bad", dict(node="n1", address="127.0.1.1"))
    assert line.text("en").startswith("!!   interface rule on n1") and "DDP_TUTORIAL_IFNAME" in line.text("en")
    assert "lo dışında" in line.text("tr")


def test_the_probe_task_runs_the_templates_interface_rule_and_connects_back():
    from ddp_tutorial.slurm.render import IFNAME_RULE
    script = node_script("10.0.0.1", 4242, "tok")
    assert IFNAME_RULE in script and "/dev/tcp/10.0.0.1/4242" in script and "echo tok" in script
    assert subprocess.run(["bash", "-n", "-c", script]).returncode == 0


def site_check_process(lab, *args: str, timeout: str = "90", lang: str = "en") -> subprocess.Popen:
    environ = dict(lab.env, DDP_TUTORIAL_LANG=lang, PYTHONUNBUFFERED="1")
    environ.pop("DDP_TUTORIAL_ROOT", None)
    return subprocess.Popen(lab.login_command([sys.executable, "-m", "ddp_tutorial", "site-check", "--timeout", timeout,
                                               *args]),
                            env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO))


def probe_jobs(lab) -> list:
    return lab.run(["squeue", "-h", "-n", "site-check", "-o", "%i"], timeout=30).stdout.split()


def probe_sruns() -> list:
    """This machine's processes running a site-check probe srun."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            words = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if words and words[0].endswith(b"srun") and b"--job-name=site-check" in words:
            found.append(int(proc.name))
    return found


def until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.3)
    return True


@pytest.mark.slurm
def test_the_day_before_a_reservation_that_starts_tomorrow_is_an_ok_line(slurm_cluster, class_data):
    """SC03: sbatch --test-only refuses a reservation that has not started ("Invalid time specified"); the
    line says when it starts and the port and interface probe runs without it. SE02: a job waiting for it
    says when that is."""
    lab = slurm_cluster
    lab.run(["scontrol", "create", "reservation", "ReservationName=tomorrow", "StartTime=now+1day", "Duration=480",
             "Nodes=ALL", "Users=root", "Flags=IGNORE_JOBS"])
    job = None
    try:
        done = site_check(lab, "--root", str(class_data), "--partition", "debug", "--reservation", "tomorrow")
        job = lab.run(["sbatch", "--parsable", "--reservation=tomorrow", "--output=/dev/null", "--wrap", "true"]
                      ).stdout.strip()
        assert until(lambda: slurm.job_info(job, env=lab.env).reason == "Reservation", 20), \
            slurm.job_info(job, env=lab.env)
        info = slurm.job_info(job, env=lab.env)
        note = reservation_note(info, env=lab.env)
        status = subprocess.run([sys.executable, "-m", "ddp_tutorial", "slurm", "status", job],
                                env=dict(lab.env, DDP_TUTORIAL_LANG="tr"), capture_output=True, text=True,
                                timeout=60, cwd=str(REPO))
    finally:
        if job:
            lab.run(["scancel", job], check=False)
        lab.run(["scontrol", "delete", "ReservationName=tomorrow"], check=False)
    checks = done.stdout.splitlines()[:-1]
    assert done.returncode == 0, done.stdout + done.stderr
    assert checks[4].startswith("ok   reservation tomorrow has not started yet: it starts at 20"), checks[4]
    assert "Invalid time specified" in checks[4] and "ran without it (partition debug" in checks[4], checks[4]
    assert checks[5].startswith("ok   a compute node (n") and checks[6].startswith("ok   interface rule on n"), \
        done.stdout
    assert note.startswith(" · reservation tomorrow starts at 20") and "waits for it" in note, note
    assert status.returncode == 0 and "tomorrow rezervasyonu 20" in status.stdout, status.stdout + status.stderr


@pytest.mark.slurm
def test_a_probe_that_cannot_start_leaves_nothing_in_the_queue_on_timeout_or_sigterm(slurm_cluster, class_data):
    """SC04: with every node busy the probe gives up after --timeout and its job is gone from the queue.
    SG03: SIGTERM to site-check while its srun waits stops that srun (no orphan) and its pending job."""
    lab = slurm_cluster
    busy = lab.run(["sbatch", "--parsable", "-N2", "--exclusive", "--output=/dev/null", "--wrap", "sleep 300"]
                   ).stdout.strip()
    try:
        assert until(lambda: slurm.job_info(busy, env=lab.env).state == "RUNNING", 30)
        started = time.monotonic()
        proc = site_check_process(lab, "--root", str(class_data), timeout="4")
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - started
        assert proc.returncode == 1 and "Traceback" not in err, out + err
        assert "!!   no probe job ran on a compute node" in out and "did not start within 4 s" in out, out
        assert until(lambda: not probe_jobs(lab), 10), probe_jobs(lab)
        assert not probe_sruns()

        proc = site_check_process(lab, "--root", str(class_data), timeout="120")
        assert until(lambda: probe_jobs(lab) or proc.poll() is not None, 90), proc.communicate()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM, out + err
        assert "site-check stopped by SIGTERM" in err and "Traceback" not in err, err
        assert not probe_sruns()
        assert until(lambda: not probe_jobs(lab), 10), probe_jobs(lab)
    finally:
        lab.run(["scancel", busy], check=False)
    assert took < 60, took


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "0", "-1"])
def test_a_timeout_that_is_no_duration_is_refused_with_the_rule(value):
    """SC01 (nan, inf, 1e400: a traceback from selectors) and SC02 (0, -1: sbatch given no time, the names
    blamed): refused before any check, rc 2, in both languages."""
    for lang, words in (("en", "is not a number of seconds greater than 0"), ("tr", "0'dan büyük bir saniye sayısı")):
        done = subprocess.run([sys.executable, "-m", "ddp_tutorial", "site-check", "--no-slurm", "--timeout", value],
                              capture_output=True, text=True, timeout=60, cwd=str(REPO),
                              env=dict(os.environ, DDP_TUTORIAL_LANG=lang))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert words in done.stderr and f"'{value}'" in done.stderr and not done.stdout, done.stdout + done.stderr
