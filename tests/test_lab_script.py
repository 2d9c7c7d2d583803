"""scripts/lab.sh refuses what it cannot use at once, in one line, before any setup (issue 25 L02/L03)."""

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def lab(*args, **env):
    environ = dict(os.environ, **env)
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


def test_a_start_when_nothing_changed_neither_installs_nor_stages(tmp_path):
    """Issue 26 R7: the second start goes straight to JupyterLab (here `jupyter lab --version`, the
    options after the language are JupyterLab's), with no setup.sh and no staging, on the one data
    folder README and 00 name: ~/ddp-data."""
    stamp = REPO / ".venv" / ".lab-setup-done"   # scripts/setup.sh leaves it (CI ran setup.sh --test)
    assert stamp.exists(), "scripts/setup.sh did not leave .venv/.lab-setup-done"
    root = Path(os.environ.get("DDP_TUTORIAL_ROOT", REPO / ".data"))   # what scripts/test.sh staged
    folder, name = next(((f, n) for f, n in (("MNIST", "mnist"), ("FashionMNIST", "fashion-mnist"))
                         if (root / f).is_dir()), (None, None))
    assert folder, f"no data set staged in {root}"
    home = tmp_path / "home"
    (home / "ddp-data").mkdir(parents=True)
    (home / "ddp-data" / folder).symlink_to(root / folder)
    environ = {k: v for k, v in os.environ.items() if k not in ("DDP_TUTORIAL_ROOT", "DDP_TUTORIAL_DATASET")}
    environ.update(HOME=str(home), DDP_TUTORIAL_WORK=str(tmp_path / "work"))
    done = subprocess.run(["bash", str(REPO / "scripts" / "lab.sh"), "tr", "--version"], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"veri kümesi: {name} ({home / 'ddp-data'})" in done.stdout, done.stdout
    assert "pip install" not in done.stdout and "hazırlanıyor" not in done.stdout and "staging" not in done.stdout
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
    for name in ("lab.sh", "workshop_copy.sh", "setup.sh", "python_check.sh"):
        (clone / "scripts" / name).write_bytes((REPO / "scripts" / name).read_bytes())
    (clone / "pyproject.toml").write_bytes((REPO / "pyproject.toml").read_bytes())
    (clone / "notebooks" / "lab").mkdir(parents=True)
    (clone / "notebooks" / "lab" / "overrides.json").write_bytes((REPO / "notebooks/lab/overrides.json").read_bytes())
    (clone / "notebooks" / "en").symlink_to(REPO / "notebooks" / "en")
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
