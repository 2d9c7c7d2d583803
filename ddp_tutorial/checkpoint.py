"""Checkpoints that are never half-written, and that say clearly when they don't fit.

A checkpoint holds everything needed to continue exactly where training stopped: the
model's weights, the optimizer's state (Adam's moving averages — without them a resumed
run is a different run), the epoch and the step inside it, the losses so far and the RNG
state. Only rank 0 writes it (all ranks hold the same weights after every step).

Writing is atomic: the file is written under a temporary name in the same directory,
flushed to disk, then renamed over the old one (``os.replace`` is atomic on POSIX). A job
killed at any moment — time limit, preemption, ``scancel`` — leaves either the previous
checkpoint or the new one, never a torn file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional

import torch

from . import atomic
from .i18n import TutorialError


CHECKPOINT_NAME = "checkpoint.pt"
FORMAT_VERSION = 1


def checkpoint_path(directory: os.PathLike | str) -> Path:
    return Path(directory) / CHECKPOINT_NAME


def ensure_writable(directory: os.PathLike | str) -> Path:
    """Create the directory and prove it is writable now, not at the end of epoch 1."""
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
        for leftover in path.glob(".checkpoint-*"):  # a writer killed mid-save left its temporary file
            if atomic.is_leftover(leftover):
                leftover.unlink(missing_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as error:
        raise TutorialError("ckpt.unwritable", path=str(path), why=error.strerror or str(error)) from None
    return path


def save_checkpoint(directory: os.PathLike | str, state: Dict[str, Any]) -> Path:
    """Write ``state`` atomically to ``directory/checkpoint.pt`` (:mod:`ddp_tutorial.atomic`)."""
    target = checkpoint_path(directory)
    state = dict(state, format_version=FORMAT_VERSION)
    # A directory that vanished or a full disk in the middle of training (scratch purged, quota) is
    # the user's to fix: say so clearly. torch.save reports a full disk as a RuntimeError.
    try:
        return atomic.write_with(target, lambda handle: torch.save(state, handle), prefix=".checkpoint-")
    except (OSError, RuntimeError) as error:
        why = getattr(error, "strerror", None) or str(error).strip().splitlines()[-1][:200]
        raise TutorialError("ckpt.unwritable", path=str(target.parent), why=why) from None


REQUIRED_KEYS = ("format_version", "model", "optimizer", "epoch", "step", "shape", "world_size", "batch_size")


# Settings that decide the data order or the optimisation: a resumed run must keep them, or it
# would silently be another run. (The learning rate may change: runstate applies it and says so.)
SAME_ALWAYS = {"seed": "--seed", "dataset": "--dataset", "train_subset": "--train-subset",
               "optimizer_kind": "the optimizer"}
# These split an epoch among the ranks: they must match only when the checkpoint is mid-epoch.
SAME_MID_EPOCH = ("world_size", "batch_size")


def load_checkpoint(directory: os.PathLike | str, expect: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The checkpoint in ``directory``, or ``None`` when there is none yet.

    ``expect`` holds this run's settings (``shape``, ``world_size``, ``batch_size``, ``seed``,
    ``dataset``, ``train_subset``, ``optimizer_kind``). The model's shape and the settings in
    :data:`SAME_ALWAYS` must match; world and batch size only when the checkpoint was taken in the
    middle of an epoch (the sampler's split of that epoch depends on them).
    """
    path = checkpoint_path(directory)
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - truncated zip, random bytes, a pickle of something else…
        raise TutorialError("ckpt.corrupt", path=str(path), why=type(error).__name__) from None
    if not isinstance(state, dict) or any(key not in state for key in REQUIRED_KEYS):
        raise TutorialError("ckpt.corrupt", path=str(path), why="missing fields")
    if state["format_version"] != FORMAT_VERSION:
        raise TutorialError("ckpt.mismatch", path=str(path), field="format_version",
                            saved=state["format_version"], current=FORMAT_VERSION)
    if list(state["shape"]) != list(expect["shape"]):
        raise TutorialError("ckpt.mismatch", path=str(path), field="model shape",
                            saved=list(state["shape"]), current=list(expect["shape"]))
    for field, option in SAME_ALWAYS.items():
        if field in state and field in expect and state[field] != expect[field]:
            raise TutorialError("ckpt.changed", path=str(path), field=field, saved=state[field],
                                current=expect[field], option=option)
    if state["step"] > 0:
        for field in SAME_MID_EPOCH:
            if state[field] != expect[field]:
                raise TutorialError("ckpt.mismatch", path=str(path), field=field,
                                    saved=state[field], current=expect[field])
    return state


def load_into(path: os.PathLike | str, module: torch.nn.Module, optimizer, state: Dict[str, Any]) -> None:
    """Load weights and optimizer state; a checkpoint missing a tensor is reported, not a traceback."""
    try:
        module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, KeyError, ValueError, TypeError) as error:
        why = str(error).strip().splitlines()[0][:200]
        raise TutorialError("ckpt.corrupt", path=str(checkpoint_path(path)), why=why) from None
