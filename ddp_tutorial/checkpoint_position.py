"""Where a checkpoint stands, its epoch and step, read from the open file without torch.

Every job template asks it after a stop (exit 75), before it requeues the job: a requeue whose checkpoint has not
moved on since the last one stops instead (``python -m ddp_tutorial.resume DIR`` prints ``EPOCH STEP``). Importing
torch for two integers would cost 2 CPU-s each time, and many seconds on a busy shared file system.
:func:`ddp_tutorial.checkpoint.stands_at` opens the file (rank 0's, checked as ``--resume`` checks it) and hands it
here; this module imports nothing of the package.
"""

from __future__ import annotations

import pickle
import zipfile
from typing import BinaryIO, Optional, Tuple


class _Skeleton(pickle.Unpickler):
    """Reads the pickle inside a ``torch.save`` file for its plain values only: every class or function it
    names (torch's tensor builders, ``OrderedDict``) becomes an :class:`_Opaque`, none is imported or called,
    and no tensor data is read. As safe as ``weights_only=True``: nothing in the file runs."""

    def find_class(self, module, name):
        return _Opaque

    def persistent_load(self, pid):
        return None


class _Opaque:
    """Whatever a :class:`_Skeleton` does not build: it takes any arguments, items and state, and keeps none."""

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        pass

    def __setitem__(self, key, value):
        pass

    def append(self, value):
        pass

    def extend(self, values):
        pass


def position_in(handle: BinaryIO) -> Optional[Tuple[int, int]]:
    """``(epoch, step)`` of the checkpoint open in ``handle``: ``torch.save`` writes a zip archive whose
    ``…/data.pkl`` holds the state, and its epoch and step are plain integers in it (checked as
    :func:`~ddp_tutorial.checkpoint.load_checkpoint` checks them). ``None`` when it cannot be read so."""
    try:
        with zipfile.ZipFile(handle) as archive:
            (name,) = [name for name in archive.namelist() if name.endswith("/data.pkl")]
            with archive.open(name) as pickled:
                state = _Skeleton(pickled).load()
        place = state["epoch"], state["step"]
    except Exception:  # noqa: BLE001 - not a checkpoint, or a torn one: no position (the resumed run says why)
        return None
    return place if all(type(number) is int and number >= 0 for number in place) else None
