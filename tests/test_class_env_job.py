"""slurm/class_env.sbatch: the class environment built inside a job on a compute node (issue 45: T5-3, T5-13).

Its ``#SBATCH`` lines must fit the partition's written rules in the site table
(``ddp_tutorial.sites.load("truba").partitions["debug"]``: a CPU partition, its minimum cores, its time
limit), every wrong start is one line in the user's language and exit code 2 (no folder, started outside
a job, a folder inside the home, no checkout), and on the SLURM lab ``sbatch --test-only`` accepts it and
a real job runs ``scripts/setup.sh --prefix`` on a compute node (here: setup.sh's own refusal of a folder
that holds files, which comes before anything is installed).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from ddp_tutorial import sites

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "slurm" / "class_env.sbatch"


def directives() -> dict:
    """The script's ``#SBATCH --key=value`` lines as a dict (the ones before its first command)."""
    found = {}
    for line in SCRIPT.read_text(encoding="utf-8").splitlines():
        match = re.match(r"#SBATCH\s+--([\w-]+)(?:=(\S+))?", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def seconds(slurm_time: str) -> int:
    """SLURM's ``[D-]HH:MM:SS`` as seconds."""
    days, _, clock = slurm_time.rpartition("-")
    hours, minutes, secs = (int(part) for part in clock.split(":"))
    return int(days or 0) * 86400 + hours * 3600 + minutes * 60 + secs


def run(*args, env_extra=None, cwd=None, home=None):
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("SLURM_", "SBATCH_", "DDP_TUTORIAL_"))}
    env.update(env_extra or {})
    if home is not None:
        env["HOME"] = str(home)
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          cwd=cwd or REPO, timeout=30)


def test_the_script_parses():
    proc = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_its_sbatch_lines_fit_the_debug_partitions_written_rules():
    table = sites.load("truba")
    lines = directives()
    partition = table.partitions[lines["partition"]]
    assert partition.name == "debug", "the class environment is built in debug (a CPU partition of 1 core up)"
    assert not partition.gpu_only and "gres" not in lines and "gpus" not in lines
    cores = int(lines["cpus-per-task"]) * int(lines.get("ntasks", 1))
    assert cores >= (partition.min_cores or 1), (
        f"{cores} cores: below debug's minimum {partition.min_cores} ({partition.sources.get('min_cores')})")
    assert seconds(lines["time"]) <= seconds(partition.max_time), (
        f"--time={lines['time']} is past debug's {partition.max_time} ({partition.sources.get('max_time')})")
    assert lines["nodes"] == "1"
    # The site's rule checker, where the table's owner provides it, agrees.
    check = getattr(table, "check_job", None)
    if check is not None:
        assert not check("debug", nodes=1, gpus_per_node=0, cores_per_node=cores, time=lines["time"])


@pytest.mark.parametrize("lang, words", [("en", "no folder for the class environment"),
                                         ("tr", "sınıf ortamının klasörü verilmedi")])
def test_no_folder_is_one_line_in_the_users_language(lang, words):
    proc = run(env_extra={"DDP_TUTORIAL_LANG": lang})
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and words in proc.stderr and "sbatch slurm/class_env.sbatch DIR" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_outside_a_job_it_says_to_submit_it(tmp_path):
    proc = run(str(tmp_path / "env"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "this script is a job: submit it with sbatch" in proc.stderr
    assert not (tmp_path / "env").exists()


@pytest.mark.parametrize("where", ["env", "."])
def test_a_folder_in_the_home_is_refused(tmp_path, where):
    """DIR (or DATA) inside the home: attendees could reach it only if the home were opened, which the
    guide forbids (1-kaynaklar/arf/arf_depolama_kaynaklari.rst:259)."""
    home = tmp_path / "home"
    home.mkdir()
    target = home / where if where != "." else home
    proc = run(str(target), env_extra={"SLURM_JOB_ID": "1", "SLURM_SUBMIT_DIR": str(REPO),
                                       "DDP_TUTORIAL_LANG": "tr"}, home=home)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "ev dizininizin içinde" in proc.stderr
    data = run(str(tmp_path / "env"), str(home / "data"), home=home,
               env_extra={"SLURM_JOB_ID": "1", "SLURM_SUBMIT_DIR": str(REPO)})
    assert data.returncode == 2 and "is inside your home" in data.stderr and str(home / "data") in data.stderr
    assert not (tmp_path / "env").exists()


def test_no_checkout_is_one_line(tmp_path):
    proc = run(str(tmp_path / "env"), env_extra={"SLURM_JOB_ID": "1", "SLURM_SUBMIT_DIR": str(tmp_path)},
               cwd=tmp_path, home=tmp_path / "home")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "scripts/setup.sh does not exist: submit the job from the checkout" in proc.stderr


@pytest.mark.slurm
@pytest.mark.timeout(240)
def test_the_lab_accepts_it_and_a_job_runs_setup_on_a_compute_node(slurm_cluster, tmp_path):
    lab = slurm_cluster
    target = tmp_path / "not-a-class-env"
    target.mkdir()
    (target / "notes.txt").write_text("someone else's files\n")
    accepted = lab.run(["sbatch", "--test-only", str(SCRIPT), str(target)], cwd=REPO, check=False)
    assert accepted.returncode == 0 and "to start at" in accepted.stderr, accepted.stderr

    log = tmp_path / "class-env.out"
    env = dict(lab.env, DDP_TUTORIAL_LANG="en")
    submitted = subprocess.run(["sbatch", "--parsable", f"--output={log}", str(SCRIPT), str(target)],
                               env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 120
    while job in lab.queue() and time.monotonic() < deadline:
        time.sleep(1)
    assert job not in lab.queue(), f"job {job} still in the queue after 120 s:\n{lab.log_tail()}"
    text = log.read_text(errors="replace")
    assert re.search(rf"== building the class environment in {re.escape(str(target))} \(job {job}, node n\d\)",
                     text), text
    assert "already holds files and is no class environment made by this script" in text, text
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"], "setup.sh changed a folder it refused"


@pytest.mark.parametrize("lang, words", [("en", "is on {shared}: the guide forbids users' own pip installs there"),
                                         ("tr", "{shared} üzerinde: kılavuz kullanıcıların orada pip ile kurmasını")])
def test_setup_follows_the_classs_site_table(tmp_path, lang, words):
    """Issue 46: the job builds for the class's table ($DDP_TUTORIAL_SITE, a TOML file here), not TRUBA's: setup.sh
    reads that table's storage rule (pip forbidden on the class's shared folder, a rule TRUBA's table does not
    have), says so, and stops at the Python check (a missing PYTHON) before anything is installed."""
    shared = tmp_path / "shared"
    table = tmp_path / "class-site.toml"
    table.write_text(f'[site]\nname = "classhpc"\ntitle = "CLASS-HPC"\n\n[storage]\nno_pip_on = "{shared}"\n'
                     'no_pip_source = "the centre\'s storage page"\n', encoding="utf-8")
    proc = run(str(shared / "env"), home=tmp_path / "home",
               env_extra={"SLURM_JOB_ID": "1", "SLURM_SUBMIT_DIR": str(REPO), "DDP_TUTORIAL_LANG": lang,
                          "DDP_TUTORIAL_SITE": str(table), "PYTHON": str(tmp_path / "no-such-python3.12")})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert words.format(shared=shared) in proc.stdout and "the centre's storage page" in proc.stdout, proc.stdout
    assert "no-such-python3.12" in proc.stderr and not (shared / "env").exists(), proc.stderr
