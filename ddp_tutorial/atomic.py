"""Atomic writes: a reader (or a job killed half-way) sees the old file or the new one, never half.

The ONE rule for every file this package writes — checkpoints, JSON results, staged data sets,
rendered job scripts, figures, benchmark results — by what the target is *now*:

* a regular file, or nothing yet: write a temporary file in the same folder, flush it to disk
  (``fsync``), rename it over the target (``os.replace`` is atomic within one file system), then
  ``fsync`` the folder so the rename itself survives a crash. The temporary file is removed if
  anything fails. The new file gets the old file's permissions (never wider: a script only gains the
  owner's execute bit), or ``0666`` less the umask (0644 under the usual umask 022: a teammate or the
  instructor can read a shared run directory);
* a symbolic link: the same for the file it points to — the link itself is never replaced;
* ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``, a character device (``/dev/null``) or a named
  pipe: written *through*, like the shell's ``>`` (a pipe nobody reads is refused at once instead
  of blocking for ever);
* a directory, a block device (a disk), a socket, a symbolic-link loop: refused with an
  :class:`OSError` whose text says why (in the user's language).

:func:`check_writable` asks the same question before the work starts (``--json``, ``-o``).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import stat
import sys
import tempfile
from pathlib import Path
from typing import IO, Callable, Optional, Tuple, Union

from .i18n import TutorialError, t

PathLike = Union[str, os.PathLike]
TMP_SUFFIX = ".tmp"
_STREAMS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
_MAX_LINKS = 40  # as the kernel's own limit on symbolic links in one lookup


def fsync_dir(folder: PathLike) -> None:
    """Make a rename in ``folder`` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def umask() -> int:
    """This process's umask, read without changing it (``os.umask`` would, for every thread)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def _stream_fd(path: str) -> Optional[int]:
    """The open file descriptor that ``/dev/stdout``, ``/dev/fd/N``, ``/proc/self/fd/N`` (or a link
    to one of them) names, else ``None``."""
    fd_path = re.compile(rf"/(?:dev/fd|proc/self/fd|proc/{os.getpid()}/fd)/(\d+)")
    current = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        if current in _STREAMS:
            return _STREAMS[current]
        match = fd_path.fullmatch(current)
        if match:
            return int(match.group(1))
        try:
            link = os.readlink(current)
        except OSError:
            return None
        current = os.path.normpath(os.path.join(os.path.dirname(current), link))
    return None


def _refuse(code: int, key: str, path: PathLike) -> OSError:
    return OSError(code, t(key), str(path))


def resolve(target: PathLike) -> Tuple[str, Union[int, Path]]:
    """What writing ``target`` means: ``("stream", fd)``, ``("through", path)`` (a character device
    or a named pipe) or ``("replace", path)`` (the regular file to replace atomically, links
    followed). Raises :class:`OSError` for what must not be written."""
    fd = _stream_fd(os.fspath(target))
    if fd is not None:
        return "stream", fd
    path = Path(os.path.abspath(os.fspath(target)))
    try:
        mode = os.stat(path).st_mode  # follows links
    except FileNotFoundError:
        mode = None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise _refuse(errno.ELOOP, "output.link_loop", target) from None
        raise
    if mode is not None and (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        return "through", path
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, t("output.is_dir"), str(target))
    if mode is not None and stat.S_ISBLK(mode):
        raise _refuse(errno.EINVAL, "output.block_device", target)
    if mode is not None and not stat.S_ISREG(mode):
        raise _refuse(errno.EINVAL, "output.not_a_file", target)
    if path.is_symlink():  # replace the file it points to (or create it: a dangling link), never the link
        path = Path(os.path.realpath(path))
        if path.is_symlink():
            raise _refuse(errno.ELOOP, "output.link_loop", target)
    return "replace", path


def _open_through(kind: str, where: Union[int, Path]) -> IO[bytes]:
    if kind == "stream":
        if where in (1, 2):
            (sys.stdout if where == 1 else sys.stderr).flush()  # what Python buffered comes first
        return os.fdopen(os.dup(where), "wb")
    try:  # O_NONBLOCK: a named pipe nobody reads fails at once (ENXIO) instead of blocking for ever
        fd = os.open(where, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.ENXIO:
            raise _refuse(errno.ENXIO, "output.fifo_no_reader", where) from None
        raise
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return os.fdopen(fd, "wb")


def _new_mode(path: Path, mode: Optional[int]) -> int:
    """A new file: ``mode`` (default 0666) less the umask. A replaced file keeps its permissions, never
    wider: only the owner's execute bit is added where ``mode`` asks for one (a 0600 job script holding a
    token stays 0700, not 0755)."""
    try:
        old = stat.S_IMODE(os.stat(path).st_mode)  # replacing a file keeps its permissions
    except OSError:
        return (0o666 if mode is None else mode) & ~umask() & 0o7777
    return old | (stat.S_IXUSR if mode is not None and mode & stat.S_IXUSR else 0)


def write_with(target: PathLike, writer: Callable[[IO[bytes]], None], prefix: str | None = None,
               mode: Optional[int] = None) -> Path:
    """Write ``target`` by the rule above; ``writer(f)`` writes the content into the open binary
    file ``f``. ``mode``: the permissions of a new file before the umask (``0o777`` for a script);
    a ``writer`` may also ``fchmod`` its file itself. Returns ``target`` as given."""
    try:
        return _write_with(target, writer, prefix, mode)
    except OSError as error:  # a full disk's write/fsync names no file: name the one the user asked for
        if error.filename is None:
            error.filename = str(target)
        raise


def _write_with(target: PathLike, writer: Callable[[IO[bytes]], None], prefix: str | None,
                mode: Optional[int]) -> Path:
    kind, where = resolve(target)
    if kind != "replace":
        with _open_through(kind, where) as handle:
            writer(handle)
            handle.flush()
        return Path(target)
    fd, tmp = tempfile.mkstemp(dir=where.parent, prefix=prefix or f".{where.name}.", suffix=TMP_SUFFIX)
    try:
        os.fchmod(fd, _new_mode(where, mode))  # mkstemp's 0600 would hide results from the group
        with os.fdopen(fd, "wb") as f:
            writer(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, where)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(where.parent)
    return Path(target)


def check_writable(target: PathLike) -> None:
    """Prove now, before the work, that :func:`write_with` could write ``target`` (creates the
    missing folders of a regular file's path). Raises :class:`OSError` when it could not."""
    kind, where = resolve(target)
    if kind == "stream":
        return
    if kind == "through":
        if not os.access(where, os.W_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(target))
        return
    where.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=where.parent, prefix=f".{where.name}.", suffix=".probe"):
        pass


