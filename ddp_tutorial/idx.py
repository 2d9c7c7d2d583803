"""The IDX files of MNIST and Fashion-MNIST: their layout, and their bytes read into a tensor.

An IDX file is a big-endian header — a magic number, the count and (for images) the height and
width, each a uint32 — followed by one byte per label or per pixel. :mod:`ddp_tutorial.staging`
validates the staged files against this layout (``data prepare`` runs without torch: it is imported
where a tensor is made); :mod:`ddp_tutorial.data` reads them with :func:`read_idx`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .i18n import TutorialError

if TYPE_CHECKING:
    import torch

IMAGE_MAGIC, LABEL_MAGIC = 2051, 2049
IMAGE_HEADER, LABEL_HEADER = 16, 8  # bytes: four and two big-endian uint32
HEIGHT = WIDTH = 28


def read_idx(path: Path, header: int) -> torch.Tensor:
    """The bytes of an IDX file after its header (``IMAGE_HEADER`` or ``LABEL_HEADER`` bytes), as a uint8
    tensor. :func:`ddp_tutorial.staging.check` has validated header and size."""
    import torch
    try:
        raw = bytearray(Path(path).read_bytes())
    except OSError as error:  # removed or made unreadable since the check
        raise TutorialError("data.unreadable", path=path, why=error.strerror or error) from None
    return torch.frombuffer(raw, dtype=torch.uint8, offset=header)
