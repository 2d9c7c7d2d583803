"""Checkpoints that are never half-written, and that say clearly when they don't fit.

A checkpoint holds everything needed to continue exactly where training stopped: the
model's weights, the optimizer's state (Adam's moving averages — without them a resumed
run is a different run), the epoch and the step inside it, the losses so far and the RNG
state. Only rank 0 writes it (all ranks hold the same weights after every step).

Writing is atomic: the file is written under a temporary name in the same directory,
flushed to disk, then renamed over the old one (``os.replace`` is atomic on POSIX). A job
killed at any moment — time limit, preemption, ``scancel`` — leaves either the previous
checkpoint or the new one, never a torn file.

One run per directory: rank 0 holds a lock on it (:class:`DirectoryLock`, taken by
:func:`ensure_writable`, given back by :func:`release`) from the start to the end of the run.
What is read must be a regular file with the right fields of the right types, or it is refused
with one clear message (a named pipe would block ``torch.load`` for ever).

torch is imported where a checkpoint is written or loaded, not above: the job templates ask where a
checkpoint stands after every stop (``python -m ddp_tutorial.resume DIR``, answered by :func:`stands_at`), and
that answer needs no torch.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import stat
import tempfile
import threading
import time
from dataclasses import dataclass, field
from numbers import Real
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple

from . import atomic
from .checkpoint_position import position_in
from .config import CHECKPOINT_NAME, KEPT_ALWAYS, KEPT_MID_EPOCH
from .i18n import TutorialError, t
from .validate import option_name

if TYPE_CHECKING:
    import torch

LOCK_NAME = ".ddp-tutorial.lock"   # held (flock) by rank 0 of the run that uses the directory
FORMAT_VERSION = 1


def checkpoint_path(directory: os.PathLike | str) -> Path:
    return Path(directory) / CHECKPOINT_NAME


_kind = atomic.file_kind  # "a named pipe (FIFO)", "a directory" …


def _regular_or_absent(path: Path) -> bool:
    """True for a regular file (links followed), False when there is nothing; refuses the rest:
    ``torch.load`` of a named pipe blocks for ever, a directory fails only after an epoch."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as error:
        raise TutorialError("ckpt.corrupt", path=str(path), why=error.strerror or str(error)) from None
    if not stat.S_ISREG(mode):
        raise TutorialError("ckpt_guard.not_regular", path=str(path), kind=_kind(mode))
    return True


_UNRECORDED = object()


