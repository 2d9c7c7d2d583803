"""Files in shared places (issue 36, item 4): the locks never follow a link they did not create, follow the
umask, and let a teammate of a group directory take them (K01, K02, P01)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ddp_tutorial import checkpoint, staging
from ddp_tutorial.i18n import TutorialError

REPO = Path(__file__).resolve().parents[1]


def test_a_link_named_like_the_checkpoint_lock_is_refused_and_its_target_left_alone(tmp_path, monkeypatch):
    """K01: the lock's open followed a planted link, then truncated its target and wrote JSON into it."""
    victim = tmp_path / "victim_rc"
    victim.write_text("export IMPORTANT=1\n")
    folder = tmp_path / "k1"
    folder.mkdir()
    (folder / checkpoint.LOCK_NAME).symlink_to("../victim_rc")
    for lang, words in (("en", "a symbolic link to ../victim_rc"), ("tr", "sembolik bağ")):
        monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
        with pytest.raises(TutorialError) as caught:
            checkpoint.ensure_writable(folder)
        assert caught.value.key == "ckpt_guard.lock_not_file" and words in str(caught.value)
    assert victim.read_text() == "export IMPORTANT=1\n"
    (folder / checkpoint.LOCK_NAME).unlink()
    checkpoint.ensure_writable(folder)  # the link removed: the run starts
    checkpoint.release(folder)


def test_a_fifo_named_like_the_checkpoint_lock_is_refused_in_one_sentence(tmp_path, monkeypatch):
    """K02: ftruncate's EINVAL escaped as "Cannot use ?: Invalid argument"."""
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    os.mkfifo(tmp_path / checkpoint.LOCK_NAME)
    with pytest.raises(TutorialError) as caught:
        checkpoint.ensure_writable(tmp_path)
    assert caught.value.key == "ckpt_guard.lock_not_file" and "named pipe" in str(caught.value)


def test_a_link_named_like_the_staging_lock_is_refused_and_nothing_is_created(tmp_path, monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    root = tmp_path / "root"
    folder = staging.raw_folder("mnist", root).parent
    folder.mkdir(parents=True)
    (folder / ".prepare.lock").symlink_to(tmp_path / "created-through-the-link")
    with pytest.raises(TutorialError) as caught:
        staging.prepare("mnist", root, from_dir=tmp_path, verbose=False)
    assert caught.value.key == "data.lock_not_file", caught.value
    assert not (tmp_path / "created-through-the-link").exists()


def test_the_checkpoint_lock_follows_the_umask(tmp_path):
    """P01, first half: the lock was created 0644 whatever the umask."""
    code = (f"import os; os.umask(0o002); from ddp_tutorial import checkpoint; "
            f"checkpoint.ensure_writable({str(tmp_path / 'ck')!r})")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=REPO)
    assert stat.S_IMODE((tmp_path / "ck" / checkpoint.LOCK_NAME).stat().st_mode) == 0o664


TEAMMATE = "from ddp_tutorial import checkpoint; checkpoint.ensure_writable({folder!r}); print('lock taken')"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_a_teammate_in_a_group_directory_can_take_a_lock_someone_else_created(tmp_path):
    """P01: in a setgid group directory a teammate may write the folder and the checkpoint, but the 0644
    lock file made by the first run said "Cannot write checkpoints … Permission denied". The teammate is
    root without its file-permission capabilities, in group 4242 (as a group member without privileges)."""
    shared = Path(tempfile.mkdtemp(prefix="ddp-group-"))
    try:
        shared.chmod(0o755)
        folder = shared / "ck"
        folder.mkdir()
        os.chown(folder, 4000, 4242)
        folder.chmod(0o2775)
        lock = folder / checkpoint.LOCK_NAME
        lock.write_text('{"pid": 1, "host": "vm", "since": "earlier"}\n')  # the first run's, as it made it then
        os.chown(lock, 4000, 4242)
        lock.chmod(0o644)
        (folder / checkpoint.CHECKPOINT_NAME).write_bytes(b"")
        os.chown(folder / checkpoint.CHECKPOINT_NAME, 4000, 4242)
        done = subprocess.run(["setpriv", "--groups=4242", "--bounding-set=-dac_override,-dac_read_search,-fowner",
                               "--", sys.executable, "-c", TEAMMATE.format(folder=str(folder))],
                              capture_output=True, text=True, timeout=120, cwd=REPO,
                              env={**os.environ, "DDP_TUTORIAL_LANG": "en"})
        assert done.returncode == 0 and "lock taken" in done.stdout, done.stderr[-2000:]
    finally:
        shutil.rmtree(shared, ignore_errors=True)
