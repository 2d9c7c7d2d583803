"""``ddp-tutorial site-check``, the day-before check (issue 34 item 7), on the real two-node SLURM lab.

It runs on the lab's login node (the hub namespace, ``lab.login_command``), as the instructor runs it on
the site's login node: green with the lab's partition and a reservation created for the class, and with a
reservation that does not exist and a missing data root it says what to do, line by line, exit code 1.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddp_tutorial.site_check import Line, node_script

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
