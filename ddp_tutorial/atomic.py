"""Atomic writes: a reader (or a job killed half-way) sees the old file or the new one, never half.

The one way this package writes a file a user relies on — checkpoints, JSON results, staged data
sets, benchmark results: write a temporary file in the same folder, flush it to disk (``fsync``),
rename it over the target (``os.replace`` is atomic within one file system), then ``fsync`` the
folder so the rename itself survives a crash. The temporary file is removed if anything fails.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Callable, IO, Union

PathLike = Union[str, os.PathLike]
TMP_SUFFIX = ".tmp"


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


def write_with(target: PathLike, writer: Callable[[IO[bytes]], None], prefix: str | None = None) -> Path:
    """Create ``target`` atomically; ``writer(f)`` writes the content into the open binary file ``f``."""
    target = Path(target)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=prefix or f".{target.name}.", suffix=TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            writer(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(target.parent)
    return target


def write_bytes(target: PathLike, data: bytes) -> Path:
    return write_with(target, lambda f: f.write(data))


def write_text(target: PathLike, text: str) -> Path:
    return write_bytes(target, text.encode("utf-8"))


def write_json(target: PathLike, payload: object) -> Path:
    return write_text(target, json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def is_leftover(path: PathLike) -> bool:
    """A temporary file this module left behind (its writer was killed): safe to delete."""
    name = Path(path).name
    return name.startswith(".") and name.endswith(TMP_SUFFIX)
