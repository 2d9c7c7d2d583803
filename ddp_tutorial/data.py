"""Step 2 — the data: stage it once, then every process loads it from disk.

The seed tutorial lets every training process call ``MNIST(root, download=True)``.
That breaks on a cluster twice over: compute nodes usually have no internet, and
several processes downloading into the same folder at once can leave half-written
files behind. So this module splits the job in two:

* :func:`prepare` runs **once**, before training (on a cluster: on the login node).
  It downloads the data with torchvision, or imports the four IDX files from a
  directory (``--from``; e.g. Debian's ``/usr/share/datasets/fashion-mnist``), and
  writes them where torchvision looks for them: ``ROOT/<MNIST|FashionMNIST>/raw/``.
  It holds a lock while it works and writes every file under a temporary name
  first, so concurrent runs never leave a partial file.
* :func:`load` runs in every training process. It **never downloads**: it checks
  the files, reads them through torchvision (``download=False``) and keeps the
  whole set in memory as one ``uint8`` tensor, from which :meth:`InMemoryData.batch`
  cuts batches by index (no per-sample PIL / ``ToTensor``).

The IDX format (http://yann.lecun.com/exdb/mnist/) is simple enough to check
cheaply from the header and the file size alone:

* images: big-endian ``magic=2051, count, rows=28, cols=28``, then ``count*28*28`` bytes;
* labels: big-endian ``magic=2049, count``, then ``count`` bytes (0…9).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gzip
import os
import secrets
import shlex
import shutil
import socket
import struct
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple
from urllib.error import URLError

import torch
from torchvision.datasets import MNIST, FashionMNIST

from .i18n import TutorialError, t

# The data sets we know, by the name used on the command line. torchvision stores
# each one under ROOT/<class name>/raw/, e.g. ROOT/FashionMNIST/raw/.
DATASETS = {"mnist": MNIST, "fashion-mnist": FashionMNIST}

IMAGE_MAGIC, LABEL_MAGIC = 2051, 2049
IMAGE_HEADER, LABEL_HEADER = 16, 8  # bytes: four and two big-endian uint32
HEIGHT = WIDTH = 28
NUM_CLASSES = 10
DOWNLOAD_TIMEOUT_S = 30  # a silent mirror must not hang `prepare` forever

ROOT_VARIABLE = "DDP_TUTORIAL_ROOT"
DATASET_VARIABLE = "DDP_TUTORIAL_DATASET"


def default_root() -> Path:
    """``$DDP_TUTORIAL_ROOT``, else ``~/.cache/ddp-tutorial/data``."""
    return Path(os.environ.get(ROOT_VARIABLE) or Path.home() / ".cache" / "ddp-tutorial" / "data").expanduser()


def default_dataset() -> str:
    """``$DDP_TUTORIAL_DATASET``, else ``mnist``."""
    return os.environ.get(DATASET_VARIABLE) or "mnist"


def dataset_class(dataset: str):
    """The torchvision class for ``dataset`` (a :class:`TutorialError` for an unknown name)."""
    if dataset not in DATASETS:
        raise TutorialError("data.unknown_dataset", name=dataset, valid=", ".join(DATASETS))
    return DATASETS[dataset]


def raw_folder(dataset: str, root: Path) -> Path:
    """Where torchvision reads the files: ``ROOT/<class name>/raw``."""
    return Path(root).expanduser() / dataset_class(dataset).__name__ / "raw"


def file_names(split: str) -> Tuple[str, str]:
    """The image and label file names of ``split`` (``train`` or ``t10k``)."""
    return f"{split}-images-idx3-ubyte", f"{split}-labels-idx1-ubyte"


ALL_FILES = file_names("train") + file_names("t10k")


def prepare_command(dataset: str, root: Path, from_dir: Optional[str] = None) -> str:
    """The exact command that stages ``dataset`` in ``root`` (shown in error messages)."""
    command = f"ddp-tutorial data prepare --dataset {dataset} --root {shlex.quote(str(root))}"
    return command + (f" --from {shlex.quote(str(from_dir))}" if from_dir else "")


# --------------------------------------------------------------------------------------
# Checking the files: header and size only, so it costs microseconds, not a full read.
# --------------------------------------------------------------------------------------

# In the functions below, ``fix`` is the command the error message tells the user to
# run, and ``shown`` the path the message names (the import source when we check a
# temporary copy of it; the file itself otherwise).

def _header(path: Path, size: int, fix: str, shown: Path) -> Tuple[int, ...]:
    with open(path, "rb") as f:
        head = f.read(size)
    if len(head) < size:
        raise TutorialError("data.too_short", path=shown, size=len(head), command=fix)
    return struct.unpack(f">{size // 4}I", head)


def _check_size(path: Path, count: int, expected: int, fix: str, shown: Path) -> None:
    actual = path.stat().st_size
    if actual != expected:
        raise TutorialError("data.bad_size", path=shown, count=count, expected=expected, actual=actual, command=fix)


def check_images(path: Path, fix: str, shown: Optional[Path] = None) -> int:
    """Validate an IDX image file; return its number of images."""
    shown = shown or path
    magic, count, rows, cols = _header(path, IMAGE_HEADER, fix, shown)
    if magic != IMAGE_MAGIC:
        raise TutorialError("data.bad_magic", path=shown, magic=magic, expected=IMAGE_MAGIC, command=fix)
    if (rows, cols) != (HEIGHT, WIDTH):
        raise TutorialError("data.bad_shape", path=shown, rows=rows, cols=cols, command=fix)
    _check_size(path, count, IMAGE_HEADER + count * HEIGHT * WIDTH, fix, shown)
    return count


def check_labels(path: Path, fix: str, shown: Optional[Path] = None) -> int:
    """Validate an IDX label file (header, size, every label < 10); return its count."""
    shown = shown or path
    magic, count = _header(path, LABEL_HEADER, fix, shown)
    if magic != LABEL_MAGIC:
        raise TutorialError("data.bad_magic", path=shown, magic=magic, expected=LABEL_MAGIC, command=fix)
    _check_size(path, count, LABEL_HEADER + count, fix, shown)
    # Labels are one byte each (60 kB for MNIST): reading them all is cheap.
    with open(path, "rb") as f:
        f.seek(LABEL_HEADER)
        largest = max(f.read(), default=0)
    if largest >= NUM_CLASSES:
        raise TutorialError("data.bad_label", path=shown, label=largest, command=fix)
    return count


def check_pair(images: Path, labels: Path, fix: str,
               shown: Tuple[Optional[Path], Optional[Path]] = (None, None)) -> int:
    """Validate one split (an image file and its label file); return its size."""
    n_images, n_labels = check_images(images, fix, shown[0]), check_labels(labels, fix, shown[1])
    if n_images != n_labels:
        raise TutorialError("data.count_mismatch", images=shown[0] or images, labels=shown[1] or labels,
                            n_images=n_images, n_labels=n_labels, command=fix)
    return n_images


def check(dataset: str, root: Path) -> Tuple[int, int]:
    """Validate the staged files of ``dataset`` in ``root``; return (train, test) sizes.

    Missing files → a :class:`TutorialError` naming the ``prepare`` command.
    """
    folder, command = raw_folder(dataset, root), prepare_command(dataset, root)
    missing = [name for name in ALL_FILES if not (folder / name).is_file()]
    if missing:
        raise TutorialError("data.not_staged", dataset=dataset, root=root, missing=", ".join(missing),
                            command=command)
    n_train, n_test = (check_pair(*(folder / name for name in file_names(split)), command)
                       for split in ("train", "t10k"))
    return n_train, n_test


def _staged(dataset: str, root: Path) -> Optional[Tuple[int, int]]:
    """(train, test) sizes if everything is staged and valid, else ``None``."""
    try:
        return check(dataset, root)
    except TutorialError:
        return None


# --------------------------------------------------------------------------------------
# Staging: a lock, temporary files, an atomic rename.
# --------------------------------------------------------------------------------------

@contextlib.contextmanager
def _locked(lock_path: Path, on_wait: Callable[[], None]) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path``: one ``prepare`` per root at a time.

    ``on_wait`` is called if another process holds the lock. (``flock`` works across
    the processes of one machine and, on Linux, on NFS too.)
    """
    with open(lock_path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_wait()
            fcntl.flock(lock, fcntl.LOCK_EX)  # wait for the other process to finish
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _find_source(dataset: str, from_dir: Path, name: str) -> Optional[Path]:
    """``name`` or ``name.gz`` in ``from_dir`` (or in a torchvision layout under it,
    e.g. a data root copied from another machine)."""
    for folder in (from_dir, raw_folder(dataset, from_dir)):
        for candidate in (folder / name, folder / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    return None


def _copy_to_temp(source: Path, destination: Path) -> Path:
    """Copy (and decompress a ``.gz``) ``source`` into a temporary file next to ``destination``.

    The temporary file lives in the destination's folder, so the final
    ``os.replace`` is a rename within one file system: atomic.
    """
    # A unique hidden name; mode 0o666 minus the umask, as for any new file
    # (tempfile.mkstemp would make it 0o600: unreadable for the rest of a shared group).
    tmp = destination.parent / f".{destination.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    opener: Callable = gzip.open if source.suffix == ".gz" else open
    try:
        with os.fdopen(fd, "wb") as out, opener(source, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())  # the bytes are on disk before the rename makes them visible
    except BaseException as error:
        os.unlink(tmp)
        if isinstance(error, (gzip.BadGzipFile, EOFError, zlib.error)):  # a damaged .gz
            raise TutorialError("data.bad_gzip", path=source, reason=error) from None
        raise
    return tmp


def _import(dataset: str, root: Path, from_dir: Path) -> None:
    """Stage the four IDX files found in ``from_dir`` (``.gz`` or not) into ``root``."""
    sources = {name: _find_source(dataset, from_dir, name) for name in ALL_FILES}
    missing = [name for name, path in sources.items() if path is None]
    if missing:
        raise TutorialError("data.from_missing", from_dir=from_dir, dataset=dataset,
                            missing=", ".join(missing), files=", ".join(ALL_FILES))
    folder = raw_folder(dataset, root)
    temps: Dict[str, Path] = {}
    try:
        for name, source in sources.items():
            temps[name] = _copy_to_temp(source, folder / name)
        # Check the copies before they replace anything; errors name the source file.
        fix = prepare_command(dataset, root, from_dir)
        for split in ("train", "t10k"):
            images, labels = file_names(split)
            check_pair(temps[images], temps[labels], fix, shown=(sources[images], sources[labels]))
        for name, tmp in temps.items():
            os.replace(tmp, folder / name)  # atomic: readers see the old file or the new one
    finally:
        for tmp in temps.values():
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
    _fsync_dir(folder)  # make the renames themselves durable


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _download(dataset: str, root: Path) -> None:
    """Download with torchvision into a scratch folder, then import from there.

    torchvision writes straight into its ``raw/`` folder; a scratch folder keeps a
    half-finished download out of the real one.
    """
    scratch = Path(tempfile.mkdtemp(dir=root, prefix=".download-"))
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    try:
        try:
            dataset_class(dataset)(str(scratch), train=True, download=True)
        except (RuntimeError, URLError, OSError) as error:
            lines = [line.strip() for line in str(error).splitlines() if line.strip()]
            raise TutorialError("data.offline", dataset=dataset, reason=lines[-1] if lines else error,
                                files=", ".join(ALL_FILES),
                                command=prepare_command(dataset, root, "DIR")) from None
        _import(dataset, root, raw_folder(dataset, scratch))
    finally:
        socket.setdefaulttimeout(previous)
        shutil.rmtree(scratch, ignore_errors=True)


def prepare(dataset: str, root: Path, from_dir: Optional[Path] = None,
            download: Optional[bool] = None, verbose: bool = True) -> Path:
    """Stage ``dataset`` under ``root`` once; return ``root``.

    * already staged and valid → returns at once (safe to call from every job);
    * ``from_dir`` given → imports the four IDX files (``.gz`` or uncompressed) from it;
    * otherwise downloads with torchvision, unless ``download=False``.

    Several processes may call it at the same time on the same ``root``: one
    stages the files, the others wait for the lock and then find them ready.
    """
    root, folder = Path(root).expanduser(), raw_folder(dataset, root)

    def say(key: str, **fields: object) -> None:
        if verbose:
            print(t(key, dataset=dataset, root=root, **fields), flush=True)

    # Fast path, without the lock: nothing to do (works on a read-only root too).
    counts = _staged(dataset, root)
    if counts is None:
        folder.mkdir(parents=True, exist_ok=True)
        with _locked(folder.parent / ".prepare.lock", on_wait=lambda: say("data.waiting")):
            counts = _staged(dataset, root)  # another process may have staged it while we waited
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
                say("data.staged", train=train, test=test)
                return root
    say("data.already", train=counts[0], test=counts[1])
    return root


# --------------------------------------------------------------------------------------
# Loading: what every training process does.
# --------------------------------------------------------------------------------------

@dataclass
class InMemoryData:
    """A whole split in memory: ``images`` uint8 [N, 28, 28], ``labels`` int64 [N]."""

    images: torch.Tensor
    labels: torch.Tensor
    classes: List[str]
    name: str

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_features(self) -> int:
        """Inputs of the model: 28 × 28 = 784 pixels."""
        return self.images.shape[1] * self.images.shape[2]

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def batch(self, indices: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The samples at ``indices``: float32 [B, 784] in [0, 1] and int64 labels [B].

        One ``index_select`` on the uint8 tensor, then one conversion for the whole
        batch: the same numbers ``ToTensor`` gives (``x / 255``), without a Python
        loop over samples.
        """
        indices = torch.as_tensor(indices, dtype=torch.long, device=self.images.device)
        images = self.images.index_select(0, indices).reshape(len(indices), -1)
        return images.to(torch.float32).div_(255), self.labels.index_select(0, indices)

    def first(self, n: Optional[int]) -> "InMemoryData":
        """Only the first ``n`` samples (all of them when ``n`` is None)."""
        if n is None:
            return self
        return InMemoryData(self.images[:n], self.labels[:n], self.classes, self.name)

    def to(self, device) -> "InMemoryData":
        """The same set on ``device``: on a GPU the whole split (47 MB as uint8) lives there and
        batches are cut there — no host-to-device copy per step."""
        device = torch.device(device)
        if self.images.device == device:
            return self
        return InMemoryData(self.images.to(device), self.labels.to(device), self.classes, self.name)


def load(dataset: str, root: Path, train: bool = True) -> InMemoryData:
    """The train (or test) split of a staged data set, in memory. Never downloads."""
    cls = dataset_class(dataset)
    root = Path(root).expanduser()
    check(dataset, root)  # clear errors before torchvision's generic ones
    data = cls(str(root), train=train, download=False)
    return InMemoryData(images=data.data, labels=data.targets.long(), classes=list(data.classes), name=dataset)


# --------------------------------------------------------------------------------------
# Command line: `ddp-tutorial data prepare|check` (cli.py calls add_cli).
# --------------------------------------------------------------------------------------

def _cli_prepare(args: argparse.Namespace) -> int:
    prepare(args.dataset, args.root, from_dir=args.from_dir)
    return 0


def _cli_check(args: argparse.Namespace) -> int:
    n_train, n_test = check(args.dataset, args.root)
    print(t("data.check_ok", dataset=args.dataset, root=args.root, train=n_train, test=n_test))
    return 0


def add_cli(subparsers) -> argparse.ArgumentParser:
    """Add ``data {prepare,check}`` to an argparse ``subparsers`` object.

    Each leaf parser gets ``func``: a callable taking the parsed arguments and
    returning the exit code (a :class:`TutorialError` propagates to the caller).
    """
    parser = subparsers.add_parser("data", help=t("data.cli.data"), description=t("data.cli.data"))
    commands = parser.add_subparsers(dest="data_command", metavar="{prepare,check}", required=True)
    for name, func in (("prepare", _cli_prepare), ("check", _cli_check)):
        sub = commands.add_parser(name, help=t(f"data.cli.{name}"), description=t(f"data.cli.{name}"))
        sub.add_argument("--dataset", choices=list(DATASETS), default=default_dataset(),
                         help=t("data.cli.dataset"))
        sub.add_argument("--root", type=Path, default=default_root(), help=t("data.cli.root"))
        if name == "prepare":
            sub.add_argument("--from", dest="from_dir", type=Path, metavar="DIR", help=t("data.cli.from"))
        sub.set_defaults(func=func)
    return parser


# --------------------------------------------------------------------------------------
# Messages (English / Turkish).
# --------------------------------------------------------------------------------------

# Every "this file is damaged" message ends with the same advice.

