"""scripts/setup.sh --prefix DIR, the class environment (review round 5: CE01, CE02): only a folder this
script made is taken, and only that folder is opened to all, writable by its owner alone.

Nothing here installs anything: DIR's Python is a stand-in whose pip only records what it was asked
(as tests/test_lab_script.py does), and the Python that makes a new DIR is a stand-in that makes a real
`python -m venv --without-pip` and puts that recorder in as its bin/python. SKIP_SYSTEM=1: no apt-get.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
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

# PYTHON for setup.sh: `-m venv DIR` makes a real venv (no pip in it) from BASE, a real interpreter, and puts
# stand-ins into its site-packages: a pip that only records, a torch that is only a version (no torchvision:
# the build check fails, so pip is asked), and a .pth that finds this checkout's package.
VENV_MAKER = """#!/bin/bash
if [ "$1 $2" = "-m venv" ]; then
  "{base}" -m venv --without-pip "$3" || exit 1
  cp -r "{packages}"/. "$(echo "$3"/lib/python3*/site-packages)"/
  echo "made $3" >> "{log}"; exit 0
fi
exec "{base}" "$@"
"""
PIP_MAIN = 'import sys\nwith open({log!r}, "a") as log:\n    log.write(" ".join(sys.argv[3:]) + "\\n")\n'


# A PYTHON that is too old for setup.sh: the old code stopped there (python_check), before touching anything.
TOO_OLD = "#!/bin/bash\necho 'Python 3.6.8'\nexit 1\n"


def open_python() -> str:
    """A Python >= 3.11 every user can run (the system's), for environments others must run (class day P1)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK) and subprocess.run(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", candidate, "-c",
                 "import sys, tomllib; sys.exit(sys.version_info < (3, 11))"], capture_output=True).returncode == 0:
            return candidate
    pytest.skip("no Python >= 3.11 that every user can run (/usr/bin/python3)")


@pytest.fixture
def open_folder():
    """A folder every user can enter (pytest's tmp_path is its owner's alone), removed at the end; needs root
    (setup.sh --prefix then checks the environment as nobody) and setpriv."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv: setup.sh --prefix checks the environment as another user")
    folder = Path(tempfile.mkdtemp(prefix="ddp-setup-test-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def stand_ins(folder: Path, base: str = "") -> Path:
    """The venv maker (setup.sh's PYTHON), making venvs from ``base`` (default: a Python others can run)."""
    log, packages = folder / "pip.log", folder / "stand-in-packages"
    (packages / "pip").mkdir(parents=True)
    (packages / "pip" / "__init__.py").write_text("")
    (packages / "pip" / "__main__.py").write_text(PIP_MAIN.format(log=str(log)))
    (packages / "torch").mkdir()
    (packages / "torch" / "__init__.py").write_text('__version__ = "2.14.1"\n')
    (packages / "ddp_tutorial.pth").write_text(f"{REPO}\n")
    maker = folder / "python3"
    maker.write_text(VENV_MAKER.replace("{base}", base or open_python()).replace("{log}", str(log))
                     .replace("{packages}", str(packages)))
    maker.chmod(0o755)
    return maker


def setup(tmp_path: Path, *args: str, lang: str = "en", umask: int = 0o022, host: str = "",
          **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("DDP_TUTORIAL_SITE", "VENV", "VIRTUAL_ENV")}
    environ.update({"SKIP_SYSTEM": "1", "DDP_TUTORIAL_SITE": "none", **env})
    if lang:
        environ["DDP_TUTORIAL_LANG"] = lang
    else:
        environ.pop("DDP_TUTORIAL_LANG", None)
    wrap = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host] if host else []
    return subprocess.run([*wrap, "bash", str(SETUP), *args], cwd=tmp_path, env=environ, capture_output=True,
                          text=True, timeout=120, umask=umask)


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