def _open_regular(path: Path):
    """``path`` opened for reading, checked on the open file: a regular file (links followed), or
    ``None`` when it has gone. ``O_NONBLOCK``: a named pipe swapped in after :func:`_regular_or_absent`
    (CK03) is refused at once instead of blocking ``torch.load`` for ever."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise TutorialError("ckpt.corrupt", path=str(path), why=error.strerror or str(error)) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise TutorialError("ckpt_guard.not_regular", path=str(path), kind=_kind(mode))
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return os.fdopen(fd, "rb")


def open_checkpoint(directory: os.PathLike | str):
    """Rank 0's checkpoint file in ``directory`` opened for reading, or ``None`` when there is none; anything
    but a regular file is refused (:class:`~ddp_tutorial.i18n.TutorialError`). What is read is what was
    checked: a named pipe renamed in between never blocks."""
    path = checkpoint_path(directory)
    return _open_regular(path) if _regular_or_absent(path) else None


def stands_at(directory: os.PathLike | str) -> Optional[Tuple[int, int]]:
    """Where the checkpoint in ``directory`` stands, ``(epoch, step)``, without torch: the file
    :func:`load_checkpoint` would read, opened as it opens it, read by
    :func:`~ddp_tutorial.checkpoint_position.position_in`. ``None`` when there is none, or it cannot be read
    (the resumed run says why)."""
    try:
        handle = open_checkpoint(directory)
    except (OSError, TutorialError):  # not a regular file, or unreadable: no position
        return None
    if handle is None:
        return None
    with handle:
        return position_in(handle)


# --------------------------------------------------------------------------------------
# One run per checkpoint directory


class DirectoryLock:
    """An exclusive ``flock`` on ``DIR/.ddp-tutorial.lock`` for a run's lifetime (rank 0 holds it).

    A second run on the same ``--checkpoint-dir`` is refused with a message naming the first
    (pid, host, start time): two runs would overwrite each other's checkpoints, and the second
    one's start would delete the first one's in-flight temporary file. The kernel drops the lock
    when the holder exits, however it exits (SIGKILL included), so a stale lock never blocks.
    Where the file system cannot lock (some network mounts), the run goes on unlocked
    (``held`` is False) and leftovers are then never deleted.
    """

    def __init__(self, directory: os.PathLike | str):
        self.directory = Path(directory)
        self.fd: Optional[int] = None
        self.held = False

    def acquire(self) -> "DirectoryLock":
        path = self.directory / LOCK_NAME
        try:  # a link planted under this name is refused (its target would be truncated), a FIFO never blocks
            fd, writable = atomic.open_lock(path, "ckpt_guard.lock_not_file", write=True)
        except OSError as error:
            raise TutorialError("ckpt.unwritable", path=str(self.directory),
                                why=error.strerror or str(error)) from None
        info = os.fstat(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            owner = _owner(fd)
            os.close(fd)
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise TutorialError("ckpt_guard.in_use", path=str(self.directory), **owner) from None
            return self  # ENOLCK, EOPNOTSUPP…: this file system cannot lock; go on unlocked
        if writable and info.st_nlink == 1:  # the owner record; never into a file with another name elsewhere
            try:
                os.ftruncate(fd, 0)
                os.write(fd, (json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                          "since": time.strftime("%Y-%m-%d %H:%M:%S %Z")}) + "\n").encode())
            except OSError:
                pass  # the record only names the holder in another run's message; the lock is what counts
        self.fd, self.held = fd, True
        return self

    def release(self) -> None:
        if self.fd is not None:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
        self.fd, self.held = None, False

    def __enter__(self) -> "DirectoryLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _owner(fd: int) -> Dict[str, Any]:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        info = json.loads(os.read(fd, 4096).decode("utf-8", "replace") or "{}")
    except (OSError, ValueError):
        info = {}
    info = info if isinstance(info, dict) else {}
    return {key: info.get(key, "?") for key in ("pid", "host", "since")}


_held: Dict[str, DirectoryLock] = {}  # this process's locks, by real path (re-entrant per process)


def hold(directory: os.PathLike | str) -> DirectoryLock:
    """Take the directory's lock for this process until :func:`release` (or the process's exit)."""
    key = os.path.realpath(directory)
    if key not in _held:
        _held[key] = DirectoryLock(directory).acquire()
    return _held[key]


def release(directory: os.PathLike | str) -> None:
    """Give the lock of :func:`hold` back (the end of a run; a no-op when not held)."""
    lock = _held.pop(os.path.realpath(directory), None)
    if lock is not None:
        lock.release()


@contextlib.contextmanager
def lock(directory: os.PathLike | str) -> Iterator[DirectoryLock]:
    """``with checkpoint.lock(dir):`` — the directory is this run's until the block ends."""
    taken = hold(directory)
    try:
        yield taken
    finally:
        release(directory)


def ensure_writable(directory: os.PathLike | str) -> Path:
    """Create the directory, take its lock (:func:`hold`, released by :func:`release`) and prove
    that the checkpoint can be written now, not at the end of epoch 1."""
    path = Path(directory)
    if path.is_symlink() and not path.exists():
        raise TutorialError("ckpt.unwritable", path=str(path),
                            why=t("ckpt_guard.dangling", target=os.readlink(path)))
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise TutorialError("ckpt.unwritable", path=str(path), why=error.strerror or str(error)) from None
    taken = hold(path)
    try:
        _regular_or_absent(checkpoint_path(path))
        if taken.held:  # no other run can be writing here: what is left is a killed writer's
            for leftover in path.glob(".checkpoint-*"):
                if atomic.is_leftover(leftover):
                    leftover.unlink(missing_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as error:
        release(path)
        raise TutorialError("ckpt.unwritable", path=str(path), why=error.strerror or str(error)) from None
    except BaseException:
        release(path)
        raise
    return path


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class _Recording:
    """The file torch.save writes to, remembering the OS error of a failed write: torch reports a
    full disk as "unexpected pos 945152 vs 945040", the errno says what it was."""

    def __init__(self, handle):
        self.handle, self.error = handle, None

    def write(self, data):
        try:
            return self.handle.write(data)
        except OSError as error:
            self.error = error
            raise

    def __getattr__(self, name):
        return getattr(self.handle, name)


@contextlib.contextmanager
def signals_held(signums=(signal.SIGTERM, signal.SIGINT)):
    """Hold SIGTERM/SIGINT for the duration (main thread): they are delivered when the block ends."""
    main = threading.current_thread() is threading.main_thread()
    if main:
        signal.pthread_sigmask(signal.SIG_BLOCK, signums)
    try:
        yield
    finally:
        if main:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, signums)


