"""scripts/setup.sh --prefix DIR, the class environment (review round 5: CE01, CE02): only a folder this
script made is taken, and only that folder is opened to all, writable by its owner alone.

Nothing here installs anything: DIR's Python is a stand-in whose pip only records what it was asked
(as tests/test_lab_script.py does), and the Python that makes a new DIR is a stand-in that makes a real
`python -m venv --without-pip` and puts that recorder in as its bin/python. SKIP_SYSTEM=1: no apt-get.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SETUP = REPO / "scripts" / "setup.sh"
VENV_PYTHON = REPO / ".venv" / "bin" / "python"

RECORDING_PYTHON = """#!/bin/bash
# pip only records (no download, no install); torch counts as not installed; the rest is a real Python.
if [ "$1 $2" = "-m pip" ]; then shift 4; echo "$*" >> "{log}"; exit 0; fi
case "$*" in *"import torch, torchvision, sys"*) exit 1 ;; esac
exec "{python}" "$@"
"""

# PYTHON for setup.sh: `-m venv DIR` makes a real venv (no pip in it) whose bin/python is the recorder.
VENV_MAKER = """#!/bin/bash
if [ "$1 $2" = "-m venv" ]; then
  "{python}" -m venv --without-pip "$3" || exit 1
  rm -f "$3/bin/python" && cp "{recorder}" "$3/bin/python" && chmod 0755 "$3/bin/python"
  echo "made $3" >> "{log}"; exit 0
