"""Where the attendee's JupyterLab may start (issue 45): never on a cluster's login node (T5-1), and the
session's defaults are the class day's layout from the site table (T5-4, class day P4).

scripts/lab.sh refuses on a host the site tables name as a login node (ddp_tutorial/sites/*.toml, [login],
read by scripts/site_login.sh without Python), even inside a job (salloc's shell), and wherever sbatch exists
outside a job; --login-ok or DDP_TUTORIAL_LOGIN_OK=1 lets a laptop through. The host name is changed for real
(`unshare --uts`, root), the sbatch is this machine's (the SLURM lab's client). tests/conftest.py sets
DDP_TUTORIAL_LOGIN_OK=1 for the other tests; every run here decides it itself.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ddp_tutorial import sites
from test_lab_script import checkout_with_a_stand_in_jupyter

REPO = Path(__file__).resolve().parents[1]
DAY = sites.load("truba").section("day")


def bash_reads(table: Path, function: str, *args: str) -> list:
    done = subprocess.run(["bash", "-c", f'source "$0" && {function} "$@"', str(REPO / "scripts" / "site_login.sh"),
                           str(table), *args], capture_output=True, text=True, timeout=30)
    return done.stdout.splitlines() if done.returncode == 0 else [f"exit {done.returncode}"]


@pytest.mark.parametrize("name", sites.names())
def test_the_login_names_bash_reads_are_the_tables(name):
    """lab.sh cannot import the package on a login node (no environment yet, an old python3): it reads the
    table with awk. What it reads is what ddp_tutorial.sites reads, for every shipped table."""
    site, table = sites.load(name), REPO / "ddp_tutorial" / "sites" / f"{name}.toml"
    login = site.section("login")
    assert login.get("patterns") or login.get("hosts"), f"{name}.toml names no login node"
    for key in ("patterns", "hosts", "address"):
        want = login.get(key, [])
        assert bash_reads(table, "site_login_value", key) == (want if isinstance(want, list) else [want]), key
    assert bash_reads(table, "site_login_value", "title", "site") == [site.title]   # the name lab.sh says
    for host in [*login.get("hosts", []), "arf-ui1.yonetim", "cuda-ui", "akya1", "barbun-cuda1", "laptop", "arf-ui"]:
        matched = subprocess.run(["bash", "-c", 'source "$0" && site_login_host "$1" "$2"',
                                  str(REPO / "scripts" / "site_login.sh"), str(table), host]).returncode == 0
        assert matched == site.is_login_host(host), host


def _clone(tmp_path: Path) -> Path:
    clone = checkout_with_a_stand_in_jupyter(tmp_path)
    (clone / "ddp_tutorial").mkdir()
    (clone / "ddp_tutorial" / "sites").symlink_to(REPO / "ddp_tutorial" / "sites")
    return clone


def lab_sh(clone: Path, *args: str, host: str = "", **env) -> subprocess.CompletedProcess:
    """``bash scripts/lab.sh ARGS`` in ``clone``, on a machine named ``host`` (its own UTS namespace)."""
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith("SLURM_") and k not in ("DDP_TUTORIAL_LOGIN_OK", "DDP_TUTORIAL_SITE")}
    environ.update(DDP_TUTORIAL_WORK=str(clone / "workshop"), **env)
    command = ["bash", "scripts/lab.sh", *args]
    if host:
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            pytest.skip("needs root and unshare (a host name of its own)")
        command = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host, *command]
    return subprocess.run(command, cwd=clone, env=environ, capture_output=True, text=True, timeout=120)


LOGIN_NODE = {"en": "!! lab.sh: this is arf-ui1, a login node of TRUBA (ARF / ARF-ACC): JupyterLab and its engines "
                    "must not run here",
              "tr": "!! lab.sh: burası arf-ui1, TRUBA (ARF / ARF-ACC) giriş düğümlerinden biri: JupyterLab ve "
                    "motorları burada çalıştırılmaz"}
SBATCH_HERE = {"en": "!! lab.sh: this machine has sbatch and this shell is in no SLURM job",
               "tr": "!! lab.sh: bu makinede sbatch var ve bu kabuk bir SLURM işinin içinde değil"}


def refused(done: subprocess.CompletedProcess, said: str, lang: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stdout + done.stderr
    assert done.stderr.startswith(said), done.stderr
    assert "slurm/lab.sbatch" in done.stderr and "OnDemand" in done.stderr, done.stderr
    assert f"bash scripts/lab.sh {lang} --login-ok" in done.stderr, done.stderr


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_lab_sh_refuses_on_a_login_node_named_by_the_table(tmp_path, lang):
    """T5-1: on arf-ui1 the start command ran JupyterLab and two engines per attendee on the login node,
    where TRUBA suspends the account. By name it is refused even in a job (salloc's shell runs there)."""
    clone = _clone(tmp_path)
    for env in ({}, {"SLURM_JOB_ID": "7"}):
        done = lab_sh(clone, lang, "--no-browser", host="arf-ui1", **env)
        refused(done, LOGIN_NODE[lang], lang)
    assert not (clone / "workshop").exists()


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_lab_sh_refuses_where_sbatch_is_and_no_job(tmp_path, lang):
    """T5-1, a site no table names: this machine has the SLURM lab's sbatch and the test runs in no job."""
    if shutil.which("sbatch") is None:
        pytest.skip("no sbatch on PATH (the SLURM lab's client: bash scripts/setup.sh --test)")
    assert not sites.load("truba").is_login_host(os.uname().nodename)
    clone = _clone(tmp_path)
    refused(lab_sh(clone, lang), SBATCH_HERE[lang], lang)
    assert not (clone / "workshop").exists()


def test_lab_sh_starts_in_a_job_or_when_told_it_is_a_laptop(tmp_path):
    """Inside a job (SLURM_JOB_ID: lab_job.sh's way, srun --pty) it starts; on a login node's name only with
    --login-ok (not handed to JupyterLab) or DDP_TUTORIAL_LOGIN_OK=1."""
    clone = _clone(tmp_path)
    for args, host, env in ((["en"], "", {"SLURM_JOB_ID": "7"}),
                            (["en", "--login-ok", "--no-browser"], "arf-ui1", {}),
                            (["tr"], "arf-ui1", {"DDP_TUTORIAL_LOGIN_OK": "1"})):
        done = lab_sh(clone, *args, host=host, **env)
        assert done.returncode == 0, (args, env, done.stdout + done.stderr)
        assert "ARG --LabApp.default_url=/lab/tree/00_setup.ipynb" in done.stdout.splitlines(), done.stdout
        assert "ARG --login-ok" not in done.stdout and "login" not in done.stderr, done.stdout + done.stderr


# ----------------------------------------------------------------------------- the session's defaults
def sbatch_lines(path: Path) -> dict:
    return dict(m.groups() for m in re.finditer(r"^#SBATCH --([a-z-]+)=(\S+)", path.read_text(), re.M))


def hours(time: str) -> float:
    days, _, clock = time.rpartition("-")
    h, m, s = (clock.split(":") + ["0", "0"])[:3]
    return int(days or 0) * 24 + int(h) + int(m) / 60 + int(s) / 3600


def test_the_sessions_defaults_are_the_days_layout():
    """T5-4, P4: lab.sbatch asked for no partition, 4 cores, 2 h (dead at 11:00, in 04); the form 3 h on
    whatever partition. Both now carry the table's [day] session, which fits the partition's own rules."""
    table = sites.load("truba")
    partition = table.partitions[DAY["session_partition"]]
    assert hours(DAY["session_time"]) <= hours(partition.max_time)
    assert DAY["session_cores"] >= (partition.min_cores or 1) and not partition.gpu_only
    lines = sbatch_lines(REPO / "slurm" / "lab.sbatch")
    assert {k: lines.get(k) for k in ("partition", "cpus-per-task", "time")} == {
        "partition": DAY["session_partition"], "cpus-per-task": str(DAY["session_cores"]), "time": DAY["session_time"]}
    assert "reservation" not in lines and "gres" not in lines and "account" not in lines
    text = (REPO / "slurm" / "lab.sbatch").read_text()
    assert "sbatch -p PARTITION -c 4 -t 03:00:00 slurm/lab.sbatch" in text   # the command for another site
    form = yaml.safe_load((REPO / "ondemand" / "ddp_tutorial" / "form.yml").read_text())["attributes"]
    assert form["bc_queue"]["value"] == DAY["session_partition"]
    assert form["ddp_cpus"]["value"] == DAY["session_cores"]
    assert form["bc_num_hours"]["value"] == round(hours(DAY["session_time"]))
    assert form["ddp_reservation"]["value"] == "" and form["ddp_gpus"]["value"] == "0"
    # 05's jobs: the day's partition and GPUs per node by default (was "generic": no partition, outside the
    # class's GPU reservation on akya-cuda), and the form offers it
    assert form["ddp_profile"]["value"] == DAY["job_partition"]
    assert DAY["job_partition"] in [value for _, value in form["ddp_profile"]["options"]]
    assert str(form["ddp_job_gpus"]["value"]) == str(DAY["job_gpus_per_node"])
    for start, end in DAY["sessions"]:   # each session of the day fits in the time asked for
        assert hours(end + ":00") - hours(start + ":00") <= hours(DAY["session_time"]), (start, end)


@pytest.mark.slurm
def test_on_the_truba_lab_lab_sh_is_refused_and_lab_sbatch_is_accepted(truba_lab):
    """On the rule-enforcing lab's login node (arf-ui1, the lab's sbatch): lab.sh is refused; the command it
    names, `sbatch slurm/lab.sbatch` with its defaults, passes the site's rules (job_submit.lua)."""
    env = {k: v for k, v in truba_lab.env.items() if k not in ("DDP_TUTORIAL_LOGIN_OK",)}
    done = subprocess.run(truba_lab.login_command(["bash", "scripts/lab.sh", "en"]), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    refused(done, LOGIN_NODE["en"], "en")
    test = subprocess.run(truba_lab.login_command(["sbatch", "--test-only", "slurm/lab.sbatch"]), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert test.returncode == 0 and "to start at" in test.stderr, test.stderr
    wrong = subprocess.run(truba_lab.login_command(["sbatch", "--test-only", "-p", "barbun", "slurm/lab.sbatch"]),
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert wrong.returncode != 0, "the lab accepts a 4-core job on barbun: it enforces nothing this test shows"
