"""The weak cases of ddp_tutorial.staging: bad files, a bad --root, a full disk, leftovers.

Each ends in a clear message in the user's language (checked in English and Turkish), never in a
traceback, and leaves nothing half-written behind. The files are small IDX sets written by
tests/helpers/idx_files.py, or Debian's genuine Fashion-MNIST where the content itself is the point.
"""

from __future__ import annotations

import gzip
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ddp_tutorial import staging
from ddp_tutorial.i18n import TutorialError

try:
    from idx_files import label_bytes, write_mnist_like
except ImportError:  # tests/ imported as a package
    from tests.idx_files import label_bytes, write_mnist_like

REPO = Path(__file__).resolve().parents[1]
FASHION = Path("/usr/share/datasets/fashion-mnist")
needs_fashion = pytest.mark.skipif(not FASHION.is_dir(), reason=f"{FASHION} is missing (dataset-fashion-mnist)")


@pytest.fixture(autouse=True)
def english(monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")


def errors_of(monkeypatch, call, *args, **kwargs):
    """The TutorialError of ``call`` in English and in Turkish (same key, different words)."""
    found = {}
    for lang in ("en", "tr"):
        monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
        with pytest.raises(TutorialError) as info:
            call(*args, **kwargs)
        found[lang] = info.value
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    assert found["en"].key == found["tr"].key and str(found["en"]) != str(found["tr"])
    return found["en"], found["tr"]


def staged_files(root: Path, dataset: str = "mnist") -> list:
    folder = staging.raw_folder(dataset, root)
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def run_cli(*argv: str, lang: str = "en", limit_bytes: int | None = None) -> subprocess.CompletedProcess:
    """``python -m ddp_tutorial …`` in a fresh interpreter (optionally under a file-size limit)."""
    def limit():
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    env = {**os.environ, "DDP_TUTORIAL_LANG": lang,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "ddp_tutorial", *argv], env=env, capture_output=True, text=True,
                          timeout=120, preexec_fn=limit)