fi
exec "{python}" "$@"
"""

# A PYTHON that is too old for setup.sh: the old code stopped there (python_check), before touching anything.
TOO_OLD = "#!/bin/bash\necho 'Python 3.6.8'\nexit 1\n"


def stand_ins(tmp_path: Path) -> Path:
    """The recorder and the venv maker; returns the maker (setup.sh's PYTHON)."""
    log = tmp_path / "pip.log"
    recorder = tmp_path / "recorder"
    recorder.write_text(RECORDING_PYTHON.replace("{log}", str(log)).replace("{python}", str(VENV_PYTHON)))
    maker = tmp_path / "python3"
    maker.write_text(VENV_MAKER.replace("{python}", sys.executable).replace("{recorder}", str(recorder))
                     .replace("{log}", str(log)))
    for path in (recorder, maker):
        path.chmod(0o755)
    return maker


def setup(tmp_path: Path, *args: str, lang: str = "en", umask: int = 0o022, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("DDP_TUTORIAL_SITE", "VENV", "VIRTUAL_ENV")}
    environ.update(SKIP_SYSTEM="1", DDP_TUTORIAL_SITE="none", **env)
    if lang:
        environ["DDP_TUTORIAL_LANG"] = lang
    else:
        environ.pop("DDP_TUTORIAL_LANG", None)
    return subprocess.run(["bash", str(SETUP), *args], cwd=tmp_path, env=environ, capture_output=True, text=True,
                          timeout=120, umask=umask)


def modes(folder: Path) -> dict:
    return {str(p.relative_to(folder)): stat.S_IMODE(p.lstat().st_mode) for p in folder.rglob("*")
            if not p.is_symlink()}


def test_an_existing_folder_with_a_bin_python_is_refused_and_its_private_files_stay_private(tmp_path):
    """CE02: any DIR with an executable bin/python was taken as the venv: its pip ran, and the closing
    `chmod -R a+rX DIR` turned a 0600 key into 0644 and its 0700 folder into 0755."""
    other = tmp_path / "miniconda3"
    (other / "bin").mkdir(parents=True)
    log = tmp_path / "pip.log"
    (other / "bin" / "python").write_text(RECORDING_PYTHON.replace("{log}", str(log))
                                          .replace("{python}", str(VENV_PYTHON)))
    (other / "bin" / "python").chmod(0o755)
    key = other / "home" / "u" / ".ssh" / "id_rsa"
    key.parent.mkdir(parents=True)
    key.parent.chmod(0o700)
    key.write_text("PRIVATE KEY\n")
    key.chmod(0o600)
    before = modes(other)
    for lang, words in (("en", "already holds files and is no class environment made by this script"),
                        ("tr", "zaten dosyalar içeriyor ve bu betiğin kurduğu bir sınıf ortamı değil")):
        done = setup(tmp_path, "--prefix", "miniconda3", lang=lang)
        assert done.returncode == 2, done.stdout + done.stderr
        assert words in done.stderr and "'miniconda3'" in done.stderr, done.stderr
        assert len(done.stderr.splitlines()) == 1 and done.stdout == "", done.stdout + done.stderr
    assert modes(other) == before and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert not log.exists(), "the folder's own Python ran"
    assert not (other / "share").exists()


@pytest.mark.parametrize("where, words_en, words_tr", [
    ("/", "is the root folder", "kök dizin"),
    ("home", "is your home folder", "ev dizininiz"),
])
def test_the_root_folder_and_the_home_folder_are_refused_by_name(tmp_path, where, words_en, words_tr):
    """CE02: `--prefix "$CLASS/"` with CLASS unset is `--prefix /`. PYTHON is too old here, so that code
    without the check stops at the Python check (another message) before it touches the folder."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("# mine\n")
    old = tmp_path / "old-python"
    old.write_text(TOO_OLD)
    old.chmod(0o755)
    prefix = "/" if where == "/" else str(home) + "/"
    done = setup(tmp_path, "--prefix", prefix, lang="", HOME=str(home), PYTHON=str(old))
    assert done.returncode == 2, done.stdout + done.stderr
    assert words_en in done.stderr and words_tr in done.stderr and "--prefix \"$DIR/\"" in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stdout == ""
    assert sorted(p.name for p in home.iterdir()) == [".bashrc"]


def test_a_new_folder_becomes_the_class_environment_owner_writable_only_even_under_umask_002(tmp_path):
    """CE01: under umask 002 every folder and file of the class environment was group-writable (setup.sh
    added read for all and never removed group write). CE02: the folder setup.sh made carries its marker,
    and a second run takes it again (an update); an empty folder is taken as a new one."""
    maker = stand_ins(tmp_path)
    (tmp_path / "empty").mkdir()
    for name in ("class-env", "empty"):
        done = setup(tmp_path, "--prefix", name, umask=0o002, PYTHON=str(maker))
        assert done.returncode == 0, done.stdout + done.stderr
        prefix = tmp_path / name
        assert (prefix / ".ddp-tutorial-class-env").is_file() and (prefix / "pyvenv.cfg").is_file()
        assert (prefix / "share" / "jupyter" / "lab" / "settings" / "overrides.json").is_file()
        written = modes(prefix)
        assert written and not {p: oct(m) for p, m in written.items() if m & 0o022}, written
        assert all(m & 0o004 for m in written.values()), written
        assert all(m & 0o001 for p, m in written.items() if (prefix / p).is_dir())
    again = setup(tmp_path, "--prefix", "class-env", PYTHON=str(maker))
    assert again.returncode == 0, again.stdout + again.stderr
    log = (tmp_path / "pip.log").read_text()
    assert log.count("made ") == 2, log   # the second run on class-env made no new venv
    assert log.count("install --no-cache-dir") == 3, log


def test_a_file_as_the_prefix_is_refused(tmp_path):
    (tmp_path / "env").write_text("")
    done = setup(tmp_path, "--prefix", "env", lang="tr")
    assert done.returncode == 2 and "bir dizin değil, dosya" in done.stderr, done.stderr


def test_a_class_environment_made_before_the_marker_existed_is_updated_and_marked(tmp_path):
    """A class environment built by an earlier setup.sh has no marker but is a venv with ddp_tutorial installed:
    an instructor's update run takes it (and marks it); the same venv without the package is refused untouched."""
    maker = stand_ins(tmp_path)
    assert setup(tmp_path, "--prefix", "class-env", PYTHON=str(maker)).returncode == 0
    prefix = tmp_path / "class-env"
    marker = prefix / ".ddp-tutorial-class-env"
    marker.unlink()
    site = next(prefix.glob("lib/python3*")) / "site-packages"
    installed = site / "ddp_tutorial-0.5.0.dist-info"
    installed.mkdir(parents=True)
    again = setup(tmp_path, "--prefix", "class-env", PYTHON=str(maker))
    assert again.returncode == 0, again.stdout + again.stderr
    assert marker.is_file()
    marker.unlink()
    installed.rmdir()
    refused = setup(tmp_path, "--prefix", "class-env", PYTHON=str(maker))
    assert refused.returncode == 2 and "no class environment made by this script" in refused.stderr, refused.stderr
    assert not marker.exists()