def write_bytes(target: PathLike, data: bytes, mode: Optional[int] = None) -> Path:
    return write_with(target, lambda f: f.write(data), mode=mode)


def write_text(target: PathLike, text: str, mode: Optional[int] = None) -> Path:
    return write_bytes(target, text.encode("utf-8"), mode=mode)


def write_json(target: PathLike, payload: object) -> Path:
    return write_text(target, json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def is_leftover(path: PathLike) -> bool:
    """A temporary file this module left behind (its writer was killed): safe to delete."""
    name = Path(path).name
    return name.startswith(".") and name.endswith(TMP_SUFFIX)


def file_kind(mode: int) -> str:
    """What a path that should be a regular file is instead, in the user's words."""
    if stat.S_ISDIR(mode):
        return t("ckpt_guard.kind_dir")
    if stat.S_ISFIFO(mode):
        return t("ckpt_guard.kind_fifo")
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return t("ckpt_guard.kind_device")
    return t("ckpt_guard.kind_other")


def open_lock(path: PathLike, refusal: str, write: bool = False) -> Tuple[int, bool]:
    """A lock file opened for ``flock`` (every lock the package takes), created ``0666`` less the umask so
    that a teammate in a shared group folder may take it too. A symbolic link planted under its name is
    never followed (its target would be created or overwritten) and a named pipe never blocks: anything
    but a regular file raises :class:`TutorialError` ``refusal`` (fields ``path``, ``kind``). ``write``:
    read-write where the user may, else read-only (``flock`` needs no write access). Returns (fd, writable)."""
    flags = os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        try:
            fd, writable = os.open(path, (os.O_RDWR if write else os.O_RDONLY) | flags, 0o666), write
        except PermissionError:
            if not write:
                raise
            fd, writable = os.open(path, os.O_RDONLY | flags, 0o666), False
    except OSError as error:
        if error.errno == errno.ELOOP and os.path.islink(path):
            raise TutorialError(refusal, path=str(path),
                                kind=t("ckpt_guard.kind_link", target=os.readlink(path))) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise TutorialError(refusal, path=str(path), kind=file_kind(mode))
    return fd, writable