def mounted_tmpfs(path: Path, options: str) -> bool:
    """Mount a tmpfs at ``path`` (root only); False where that is not possible."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                          capture_output=True).returncode == 0


# ------------------------------------------------------------------ the files themselves


def test_header_only_files_are_refused(tmp_path, monkeypatch):
    # Issue 13, bug 3: count 0 passed `data check`, then training died inside torchvision.
    root = write_mnist_like(tmp_path / "root", n_train=300, n_test=0)
    en, tr = errors_of(monkeypatch, staging.check, "mnist", root)
    assert en.key == "data.empty"
    assert str(staging.raw_folder("mnist", root) / "t10k-images-idx3-ubyte") in str(en)
    assert "empty split" in str(en) and "boş bir bölüm" in str(tr)

    src = write_mnist_like(tmp_path / "src", n_train=0, n_test=60, gz=True)
    error, _ = errors_of(monkeypatch, staging.prepare, "mnist", tmp_path / "t", from_dir=src)
    assert error.key == "data.empty" and str(src / "train-images-idx3-ubyte.gz") in str(error)
    assert staged_files(tmp_path / "t") == []  # nothing staged

    done = run_cli("data", "check", "--dataset", "mnist", "--root", str(root), lang="tr")
    assert done.returncode == 2 and "boş bir bölüm" in done.stderr and "Traceback" not in done.stderr


@needs_fashion
def test_the_fingerprints_are_debians_fashion_mnist():
    for split in staging.SPLITS:
        labels = gzip.open(FASHION / f"{split}-labels-idx1-ubyte.gz").read()[8:8 + staging.FINGERPRINT]
        assert labels == staging.FIRST_LABELS["fashion-mnist"][split]
    assert staging.FIRST_LABELS["mnist"]["train"] != staging.FIRST_LABELS["fashion-mnist"]["train"]


@needs_fashion
def test_train_and_test_files_swapped(tmp_path, monkeypatch):
    src = tmp_path / "swapped"
    src.mkdir()
    for mine, theirs in (("train", "t10k"), ("t10k", "train")):
        for kind in ("images-idx3", "labels-idx1"):
            (src / f"{mine}-{kind}-ubyte.gz").symlink_to(FASHION / f"{theirs}-{kind}-ubyte.gz")
    en, tr = errors_of(monkeypatch, staging.prepare, "fashion-mnist", tmp_path / "t", from_dir=src, verbose=False)
    assert en.key == "data.swapped"
    assert "10000" in str(en) and "60000" in str(en) and "swapped" in str(en) and "yer değiştirmiş" in str(tr)
    assert staged_files(tmp_path / "t", "fashion-mnist") == []


@needs_fashion
def test_fashion_mnist_imported_as_mnist(tmp_path, monkeypatch):
    en, tr = errors_of(monkeypatch, staging.prepare, "mnist", tmp_path / "t", from_dir=FASHION, verbose=False)
    assert en.key == "data.wrong_dataset"
    assert "--dataset fashion-mnist" in str(en) and "--dataset fashion-mnist" in str(tr)
    assert staged_files(tmp_path / "t") == []


@needs_fashion
def test_mnist_labels_imported_as_fashion_mnist(tmp_path, monkeypatch):
    # Full-size files whose labels open like MNIST's (no MNIST on this machine: the images are
    # Fashion-MNIST's, the labels MNIST's famous 5 0 4 1 9 2 1 3 1 4 …).
    src = tmp_path / "src"
    src.mkdir()
    for name in ("train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        (src / name).symlink_to(FASHION / name)
    labels = np.arange(60000) % 10
    labels[:staging.FINGERPRINT] = list(staging.FIRST_LABELS["mnist"]["train"])
    (src / "train-labels-idx1-ubyte").write_bytes(label_bytes(labels))
    error, _ = errors_of(monkeypatch, staging.prepare, "fashion-mnist", tmp_path / "t", from_dir=src, verbose=False)
    assert error.key == "data.wrong_dataset" and "--dataset mnist" in str(error)
    assert str(src / "train-labels-idx1-ubyte") in str(error)


def test_small_sets_are_not_fingerprinted(tmp_path):
    # Sets smaller than the published sizes (tests, subsets) are accepted: only size rules apply.
    root = write_mnist_like(tmp_path / "root", "fashion-mnist", n_train=300, n_test=60)
    assert staging.check("fashion-mnist", root) == (300, 60)


# ------------------------------------------------------------------ a bad --root


@pytest.fixture
def src(tmp_path) -> Path:
    return write_mnist_like(tmp_path / "src", n_train=300, n_test=60, gz=True)


def test_root_is_a_file(tmp_path, monkeypatch, src):
    root = tmp_path / "a-file"
    root.write_text("not a directory\n")
    for target in (root, root / "below"):
        en, tr = errors_of(monkeypatch, staging.prepare, "mnist", target, from_dir=src)
        assert en.key == "data.root_not_dir" and str(root) in str(en) and str(root) in str(tr)
    assert errors_of(monkeypatch, staging.check, "mnist", root)[0].key == "data.root_not_dir"  # `data check` too
    assert root.read_text() == "not a directory\n"

    done = run_cli("data", "prepare", "--dataset", "mnist", "--root", str(root), "--from", str(src), lang="tr")
    assert done.returncode == 2 and "dizin değil" in done.stderr and "Traceback" not in done.stderr


def test_root_is_a_symlink_loop(tmp_path, monkeypatch, src):
    root = tmp_path / "loop"
    root.symlink_to(root)
    en, tr = errors_of(monkeypatch, staging.prepare, "mnist", root, from_dir=src)
    assert en.key == "data.root_unusable" and str(root) in str(en)
    assert "symbolic link" in str(en) and "sembolik bağ" in str(tr)
    assert errors_of(monkeypatch, staging.check, "mnist", root)[0].key == "data.root_unusable"  # `data check` too


def test_read_only_root(tmp_path, monkeypatch, src):
    root = tmp_path / "ro"
    if mounted_tmpfs(root, "ro,size=1m"):
        cleanup = ["umount", str(root)]
    elif os.geteuid() != 0:
        root.mkdir(exist_ok=True)
        root.chmod(0o555)
        cleanup = ["chmod", "755", str(root)]
    else:
        pytest.skip("cannot make a read-only folder here")
    try:
        en, tr = errors_of(monkeypatch, staging.prepare, "mnist", root, from_dir=src)
        assert en.key == "data.read_only" and str(root) in str(en) and "--root" in str(tr)
    finally:
        subprocess.run(cleanup, check=True)


def test_full_disk_during_prepare_file_size_limit(tmp_path, src):
    # RLIMIT_FSIZE: writes past 100 kB fail with EFBIG (Python ignores SIGXFSZ), as on a full disk.
    root = tmp_path / "root"
    for lang, words in (("en", "disk is full"), ("tr", "disk doldu")):
        done = run_cli("data", "prepare", "--dataset", "mnist", "--root", str(root), "--from", str(src),
                       lang=lang, limit_bytes=100_000)
        assert done.returncode == 2, done.stderr
        assert words in done.stderr and "Traceback" not in done.stderr
        assert "train-images-idx3-ubyte" in done.stderr
        assert not [n for n in staged_files(root) if n.endswith(".tmp")]  # no temporary file left
    assert staging.prepare("mnist", root, from_dir=src, verbose=False) == root  # and it recovers
    assert staging.check("mnist", root) == (300, 60)


def test_full_disk_during_prepare_small_tmpfs(tmp_path, monkeypatch, src):
    root = tmp_path / "small"
    if not mounted_tmpfs(root, "size=128k"):
        pytest.skip("mounting a tmpfs needs root")
    try:
        en, tr = errors_of(monkeypatch, staging.prepare, "mnist", root, from_dir=src, verbose=False)
        assert en.key == "data.disk_full" and "--root" in str(tr)
        assert not [n for n in staged_files(root) if n.endswith(".tmp")]
    finally:
        subprocess.run(["umount", str(root)], check=True)


# ------------------------------------------------------------------ leftovers of a killed prepare


def test_leftovers_of_a_killed_prepare_are_removed(tmp_path, src, capsys):
    root = tmp_path / "root"
    folder = staging.raw_folder("mnist", root)
    folder.mkdir(parents=True)
    # What atomic.write_with and the download leave when killed: hidden names ending in .tmp.
    (folder / ".train-images-idx3-ubyte.k1ll3d.tmp").write_bytes(b"\0" * 50_000)
    (folder.parent / ".download-x1y2.tmp").mkdir()
    (folder.parent / ".download-x1y2.tmp" / "partial.gz").write_bytes(b"\0" * 10)
    keep = folder / "notes.txt"  # not ours: left alone
    keep.write_text("mine\n")
    staging.prepare("mnist", root, from_dir=src)
    out = capsys.readouterr().out
    assert out.count("Removed 1 leftover temporary file") == 2  # the file, and the download folder
    assert staged_files(root) == sorted([*staging.ALL_FILES, "notes.txt"])
    assert not (folder.parent / ".download-x1y2.tmp").exists()


def test_a_prepare_killed_for_real_leaves_only_what_the_next_one_cleans(tmp_path, src):
    # Kill a prepare at a random point of its copy (SIGKILL: no clean-up runs), then prepare again.
    big = write_mnist_like(tmp_path / "big", n_train=20000, n_test=100, gz=True)
    root = tmp_path / "root"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-c", "import sys; from ddp_tutorial import staging;"
                              "staging.prepare('mnist', sys.argv[1], from_dir=sys.argv[2], verbose=False)",
                              str(root), str(big)], env=env)
    folder = staging.raw_folder("mnist", root)
    try:
        while child.poll() is None and not (folder.is_dir() and any(p.suffix == ".tmp" for p in folder.iterdir())):
            pass
        caught = child.poll() is None
    finally:
        child.kill()
        child.wait()
    assert caught, "the child finished before it could be killed mid-copy"
    assert [p.name for p in folder.iterdir() if p.suffix == ".tmp"]  # SIGKILL: the temporary file stays
    staging.prepare("mnist", root, from_dir=big, verbose=False)
    assert staged_files(root) == sorted(staging.ALL_FILES)
    assert staging.check("mnist", root) == (20000, 100)