def test_a_new_folder_becomes_the_class_environment_owner_writable_only_even_under_umask_002(open_folder):
    """CE01: under umask 002 every folder and file of the class environment was group-writable (setup.sh
    added read for all and never removed group write). CE02: the folder setup.sh made carries its marker,
    and a second run takes it again (an update); an empty folder is taken as a new one. T5-17: the Python
    module loaded for the build is recorded in DIR/ddp-tutorial.module (none loaded: the file is empty)."""
    tmp_path = open_folder
    maker = stand_ins(tmp_path)
    (tmp_path / "empty").mkdir()
    for name, modules, recorded in (("class-env", "comp/gcc/12.3.0:comp/python/3.12.2", "comp/python/3.12.2\n"),
                                    ("empty", "", "")):
        done = setup(tmp_path, "--prefix", name, umask=0o002, PYTHON=str(maker), LOADEDMODULES=modules)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "class environment ready" in done.stdout, done.stdout
        prefix = tmp_path / name
        assert (prefix / "ddp-tutorial.module").read_text() == recorded
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


def test_a_class_environment_made_before_the_marker_existed_is_updated_and_marked(open_folder):
    """A class environment built by an earlier setup.sh has no marker but is a venv with ddp_tutorial installed:
    an instructor's update run takes it (and marks it); the same venv without the package is refused untouched."""
    tmp_path = open_folder
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


# ----------------------------------------------------------------------------- class day P1
def private_python(folder: Path) -> Path:
    """A real Python >= 3.11 in a mode-700 folder, as one in the instructor's home: a copy of the system's
    interpreter, its standard library linked beside it (what it looks for next to itself)."""
    base = Path(os.path.realpath(open_python()))
    private = folder / "home-of-instructor"
    (private / "bin").mkdir(parents=True)
    (private / "lib").mkdir()
    shutil.copy2(base, private / "bin" / "python3")
    code = "import sys; print(f'python{sys.version_info[0]}.{sys.version_info[1]}')"
    version = subprocess.run([str(base), "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    (private / "lib" / version).symlink_to(Path(base).parent.parent / "lib" / version)
    private.chmod(0o700)
    return private / "bin" / "python3"


@pytest.mark.parametrize("lang, words", [
    ("en", "but other users cannot run it: {blocker} does not let them through"),
    ("tr", "ama başka kullanıcılar onu çalıştıramıyor: {blocker} onları geçirmiyor")])
def test_an_environment_others_cannot_run_is_not_called_ready(open_folder, lang, words):
    """Class day P1: built from a Python in a private folder, the venv's python links there; the instructor's
    checks were green and every attendee got "bad interpreter: Permission denied". setup.sh now checks as
    another user and names the folder that blocks them (the old code said "class environment ready", exit 0)."""
    python = private_python(open_folder)
    maker = stand_ins(open_folder, base=str(python))
    done = setup(open_folder, "--prefix", "class-env", lang=lang, PYTHON=str(maker))
    assert done.returncode == 2, done.stdout + done.stderr
    assert words.format(blocker=python.parent.parent) in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1 and "ready" not in done.stdout and "hazır" not in done.stdout
    assert "module av python" in done.stderr


def test_an_environment_whose_package_others_cannot_import_is_named(open_folder):
    """P1, the other way: an open interpreter, but the package lies where nobody may read it (here its .pth
    points into a mode-700 folder). The import as nobody fails, and says so."""
    maker = stand_ins(open_folder)
    hidden = open_folder / "hidden"
    hidden.mkdir()
    (hidden / "ddp_tutorial").symlink_to(REPO / "ddp_tutorial")
    hidden.chmod(0o700)
    (open_folder / "stand-in-packages" / "ddp_tutorial.pth").write_text(f"{hidden}\n")
    done = setup(open_folder, "--prefix", "class-env", PYTHON=str(maker))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "as another user (nobody) its Python cannot import the package" in done.stderr, done.stderr
    assert "ddp_tutorial" in done.stderr and len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize("script, lang, words", [
    ("lab.sh", "en", "is there, but you (nobody) cannot run it: {blocker} does not let you through"),
    ("lab.sh", "tr", "orada, ama siz (nobody) onu çalıştıramıyorsunuz: {blocker} sizi geçirmiyor"),
    ("lab_job.sh", "en", "is there, but you (nobody) cannot run it: {blocker} does not let you through"),
])
def test_the_attendee_is_told_the_interpreter_is_not_runnable_not_missing(open_folder, script, lang, words):
    """P1: an attendee (a real non-root user, nobody) starts with such an environment; lab.sh said "there is no
    Python environment there", blaming the path they gave."""
    python = private_python(open_folder)
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(open_folder / "class-env")], check=True)
    (open_folder / "class-env" / "bin" / "jupyter").write_text("#!/bin/sh\n")
    (open_folder / "class-env" / "bin" / "jupyter").chmod(0o755)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("DDP_TUTORIAL_", "SLURM_"))}
    environ.update(HOME=str(open_folder), DDP_TUTORIAL_VENV=str(open_folder / "class-env"), DDP_TUTORIAL_LANG=lang,
                   DDP_TUTORIAL_LOGIN_OK="1")
    args = [lang] if script == "lab.sh" else []
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash",
                           str(REPO / "scripts" / script), *args], cwd=open_folder, env=environ,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert words.format(blocker=python.parent.parent) in done.stderr, done.stderr
    assert "no Python environment" not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr


