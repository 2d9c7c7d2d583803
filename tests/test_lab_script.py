"""scripts/lab.sh refuses what it cannot use at once, in one line, before any setup (issue 25 L02/L03); with
the class environment (DDP_TUTORIAL_VENV, issue 34 item 1) it installs nothing, even into a read-only one;
scripts/setup.sh --prefix builds that environment.

No test here ever runs setup.sh into this checkout's .venv: lab.sh is given DDP_TUTORIAL_VENV=<that venv>
(which it must leave untouched: it is mounted read-only for the run), the install path runs in throw-away
checkouts whose setup.sh is a recording stand-in, and setup.sh itself runs with a stand-in pip."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ddp_tutorial import gpu
from test_setup_prefix import open_folder, stand_ins  # noqa: F401  (open_folder: a fixture)

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv"


def lab(*args, **env):
    environ = dict(os.environ, **{"DDP_TUTORIAL_VENV": str(VENV), **env})   # never setup.sh into the checkout's .venv
    return subprocess.run(["bash", str(REPO / "scripts" / "lab.sh"), *args], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("language", ["de", "xx"])
def test_a_language_other_than_tr_or_en_is_refused(language):
    done = lab(language, "--no-browser")
    assert done.returncode == 2 and "tr or en" in done.stderr and "tr ya da en" in done.stderr, done.stderr
    assert "setup" not in done.stdout  # refused before anything was installed or started


@pytest.mark.parametrize("language, words", [("en", "unknown data set"), ("tr", "bilinmeyen veri kümesi")])
def test_an_unknown_data_set_is_named_in_the_attendees_language(language, words):
    done = lab(language, DDP_TUTORIAL_DATASET="cifar10")
    assert done.returncode == 2 and words in done.stderr and "cifar10" in done.stderr, done.stderr


def read_only(command: list, *folders: Path) -> list:
    """``command`` in a mount namespace of its own where ``folders`` are read-only (root: the tests'
    SLURM lab needs it too); nothing changes outside that namespace."""
    mounts = " && ".join(f"mount --bind {f} {f} && mount -o remount,bind,ro {f}" for f in folders)
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", f'{mounts} && exec "$@"', "sh", *command]


def test_the_class_environment_is_used_read_only_and_nothing_is_staged_twice(tmp_path):
    """Issue 34 item 1 (review N1): with DDP_TUTORIAL_VENV the start installs nothing per attendee, and
    works with that environment read-only (here this checkout's .venv, mounted read-only for the run):
    straight to JupyterLab (here `jupyter lab --version`, the options after the language are JupyterLab's),
    no setup.sh and no staging, on the one data folder README and 00 name: ~/ddp-data (issue 26 R7)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (a read-only bind mount of the venv)")
    root = Path(os.environ.get("DDP_TUTORIAL_ROOT", REPO / ".data"))   # what scripts/test.sh staged
    folder, name = next(((f, n) for f, n in (("MNIST", "mnist"), ("FashionMNIST", "fashion-mnist"))
                         if (root / f).is_dir()), (None, None))
    assert folder, f"no data set staged in {root}"
    home = tmp_path / "home"
    (home / "ddp-data").mkdir(parents=True)
    (home / "ddp-data" / folder).symlink_to(root / folder)
    environ = {k: v for k, v in os.environ.items() if k not in ("DDP_TUTORIAL_ROOT", "DDP_TUTORIAL_DATASET")}
    environ.update(HOME=str(home), DDP_TUTORIAL_WORK=str(tmp_path / "work"), DDP_TUTORIAL_VENV=str(VENV))
    before = {p: p.stat().st_mtime_ns for p in (VENV, VENV / "bin", *VENV.glob("lib/python*/site-packages"))}
    done = subprocess.run(read_only(["bash", str(REPO / "scripts" / "lab.sh"), "tr", "--version"], VENV),
                          cwd=REPO, env=environ, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"veri kümesi: {name} ({home / 'ddp-data'})" in done.stdout, done.stdout
    assert "pip install" not in done.stdout and "hazırlanıyor" not in done.stdout and "staging" not in done.stdout
    assert "Read-only" not in done.stderr, done.stderr
    assert before == {p: p.stat().st_mtime_ns for p in before}   # nothing added to or removed from the venv
    assert (tmp_path / "work" / "tr" / "00_setup.ipynb").exists()   # the attendee's copy was made
    assert not list(home.glob("ddp-data/*/raw/*.partial*"))           # nothing was written into the data


@pytest.mark.parametrize("args", [["tur", "--no-browser"], ["tr", "en"], ["en", "--port=8899", "notes"]])
def test_a_word_that_is_no_language_nor_an_options_value_is_refused(args):
    """L01/L02 (round 4): `lab.sh tur` and `lab.sh tr en` handed the word to Jupyter as a file name
    ("No such file or directory: …/workshop/en/tur")."""
    done = lab(*args)
    assert done.returncode == 2 and f"'{args[-1] if args[0] != 'tur' else 'tur'}'" in done.stderr, done.stderr
    assert "tr or en" in done.stderr or "JupyterLab options" in done.stderr, done.stderr
    assert "setup" not in done.stdout


STAND_IN_JUPYTER = """#!/bin/bash
# A stand-in for `jupyter lab`: what it was given, where it runs, and what 00_setup's data check says there.
for a in "$@"; do echo "ARG $a"; done
echo "CWD $PWD"
"{cli}" data check >/dev/null 2>&1 && echo "CHECK ok" || echo "CHECK failed"
"""


def checkout_with_a_stand_in_jupyter(tmp_path: Path) -> Path:
    """A throw-away checkout: lab.sh, workshop_copy.sh, the notebooks and a .venv that uses this venv's
    Python and packages, with `jupyter` replaced by the stand-in above and setup already done."""
    clone = tmp_path / "clone"
    (clone / "scripts").mkdir(parents=True)
    for name in ("lab.sh", "workshop_copy.sh", "setup.sh", "python_check.sh", "site_login.sh"):
        (clone / "scripts" / name).write_bytes((REPO / "scripts" / name).read_bytes())
    (clone / "pyproject.toml").write_bytes((REPO / "pyproject.toml").read_bytes())
    (clone / "notebooks" / "lab").mkdir(parents=True)
    (clone / "notebooks" / "lab" / "overrides.json").write_bytes((REPO / "notebooks/lab/overrides.json").read_bytes())
    for lang in ("en", "tr"):
        (clone / "notebooks" / lang).symlink_to(REPO / "notebooks" / lang)
    venv = REPO / ".venv"
    (clone / ".venv" / "bin").mkdir(parents=True)
    (clone / ".venv" / "pyvenv.cfg").write_bytes((venv / "pyvenv.cfg").read_bytes())
    (clone / ".venv" / "lib").symlink_to(venv / "lib")
    (clone / ".venv" / "bin" / "python").symlink_to(os.path.realpath(venv / "bin" / "python"))
    (clone / ".venv" / "bin" / "ddp-tutorial").symlink_to(venv / "bin" / "ddp-tutorial")
    jupyter = clone / ".venv" / "bin" / "jupyter"
    jupyter.write_text(STAND_IN_JUPYTER.replace("{cli}", str(venv / "bin" / "ddp-tutorial")))
    jupyter.chmod(0o755)
    (clone / ".venv" / ".lab-setup-done").touch()
    return clone


def test_relative_work_and_data_folders_are_the_callers_and_reach_jupyter_absolute(tmp_path):
    """L03 (round 4): a relative DDP_TUTORIAL_WORK reached JupyterLab as is, which read it from inside
    the copy ("No such directory …/ws/en/ws/en") and never started. L06: a relative DDP_TUTORIAL_ROOT was
    checked from the checkout but exported as is: every kernel (started in the copy) said "not staged"."""
    root = Path(os.environ.get("DDP_TUTORIAL_ROOT", REPO / ".data"))   # what scripts/test.sh staged
    folder, name = next(((f, n) for f, n in (("MNIST", "mnist"), ("FashionMNIST", "fashion-mnist"))
                         if (root / f).is_dir()), (None, None))
    if folder is None:
        pytest.skip(f"no data set staged in {root} (scripts/test.sh stages one)")
    clone = checkout_with_a_stand_in_jupyter(tmp_path)
    (clone / "reldata").mkdir()
    (clone / "reldata" / folder).symlink_to(root / folder)
    environ = {k: v for k, v in os.environ.items() if k != "DDP_TUTORIAL_DATASET"}
    environ.update(DDP_TUTORIAL_WORK="ws", DDP_TUTORIAL_ROOT="reldata")
    done = subprocess.run(["bash", "scripts/lab.sh", "en", "--no-browser"], cwd=clone, env=environ,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    work = clone / "ws" / "en"
    assert f"ARG --ServerApp.root_dir={work}" in lines and f"CWD {work}" in lines, done.stdout
    assert (work / "00_setup.ipynb").is_file()
    assert f"data set: {name} in {clone / 'reldata'}" in done.stdout, done.stdout
    assert "CHECK ok" in lines, done.stdout   # the data, found from the kernels' folder


def workshop_copy(work: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "scripts" / "workshop_copy.sh"), "en", str(work), *extra],
                          capture_output=True, text=True, timeout=60)


def test_workshop_copy_resets_twice_in_one_second_and_starts_twice_at_once(tmp_path):
    """L04b: two --reset within one second moved the second copy inside the first backup (a third one
    failed: "Directory not empty"). C01: two first starts at once left a stray W.partial/ in the copy."""
    work = tmp_path / "W"
    assert workshop_copy(work).returncode == 0
    (work / "mine.txt").write_text("my work\n")
    for _ in range(3):
        done = workshop_copy(work, "--reset")
        assert done.returncode == 0, done.stderr
    backups = sorted(tmp_path.glob("W.backup-*"))
    assert len(backups) == 3 and all(not (b / "W").exists() for b in backups), backups
    assert sum((b / "mine.txt").exists() for b in backups) == 1
    fresh = tmp_path / "F"
    starts = [subprocess.Popen(["bash", str(REPO / "scripts" / "workshop_copy.sh"), "en", str(fresh)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)]
    assert [p.wait(timeout=60) for p in starts] == [0, 0, 0, 0]
    assert not [p for p in fresh.iterdir() if "partial" in p.name] and not list(tmp_path.glob("F.partial*"))
    assert (fresh / "00_setup.ipynb").is_file()


def test_workshop_copy_names_a_file_where_the_copy_should_be(tmp_path):
    """L05: a file where the copy should be was a raw `mv: cannot overwrite non-directory`, and a
    `.partial` folder was left."""
    (tmp_path / "W").write_text("not a folder\n")
    done = workshop_copy(tmp_path / "W")
    assert done.returncode == 2 and "is a file, not a folder" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["W"]


def test_lab_without_home_asks_for_the_data_folder(tmp_path):
    """L08: `env -u HOME` stopped lab.sh with "HOME: unbound variable"."""
    clone = checkout_with_a_stand_in_jupyter(tmp_path)
    environ = {k: v for k, v in os.environ.items() if k not in ("HOME", "DDP_TUTORIAL_ROOT")}
    done = subprocess.run(["bash", "scripts/lab.sh", "en"], cwd=clone, env=environ, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "HOME is not set" in done.stderr and "DDP_TUTORIAL_ROOT" in done.stderr, \
        done.stdout + done.stderr


def test_reopening_the_lab_restores_no_tabs_so_no_kernels_start_for_them(tmp_path):
    """Attendee report (issue 37 item 4): reopening the lab started a kernel for every restored tab. JupyterLab
    has no setting for it, so each start opens 00_setup alone: the working copy's workspace files are removed."""
    root = Path(os.environ.get("DDP_TUTORIAL_ROOT", REPO / ".data"))
    if not any((root / f).is_dir() for f in ("MNIST", "FashionMNIST")):
        pytest.skip(f"no data set staged in {root} (scripts/test.sh stages one)")
    clone = checkout_with_a_stand_in_jupyter(tmp_path)
    workspaces = clone / "workshop" / "en.lab-workspaces"
    workspaces.mkdir(parents=True)
    saved = workspaces / "default-37a8.jupyterlab-workspace"
    saved.write_text('{"data": {"notebook:03_collectives.ipynb": {}}, "metadata": {"id": "default"}}')
    environ = {k: v for k, v in os.environ.items() if k not in ("DDP_TUTORIAL_DATASET", "DDP_TUTORIAL_WORK")}
    environ["DDP_TUTORIAL_ROOT"] = str(root)
    done = subprocess.run(["bash", "scripts/lab.sh", "en", "--no-browser"], cwd=clone, env=environ,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ARG --LabApp.workspaces_dir={clone / 'workshop' / 'en'}.lab-workspaces" in done.stdout.splitlines()
    assert not saved.exists() and workspaces.is_dir()


def test_a_working_copy_outside_the_checkout_is_warned_about(tmp_path):
    """L07 (round 4): DDP_TUTORIAL_WORK outside the checkout was accepted silently; 04–06's
    `python -m benchmarks…` then failed there with `No module named 'benchmarks'`."""
    clone = checkout_with_a_stand_in_jupyter(tmp_path)
    environ = {k: v for k, v in os.environ.items() if k != "DDP_TUTORIAL_DATASET"}
    environ.update(DDP_TUTORIAL_WORK=str(tmp_path / "outside"), DDP_TUTORIAL_ROOT=str(tmp_path / "data"),
                   DDP_TUTORIAL_DATASET="fashion-mnist")
    (tmp_path / "data").mkdir()
    done = subprocess.run(["bash", "scripts/lab.sh", "en"], cwd=clone, env=environ, capture_output=True,
                          text=True, timeout=120)
    assert "is outside the checkout" in done.stderr and "benchmarks/" in done.stderr, done.stdout + done.stderr
    inside = subprocess.run(["bash", "scripts/lab.sh", "en"], cwd=clone, capture_output=True, text=True, timeout=120,
                            env=dict(environ, DDP_TUTORIAL_WORK="ws"))
    assert "outside the checkout" not in inside.stderr


RECORDING_SETUP = """#!/bin/bash
# A stand-in for scripts/setup.sh: what lab.sh asked of it.
echo "SETUP $* LANG=$DDP_TUTORIAL_LANG${DDP_TUTORIAL_SITE:+ SITE=$DDP_TUTORIAL_SITE}" >> "${0%/*}/../setup-calls"
"""


def _staged_root() -> Path:
    root = Path(os.environ.get("DDP_TUTORIAL_ROOT", REPO / ".data"))   # what scripts/test.sh staged
    if not any((root / f).is_dir() for f in ("MNIST", "FashionMNIST")):
        pytest.skip(f"no data set staged in {root} (scripts/test.sh stages one)")
    return root


@pytest.mark.parametrize("args, env, expected", [
    (["tr", "--site", "truba"], {}, "SETUP --site truba LANG=tr"),
    (["en", "--site=truba"], {}, "SETUP --site truba LANG=en"),
    (["en"], {"DDP_TUTORIAL_SITE": "truba"}, "SETUP --site truba LANG=en SITE=truba"),
    (["tr"], {}, "SETUP  LANG=tr"),
])
def test_where_lab_sh_installs_it_passes_the_site_through(tmp_path, args, env, expected):
    """Issue 34 item 1: lab.sh without a class environment runs setup.sh with the site (--site NAME, or
    DDP_TUTORIAL_SITE) and the attendee's language; --site never reaches JupyterLab."""
    clone = checkout_with_a_stand_in_jupyter(tmp_path)
    (clone / ".venv" / ".lab-setup-done").unlink()                  # a first start: setup is due
    (clone / "scripts" / "setup.sh").write_text(RECORDING_SETUP)
    environ = {k: v for k, v in os.environ.items() if k not in ("DDP_TUTORIAL_SITE", "DDP_TUTORIAL_VENV")}
    environ.update(DDP_TUTORIAL_ROOT=str(_staged_root()), DDP_TUTORIAL_WORK="ws", **env)
    done = subprocess.run(["bash", "scripts/lab.sh", *args], cwd=clone, env=environ, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (clone / "setup-calls").read_text().splitlines() == [expected]
    assert "ARG --site" not in done.stdout and "ARG truba" not in done.stdout, done.stdout


def test_with_a_class_environment_lab_sh_never_runs_setup(tmp_path):
    """Even when setup would be due (no stamp), DDP_TUTORIAL_VENV means: use it, install nothing."""
    clone = checkout_with_a_stand_in_jupyter(tmp_path)
    (clone / ".venv" / ".lab-setup-done").unlink()
    (clone / "scripts" / "setup.sh").write_text(RECORDING_SETUP)
    environ = dict(os.environ, DDP_TUTORIAL_ROOT=str(_staged_root()), DDP_TUTORIAL_WORK="ws",
                   DDP_TUTORIAL_VENV=".venv")   # relative: the caller's folder (here the clone)
    done = subprocess.run(["bash", "scripts/lab.sh", "en", "--site", "truba"], cwd=clone, env=environ,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (clone / "setup-calls").exists()
    assert f"CWD {clone / 'ws' / 'en'}" in done.stdout, done.stdout


@pytest.mark.parametrize("lang, words", [("en", "there is no Python environment there"),
                                         ("tr", "orada bir Python ortamı yok")])
def test_a_class_environment_that_is_not_there_is_named(tmp_path, lang, words):
    done = lab(lang, DDP_TUTORIAL_VENV=str(tmp_path / "nowhere"))
    assert done.returncode == 2 and words in done.stderr and str(tmp_path / "nowhere") in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stdout == ""


def _setup(tmp_path, *args, wrap=(), **env):
    environ = {k: v for k, v in os.environ.items() if k not in ("DDP_TUTORIAL_SITE", "VENV", "VIRTUAL_ENV")}
    environ.update(SKIP_SYSTEM="1", DDP_TUTORIAL_LANG="en", **env)
    return subprocess.run([*wrap, "bash", str(REPO / "scripts" / "setup.sh"), *args], cwd=tmp_path, env=environ,
                          capture_output=True, text=True, timeout=120)


def test_setup_prefix_builds_the_class_environment_pinned_and_not_editable(open_folder):  # noqa: F811 (the fixture imported above)
    """`setup.sh --site truba --prefix DIR` (DIR relative to the caller): torch pinned from the cu126
    index, the package as a copy (not -e: it must not depend on the instructor's checkout), JupyterLab's
    settings inside DIR, everything readable by all, and the attendees' command printed. DIR is made by a
    real venv whose pip only records (tests/test_setup_prefix.py), in a folder others can enter: setup.sh
    ends by checking the environment as another user (class day P1)."""
    tmp_path, prefix = open_folder, open_folder / "class-env"
    done = _setup(tmp_path, "--site", "truba", "--prefix", "class-env", PYTHON=str(stand_ins(tmp_path)))
    assert done.returncode == 0, done.stdout + done.stderr
    pins = f"torch=={gpu.TORCH_VERSION} torchvision=={gpu.TORCHVISION_VERSION}"
    assert (tmp_path / "pip.log").read_text().splitlines()[1:] == [
        f"install --force-reinstall --index-url {gpu.VARIANTS['cu126'].index_url} {pins}",
        f"install --no-cache-dir {pins} .[notebooks]"]
    assert (prefix / "share" / "jupyter" / "lab" / "settings" / "overrides.json").is_file()
    assert f"DDP_TUTORIAL_VENV={prefix} DDP_TUTORIAL_ROOT=DATA bash scripts/lab.sh tr" in done.stdout, done.stdout
    assert all(p.stat().st_mode & 0o004 for p in prefix.rglob("*"))


@pytest.mark.parametrize("site, variant", [("", "cu126"), ("none", "cu130")])
def test_setup_recognises_truba_by_its_login_node_name(open_folder, site, variant):  # noqa: F811 (the fixture imported above)
    """A login node named arf-ui1 (a UTS namespace of its own): --site truba is taken and said, unless
    DDP_TUTORIAL_SITE=none; then the node's own choice (no GPU: PyPI's cu130)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (a host name of its own)")
    tmp_path = open_folder
    wrap = ["unshare", "--uts", "sh", "-c", 'hostname arf-ui1 && exec "$@"', "sh"]
    done = _setup(tmp_path, "--prefix", "class-env", wrap=wrap, DDP_TUTORIAL_SITE=site,
                  PYTHON=str(stand_ins(tmp_path)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert ("TRUBA recognised" in done.stdout) == (site == ""), done.stdout
    first = (tmp_path / "pip.log").read_text().splitlines()[1]   # after the maker's "made …" line
    assert (gpu.VARIANTS["cu126"].index_url in first) == (variant == "cu126"), first
