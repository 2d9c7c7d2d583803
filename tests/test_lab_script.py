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
