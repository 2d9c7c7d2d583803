"""Issue 34 item 2 (review N2): scripts/setup.sh and scripts/lab.sh check the Python interpreter before
anything else. The package needs Python >= 3.11 (tomllib); an EL login node's python3 is 3.6 or 3.9, and
setup.sh used to die later with a ModuleNotFoundError traceback. Now: one line, in the user's language,
that names TRUBA's module (from ddp_tutorial/gpu_sites.py, marked when it is not verified) and
exit code 2. The old Python is a stand-in on PATH (this machine has no Python older than 3.11)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ddp_tutorial import gpu

REPO = Path(__file__).resolve().parents[1]
MODULE = gpu.SITES["truba"].python_module

OLD_PYTHON = """#!/bin/sh
# A stand-in for an EL9 login node's python3 (TRUBA's is 3.9.18): no tomllib.
case "$1" in
  --version|-V) echo "Python 3.9.18"; exit 0 ;;
  -c) echo "ModuleNotFoundError: No module named 'tomllib'" >&2; exit 1 ;;
esac
exit 1
"""
WORDS = {"en": "needs Python 3.11 or newer", "tr": "Python 3.11 ya da daha yenisini ister"}
NOT_VERIFIED = {"en": "name not verified on TRUBA", "tr": "ad TRUBA'da doğrulanmadı"}


@pytest.fixture
def old_python(tmp_path) -> dict:
    """An environment whose python3 is the stand-in (and no PYTHON, no language set)."""
    folder = tmp_path / "old-bin"
    folder.mkdir()
    (folder / "python3").write_text(OLD_PYTHON)
    (folder / "python3").chmod(0o755)
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "DDP_TUTORIAL_LANG", "VIRTUAL_ENV")}
    environ["PATH"] = f"{folder}:{environ['PATH']}"
    return environ


def _one_line(done, languages) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "ModuleNotFoundError" not in done.stderr, done.stderr
    assert done.stdout == "", done.stdout               # nothing was done before the check
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert "Python 3.9.18" in line and f"module load {MODULE}" in line and "module av python" in line, line
    for lang in ("en", "tr"):
        assert (WORDS[lang] in line) == (lang in languages), line
        if not gpu.SITES["truba"].python_module_verified:
            assert (NOT_VERIFIED[lang] in line) == (lang in languages), line
    return line


def test_the_site_table_names_trubas_python_module():
    site = gpu.SITES["truba"]
    assert site.python_module.startswith("comp/python/3.1") and site.python_module_verified is False


@pytest.mark.parametrize("lang, languages", [("tr", ["tr"]), ("en", ["en"]), ("", ["en", "tr"])])
def test_setup_sh_stops_at_an_old_python_in_one_line(old_python, tmp_path, lang, languages):
    environ = dict(old_python, VENV=str(tmp_path / "venv"), DDP_TUTORIAL_LANG=lang)
    done = subprocess.run(["bash", str(REPO / "scripts" / "setup.sh")], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=60)
    line = _one_line(done, languages)
    assert "setup.sh" in line
    assert not (tmp_path / "venv").exists()


def test_setup_sh_names_a_missing_python(old_python, tmp_path):
    environ = dict(old_python, VENV=str(tmp_path / "venv"), DDP_TUTORIAL_LANG="en",
                   PYTHON=str(tmp_path / "no-such-python3.12"))
    done = subprocess.run(["bash", str(REPO / "scripts" / "setup.sh")], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "no-such-python3.12 here: not found" in done.stderr and f"module load {MODULE}" in done.stderr


def _fresh_checkout(tmp_path) -> Path:
    """What a fresh clone has that lab.sh reads before setup: the scripts and the site table; no .venv."""
    clone = tmp_path / "clone"
    (clone / "scripts").mkdir(parents=True)
    for name in ("lab.sh", "setup.sh", "python_check.sh", "workshop_copy.sh"):
        shutil.copy(REPO / "scripts" / name, clone / "scripts" / name)
    (clone / "ddp_tutorial").mkdir()
    shutil.copy(REPO / "ddp_tutorial" / "gpu_sites.py", clone / "ddp_tutorial" / "gpu_sites.py")
    shutil.copy(REPO / "pyproject.toml", clone / "pyproject.toml")
    return clone


@pytest.mark.parametrize("args, languages", [(["tr"], ["tr"]), (["en", "--no-browser"], ["en"]), ([], ["en"])])
def test_lab_sh_stops_at_an_old_python_in_the_attendees_language(old_python, tmp_path, args, languages):
    clone = _fresh_checkout(tmp_path)
    done = subprocess.run(["bash", "scripts/lab.sh", *args], cwd=clone, env=old_python,
                          capture_output=True, text=True, timeout=60)
    line = _one_line(done, languages)
    assert "lab.sh" in line
    assert not (clone / ".venv").exists() and not (clone / "workshop").exists()


@pytest.mark.parametrize("lang", ["tr", "en"])
def test_lab_sh_checks_the_class_environments_python_first(old_python, tmp_path, lang):
    """Issue 34 items 1-2: with DDP_TUTORIAL_VENV the interpreter checked is the class environment's: a venv
    made with an old Python stops lab.sh in one line, in the attendee's language, before anything is done."""
    clone = _fresh_checkout(tmp_path)
    venv = tmp_path / "class-env"
    (venv / "bin").mkdir(parents=True)
    shutil.copy(tmp_path / "old-bin" / "python3", venv / "bin" / "python")
    environ = dict(old_python, DDP_TUTORIAL_VENV=str(venv))
    done = subprocess.run(["bash", "scripts/lab.sh", lang], cwd=clone, env=environ, capture_output=True, text=True,
                          timeout=60)
    line = _one_line(done, [lang])
    assert f"{venv}/bin/python" in line
    assert not (clone / ".venv").exists() and not (clone / "workshop").exists()
