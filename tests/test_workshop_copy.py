"""scripts/workshop_copy.sh where the copy cannot be made (review round 5: WC01–WC04): one line saying what
was wrong and what to do, exit 2, and no WORK.partial.* folder left behind; another user's copy is never
taken as "your copy". A full disk is a real 300 KB tmpfs (a mount namespace of its own); a folder the
attendee may not write is one owned by another uid, written by root without its file-permission
capabilities (as tests/test_shared_files.py does)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COPY = REPO / "scripts" / "workshop_copy.sh"
AS_A_USER = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]
needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("unshare"),
                                reason="needs root, setpriv and unshare")


def workshop_copy(*args: str, wrap=()) -> subprocess.CompletedProcess:
    return subprocess.run([*wrap, "bash", str(COPY), *args], capture_output=True, text=True, timeout=60)


def test_a_language_without_notebooks_is_one_line_and_leaves_nothing(tmp_path):
    """WC01: `workshop_copy.sh de W` (ondemand's bashrc passes DDP_TUTORIAL_LANG unchecked) was a raw
    `cp: cannot stat 'notebooks/de/*.ipynb'` and left W.partial.XXXXXX/ (one more at every shell start)."""
    done = workshop_copy("de", str(tmp_path / "W"))
    assert done.returncode == 2, done.stderr
    assert "no notebooks for the language 'de'" in done.stderr and "'de' dili için defter yok" in done.stderr
    assert len(done.stderr.splitlines()) == 1 and "cp:" not in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []


@needs_root
def test_a_full_disk_is_one_line_and_the_partial_copy_is_removed(tmp_path):
    """WC02: on a full disk six raw `cp: error writing …: No space left on device` lines, exit 1, and the
    partial copy (300 KB) stayed, keeping the disk full."""
    small = tmp_path / "small"
    small.mkdir()
    script = ('mount -t tmpfs -o size=300k tmpfs "$1" || exit 99; bash "$2" tr "$1/W2"; echo "rc=$?"; '
              'ls -A "$1"; df -k --output=used "$1" | tail -n 1')
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
                           str(small), str(COPY)], capture_output=True, text=True, timeout=60)
    lines = done.stdout.split()
    assert lines[:1] == ["rc=2"] and len(lines) == 2, done.stdout + done.stderr   # rc, then only `used`
    assert int(lines[1]) < 16, done.stdout                    # the disk is empty again
    assert "yer açın" in done.stderr and "No space left on device" in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1 and "cp:" not in done.stderr, done.stderr


@needs_root
def test_a_folder_the_attendee_may_not_write_is_one_line(tmp_path):
    """WC03: into a shared checkout owned by someone else (0755), a raw `mkdir: cannot create directory
    '…/workshop': Permission denied`, exit 1."""
    shared = tmp_path / "checkout"
    shared.mkdir()
    os.chown(shared, 4000, 4000)
    shared.chmod(0o755)
    for lang, words in (("en", "cannot make the copy of the notebooks in"), ("tr", "defterlerin kopyası")):
        done = workshop_copy(lang, str(shared / "workshop" / lang), wrap=AS_A_USER)
        assert done.returncode == 2, done.stderr
        assert words in done.stderr and "Permission denied" in done.stderr and "DDP_TUTORIAL_WORK" in done.stderr
        assert len(done.stderr.splitlines()) == 1 and "mkdir:" not in done.stderr, done.stderr
    assert list(shared.iterdir()) == []


def test_another_users_copy_is_not_taken_as_yours_nor_renamed(tmp_path):
    """WC04: uid 65534 ran `workshop_copy.sh en theirs/en` where root's copy existed: exit 0, nothing said,
    and lab.sh then opened someone else's notebooks (read-only) as "your copy"."""
    if os.geteuid() != 0:
        pytest.skip("needs root (a folder owned by another uid)")
    theirs = tmp_path / "en"
    theirs.mkdir()
    (theirs / "00_setup.ipynb").write_text("{}")
    os.chown(theirs, 4000, 4000)
    for args, words in ((("en",), "is the copy of another user"), (("tr",), "başka bir kullanıcının"),
                        (("en", "--reset"), "is the copy of another user")):
        done = workshop_copy(args[0], str(theirs), *args[1:])
        assert done.returncode == 2 and words in done.stderr and "DDP_TUTORIAL_WORK" in done.stderr, done.stderr
        assert len(done.stderr.splitlines()) == 1 and done.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["en"]      # --reset renamed nothing
    assert [p.name for p in theirs.iterdir()] == ["00_setup.ipynb"]