def save_checkpoint(directory: os.PathLike | str, state: Dict[str, Any]) -> Path:
    """Write ``state`` atomically to ``directory/checkpoint.pt`` (:mod:`ddp_tutorial.atomic`); a launcher's
    SIGTERM (Ctrl-C) waits until the checkpoint is whole."""
    target = checkpoint_path(directory)
    state = dict(state, format_version=FORMAT_VERSION)
    seen: list = []

    def writer(handle) -> None:
        import torch
        seen.append(_Recording(handle))
        torch.save(state, seen[0])

    # A directory that vanished or a full disk in the middle of training (scratch purged, quota) is
    # the user's to fix: say so clearly.
    try:
        with signals_held():
            return atomic.write_with(target, writer, prefix=".checkpoint-")
    except (OSError, RuntimeError) as error:
        why = getattr(error, "strerror", None) or str(error).strip().splitlines()[-1][:200]
        cause = seen[0].error if seen and seen[0].error is not None else error
        if getattr(cause, "errno", None) in _FULL:
            why = t("ckpt_guard.disk_full")
        raise TutorialError("ckpt.unwritable", path=str(target.parent), why=why) from None


@dataclass
class Position:
    """Where training starts: epoch, step inside it, this rank's loss sum / steps so far in that epoch,
    and what a resumed run brings along (the epochs' losses, every rank's, where it resumed from)."""
    epoch: int = 0
    step: int = 0
    loss_sum: float = 0.0
    steps: int = 0
    epochs: List[float] = field(default_factory=list)
    rank_losses: List[List[float]] = field(default_factory=list)
    resumed_from: Optional[dict] = None


REQUIRED_KEYS = ("format_version", "model", "optimizer", "epoch", "step", "shape", "world_size", "batch_size")


# A checkpoint records the options a resumed run must keep (config.py's table, ``keep=``) under their own
# names, but one: "optimizer" holds the optimizer's state, so the optimizer's kind is "optimizer_kind".
STORED_AS = {"optimizer": "optimizer_kind"}


def kept_options(config) -> Dict[str, Any]:
    """What a checkpoint of a run with ``config`` records of its options, under the checkpoint's keys."""
    return {STORED_AS.get(name, name): getattr(config, name) for name in KEPT_ALWAYS + KEPT_MID_EPOCH}


# Settings that decide the data order or the optimisation: a resumed run must keep them, or it
# would silently be another run (the checkpoint's key → the option that sets it). (The learning rate
# may change: resume.py applies it and says so.)
SAME_ALWAYS = {STORED_AS.get(name, name): option_name(name) for name in KEPT_ALWAYS}
# What a checkpoint written before a setting was recorded means by its absence: every checkpoint older
# than `--optimizer` (format_version 1 all the same) was made with Adam (O02: resumed with --optimizer sgd,
# it was accepted and failed at the first step with KeyError: 'momentum').
BEFORE_RECORDED = {STORED_AS["optimizer"]: "adam"}
# These split an epoch among the ranks: they must match only when the checkpoint is mid-epoch.
SAME_MID_EPOCH = ("world_size",) + tuple(STORED_AS.get(name, name) for name in KEPT_MID_EPOCH)


