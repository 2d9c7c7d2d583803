"""Nothing in the package is one centre's (issue 46, "done when" 2): the site's table drives every place that
reads a profile, and no partition name, login host or driver version of a shipped site table is written in
Python outside ``ddp_tutorial/sites/``.

With ``DDP_TUTORIAL_SITE`` naming a made-up table (other partition names, 2 GPUs and 32 cores per node, a
1-day limit) ``slurm render`` (a real ``ddp-tutorial`` process), ``workshop_profile``, ``class_job``, the one
site lookup (:func:`ddp_tutorial.sites.site_for`), site-check's table and probe, the build table and the
exercises follow it; unset, the shipped default's (TRUBA's) as before."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_tutorial import gpu, sites, slurm
from ddp_tutorial.i18n import TutorialError
from ddp_tutorial.site_probe import probe_shape, site_table
from ddp_tutorial.slurm.class_shape import class_job

REPO = Path(__file__).resolve().parent.parent
#: Partition names that are plain words of the code too ("debug" logging): not a sign of one centre.
GENERIC_NAMES = {"debug"}
#: Files allowed to name a site's partitions for now, with why.
ALLOWED: dict = {}  # file → why it may name a site's partition (none: every name lives in the site tables)

MADE_UP = """
[guide]
repository = "none"
commit = "0"
date = "2026-12-06"
base = ""
url = "file:///{path}#L{line}"

[site]
name = "made-up"
title = "A made-up cluster"

[login]
hosts = ["front1"]
patterns = ["front*"]

[storage]
outputs = "OUTPUTS"

[partitions.short-cpu]
nodes = 4
cores_per_node = 32
gpus_per_node = 0
max_time = "1-00:00:00"
min_cores = 1

[partitions.gpu-x]
nodes = 6
cores_per_node = 32
gpus_per_node = 2
gpu = "A100 40 GB, sm_80"
max_time = "1-00:00:00"
min_cores = 16
min_gpus = 1
cores_per_gpu = 16
gpu_only = true
sources = { gpus_per_node = "made-up.toml:30", max_time = "made-up.toml:32" }