@pytest.mark.parametrize("lang, words", [
    ("en", "this is arf-ui1, a login node of TRUBA (ARF / ARF-ACC): the class environment is built in a job on a "
           "compute node, e.g. srun -p debug"),
    ("tr", "burası arf-ui1, TRUBA (ARF / ARF-ACC) giriş düğümlerinden biri: sınıf ortamı bir hesaplama düğümündeki "
           "bir işte kurulur")])
def test_the_class_environment_is_not_built_on_a_login_node(tmp_path, lang, words):
    """The class environment is built in a job on a compute node (issue 45): a pip install of some 6 GB on
    arf-ui1 is the load TRUBA suspends accounts for. Refused by the site table's name, in salloc's shell too,
    before anything is made; --login-ok builds it (here the Python is too old: it stops at that check)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (a host name of its own)")
    old = tmp_path / "old-python"
    old.write_text(TOO_OLD)
    old.chmod(0o755)
    for env in ({}, {"SLURM_JOB_ID": "7"}):
        done = setup(tmp_path, "--site", "truba", "--prefix", "class-env", lang=lang, host="arf-ui1",
                     PYTHON=str(old), DDP_TUTORIAL_LOGIN_OK="0", **env)
        assert done.returncode == 2 and words in done.stderr, done.stdout + done.stderr
        assert len(done.stderr.splitlines()) == 1 and done.stdout == "" and not (tmp_path / "class-env").exists()
    allowed = setup(tmp_path, "--site", "truba", "--prefix", "class-env", "--login-ok", lang=lang, host="arf-ui1",
                    PYTHON=str(old), DDP_TUTORIAL_LOGIN_OK="0")
    assert allowed.returncode == 2 and "3.11" in allowed.stderr and words not in allowed.stderr, allowed.stderr


@pytest.mark.parametrize("lang, words", [("en", "forbids installing Python libraries with pip"),
                                         ("tr", "pip ile Python kütüphanesi kurmayı yasakladığı")])
def test_a_venv_of_its_own_on_the_sites_no_pip_storage_is_refused(tmp_path, lang, words):
    """TRUBA's guide forbids pip installs on /arf (python.rst:23; the table's [storage] no_pip_on): lab.sh
    without the class environment would build the checkout's own .venv there. With a site table whose no_pip_on
    is this test's folder, setup.sh refuses before anything is made and names the rule's source; a venv
    elsewhere is not refused by it (here it stops at the too-old Python instead)."""
    table = tmp_path / "site.toml"
    table.write_text((REPO / "ddp_tutorial" / "sites" / "truba.toml").read_text()
                     .replace('no_pip_on = "/arf"', f'no_pip_on = "{tmp_path / "arf"}"'))
    old = tmp_path / "old-python"
    old.write_text(TOO_OLD)
    old.chmod(0o755)
    venv = tmp_path / "arf" / "home" / "me" / "ddp-tutorial" / ".venv"
    done = setup(tmp_path, lang=lang, DDP_TUTORIAL_SITE=str(table), VENV=str(venv), PYTHON=str(old))
    assert done.returncode == 2 and words in done.stderr, done.stdout + done.stderr
    assert "uygulamalar/Python/python.rst:23" in done.stderr and "DDP_TUTORIAL_VENV" in done.stderr
    assert not (tmp_path / "arf").exists()
    elsewhere = setup(tmp_path, lang=lang, DDP_TUTORIAL_SITE=str(table), VENV=str(tmp_path / "venv"),
                      PYTHON=str(old))
    assert elsewhere.returncode == 2 and words not in elsewhere.stderr and "3.11" in elsewhere.stderr, \
        elsewhere.stderr