def load_checkpoint(directory: os.PathLike | str, expect: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The checkpoint in ``directory``, or ``None`` when there is none yet.

    ``expect`` holds this run's settings (``shape``, ``world_size``, ``batch_size``, ``seed``,
    ``dataset``, ``train_subset``, ``optimizer_kind``). The model's shape and the settings in
    :data:`SAME_ALWAYS` must match; world and batch size only when the checkpoint was taken in the
    middle of an epoch (the sampler's split of that epoch depends on them).
    """
    path = checkpoint_path(directory)
    handle = open_checkpoint(directory)
    if handle is None:
        return None
    import torch
    try:
        with handle:
            state = torch.load(handle, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - truncated zip, random bytes, a pickle of something else…
        why = t("ckpt_guard.unreadable", error=type(error).__name__)
        raise TutorialError("ckpt.corrupt", path=str(path), why=why) from None
    _check_types(path, state)
    _check_finite(path, state)
    if state["format_version"] != FORMAT_VERSION:
        raise TutorialError("ckpt.mismatch", path=str(path), field="format_version",
                            saved=state["format_version"], current=FORMAT_VERSION)
    if list(state["shape"]) != list(expect["shape"]):
        raise TutorialError("ckpt.mismatch", path=str(path), field=t("ckpt_guard.model_shape"),
                            saved=list(state["shape"]), current=list(expect["shape"]))
    for key, option in SAME_ALWAYS.items():
        saved = state.get(key, BEFORE_RECORDED.get(key, _UNRECORDED))
        if saved is not _UNRECORDED and key in expect and saved != expect[key]:
            raise TutorialError("ckpt.changed", path=str(path), field=key, saved=saved,
                                current=expect[key], option=option or t("ckpt_guard.the_optimizer"))
    if state["step"] > 0:
        for key in SAME_MID_EPOCH:
            if state[key] != expect[key]:
                raise TutorialError("ckpt.mismatch", path=str(path), field=key,
                                    saved=state[key], current=expect[key])
        _check_partial(path, state)
    return state


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_types(path: Path, state: Any) -> None:
    """The right keys with the wrong types (an ``epoch`` of ``"1"``, a float ``rng``) are a damaged
    checkpoint too: one clear message instead of a TypeError deep in the resume."""
    if not isinstance(state, dict):
        raise TutorialError("ckpt.corrupt", path=str(path), why=t("ckpt_guard.not_a_dict"))
    missing = [key for key in REQUIRED_KEYS if key not in state]
    if missing:
        raise TutorialError("ckpt.corrupt", path=str(path), why=t("ckpt_guard.missing", keys=", ".join(missing)))
    import torch
    shape = state["shape"]
    wrong = [key for key in ("format_version", "epoch", "step", "world_size", "batch_size")
             if not _count(state[key])]
    wrong += [key for key in ("model", "optimizer") if not isinstance(state[key], dict)]
    if not isinstance(shape, (list, tuple)) or not all(_count(n) for n in shape):
        wrong.append("shape")
    rng = state.get("rng")
    if rng is not None and not (isinstance(rng, torch.Tensor) and rng.dtype == torch.uint8):
        wrong.append("rng")
    if wrong:
        raise TutorialError("ckpt.corrupt", path=str(path), why=t("ckpt_guard.wrong_types", keys=", ".join(wrong)))


def _check_finite(path: Path, state: Dict[str, Any]) -> None:
    """Weights that are not numbers (NaN, ±infinity: a run that diverged, or a damaged file) are refused:
    a run resumed from them trains on with a loss of nan and learns nothing, without a word."""
    import torch
    bad = [name for name, value in state["model"].items()
           if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all())]
    if bad:
        names = ", ".join(bad[:3]) + (" …" if len(bad) > 3 else "")
        raise TutorialError("ckpt.not_finite", path=str(path), names=names)


def _check_partial(path: Path, state: Dict[str, Any]) -> None:
    """A mid-epoch checkpoint holds one partial loss and one step count per rank (or none at all)."""
    losses, steps = state.get("partial_loss", 0.0), state.get("partial_steps", 0)
    if isinstance(losses, Real) and isinstance(steps, int):
        return
    for key, value, kind in (("partial_loss", losses, Real), ("partial_steps", steps, int)):
        if (not isinstance(value, (list, tuple)) or len(value) != state["world_size"]
                or not all(isinstance(v, kind) for v in value)):
            raise TutorialError("ckpt.corrupt", path=str(path), why=t("ckpt_guard.wrong_types", keys=key))


def load_into(path: os.PathLike | str, module: torch.nn.Module, optimizer, state: Dict[str, Any]) -> None:
    """Load weights and optimizer state; a checkpoint missing a tensor is reported, not a traceback."""
    try:
        module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, KeyError, ValueError, TypeError) as error:
        why = t("ckpt_guard.state_mismatch", error=str(error).strip().splitlines()[0][:200])
        raise TutorialError("ckpt.corrupt", path=str(checkpoint_path(path)), why=why) from None