[day]
job_partition = "gpu-x"
"""


def shipped_names():
    """Every partition name, login host (or pattern's fixed part), login address and driver of the shipped tables."""
    found = set()
    for name in sites.names():
        site = sites.load(name)
        found |= set(site.partitions) - GENERIC_NAMES
        login = site.section("login")
        found |= {h.rstrip("*?") for h in (*login.get("hosts", ()), *login.get("patterns", ()))}
        found |= {v for v in (login.get("address"), site.section("gpu").get("driver")) if v}
    return found


def occurrences(files, names):
    """``(file, line number, name)`` for every whole-word use of a name (hyphens count as part of a word)."""
    pattern = re.compile(r"(?<![\w.-])(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
                         + r")(?![\w-]|\.\d)")
    hits = []
    for path in files:
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
            hits += [(str(path), number, m.group(1)) for m in pattern.finditer(line)]
    return hits


def python_files():
    package = [p for p in (REPO / "ddp_tutorial").rglob("*.py") if "sites" not in p.relative_to(REPO).parts[1:-1]]
    return sorted(package + list((REPO / "scripts").glob("*.py")))


def test_no_partition_login_host_or_driver_of_a_site_table_is_written_in_python():
    names = shipped_names()
    assert {"akya-cuda", "arf-ui", "550.90.07"} <= names  # the scan looks for TRUBA's names
    hits = [h for h in occurrences(python_files(), names)
            if str(Path(h[0]).relative_to(REPO)) not in ALLOWED]
    assert hits == [], "site names in Python (move them into ddp_tutorial/sites/*.toml): " + "; ".join(
        f"{Path(f).relative_to(REPO)}:{n} {name}" for f, n, name in hits)


def test_the_scan_finds_a_planted_name(tmp_path):
    """The scan is no test that cannot fail: the old gpu.py's line, and a docstring example, are found."""
    planted = tmp_path / "planted.py"
    planted.write_text('SITES = {"x": Site("x", "550.90.07", {"akya-cuda": (7, 0)})}\n'
                       '"""ssh arf-ui1, then: slurm render --profile palamut-cuda"""\nbarbun_cuda = "debug"\n')
    found = {(n, name) for _, n, name in occurrences([planted], shipped_names())}
    assert found == {(1, "550.90.07"), (1, "akya-cuda"), (2, "arf-ui1"), (2, "palamut-cuda")}


@pytest.fixture
def made_up(tmp_path, monkeypatch):
    """``DDP_TUTORIAL_SITE`` naming the made-up table (its outputs folder in tmp_path)."""
    path = tmp_path / "made-up.toml"
    path.write_text(MADE_UP.replace("OUTPUTS", str(tmp_path / "scratch")))
    (tmp_path / "scratch").mkdir()
    for name in ("DDP_TUTORIAL_SLURM_PROFILE", "DDP_TUTORIAL_SLURM_GPUS", "SBATCH_PARTITION",
                 "DDP_TUTORIAL_SLURM_ACCOUNT", "DDP_TUTORIAL_SLURM_RESERVATION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DDP_TUTORIAL_SITE", str(path))
    return path


def _render(*argv, env):
    return subprocess.run([sys.executable, "-m", "ddp_tutorial", "slurm", "render", *argv], capture_output=True,
                          text=True, timeout=60, cwd=REPO, env=dict(env, DDP_TUTORIAL_LANG="en"))


def test_render_takes_the_made_up_sites_partition_and_refuses_a_job_beyond_it(made_up):
    env = dict(os.environ)
    done = _render("--profile", "gpu-x", "--nodes", "2", env=env)
    assert done.returncode == 0, done.stderr
    assert "#SBATCH --partition=gpu-x" in done.stdout and "#SBATCH --gres=gpu:2" in done.stdout
    assert "#SBATCH --cpus-per-task=32" in done.stdout  # 2 GPUs × 16 cores
    too_many = _render("--profile", "gpu-x", "--gpus-per-node", "4", "--cpus-per-process", "8", env=env)
    assert too_many.returncode != 0 and "gpu-x: 2 GPUs per node" in too_many.stderr, too_many.stderr
    assert "Traceback" not in too_many.stderr
    too_long = _render("--profile", "gpu-x", "--time", "2-00:00:00", env=env)
    assert too_long.returncode != 0 and "at most 1-00:00:00" in too_long.stderr, too_long.stderr
    other = _render("--profile", "akya-cuda", env=env)  # the shipped site's profile is not this site's
    assert other.returncode != 0 and "gpu-x" in other.stderr and "Traceback" not in other.stderr


def test_profiles_workshop_profile_class_job_and_the_lookup_follow_the_made_up_site(made_up, monkeypatch):
    assert list(slurm.PROFILES) == ["generic", "gpu-x"]
    assert slurm.PROFILES["gpu-x"].cpus_per_gpu == 16 and slurm.PROFILES["gpu-x"].site == "made-up"
    monkeypatch.setenv("SBATCH_PARTITION", "gpu-x")
    assert slurm.workshop_profile() == "gpu-x"
    job = class_job()
    assert (job.partition, job.gpus_per_node, job.cpus_per_process) == ("gpu-x", 2, 16)  # the seed's 3 → 2
    assert job.run_dir == str(made_up.parent / "scratch" / "ddp-runs")  # the table's outputs folder
    monkeypatch.setenv("DDP_TUTORIAL_SLURM_PROFILE", "akya-cuda")
    with pytest.raises(TutorialError, match="gpu-x"):
        slurm.workshop_profile()
    assert sites.site_for("gpu-x").name == "made-up" and sites.site_for().name == "made-up"
    assert sites.site_for("akya-cuda") is None  # a partition this table does not know: no written rules


def test_site_check_and_the_build_table_follow_the_made_up_site(made_up):
    table = site_table(None, "gpu-x")
    assert table.name == "made-up"
    assert probe_shape(table.partitions["gpu-x"], 1) == ["--time=1", "--ntasks=1", "--gres=gpu:1",
                                                         "--cpus-per-task=16"]
    found = gpu.site_named(str(made_up))
    assert found.partitions == {"gpu-x": (8, 0)} and found.driver == ""
    assert gpu.choose(str(made_up)).variant == "cu130"  # sm_80, no driver stated: the first build with its kernels


def test_the_exercises_follow_the_made_up_site(made_up):
    from ddp_tutorial.exercises.cluster import exercise_profile
    assert exercise_profile("job_script_partition").partition == "gpu-x"
    assert exercise_profile("fixed_sbatch_partition", 3).partition == "gpu-x"  # none has 3: the most GPUs


def test_a_missing_site_file_is_one_clear_line(tmp_path):
    env = dict(os.environ, DDP_TUTORIAL_SITE=str(tmp_path / "nowhere.toml"))
    done = _render("--profile", "generic", env=env)
    assert done.returncode != 0 and "nowhere.toml" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_unset_the_shipped_default_as_before(monkeypatch):
    monkeypatch.delenv("DDP_TUTORIAL_SITE", raising=False)
    assert list(slurm.PROFILES) == ["generic", "barbun-cuda", "akya-cuda", "palamut-cuda", "kolyoz-cuda"]
    assert sites.site_for("akya-cuda").name == "truba" and sites.site_for() is None
    assert sites.site_for("akya-cuda", name="none") is None
    assert gpu.SITES["truba"].driver == "550.90.07" and gpu.SITES["truba"].partitions["palamut-cuda"] == (8, 0)
    from ddp_tutorial.exercises.cluster import exercise_profile
    assert exercise_profile("job_script_partition").partition == "akya-cuda"
    assert exercise_profile("fixed_sbatch_partition", 3).partition == "palamut-cuda"
