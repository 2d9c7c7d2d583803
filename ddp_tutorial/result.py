"""What a training run reports, and the JSON file rank 0 writes.

The JSON target is checked *before* training (a directory, an unwritable folder, ``/proc/x`` are
refused at once); if writing still fails at the end (a full disk), the result is kept in a fallback
file and the message says where — a finished training is never lost.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import List, Optional

from . import atomic
from .config import default_of
from .i18n import TutorialError


@dataclass
class TrainResult:
    """What one training process reports (rank 0's copy is written as JSON)."""

    rank: int
    world_size: int
    dataset: str
    backend: str
    device: str
    seed: int
    lr: float
    batch_size: int
    epochs: List[float] = field(default_factory=list)             # global mean loss per epoch
    rank_losses: List[List[float]] = field(default_factory=list)  # per epoch: each rank's loss sum
    step_losses: List[float] = field(default_factory=list)        # this rank's loss at every step it ran
    test_accuracy: Optional[float] = None
    train_seconds: float = 0.0
    samples_per_second: float = 0.0
    steps_per_epoch: int = 0
    num_parameters: int = 0
    weights_sha256: str = ""
    resumed_from: Optional[dict] = None
    launcher: str = ""
    num_nodes: int = 1
    # options recorded as given (meter.py passes config.recorded()), with config.py's defaults
    scale_lr: str = default_of("scale_lr")
    optimizer: str = default_of("optimizer")
    warmup_steps: int = default_of("warmup_steps")
    threads: int = 0              # intra-op threads of this process (torch.get_num_threads())
    omp_wait_policy: str = ""     # OMP_WAIT_POLICY as this process saw it ("" = OpenMP's default)

    def to_dict(self) -> dict:
        """The fields, with every number that is not finite (a loss of nan after a divergence) as None:
        the JSON file holds null there, never the bare NaN/Infinity tokens strict JSON readers refuse."""
        return _finite(asdict(self))


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def weights_digest(model) -> str:
    """A fingerprint of the weights: equal digests mean bit-identical models."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def check_target(path: str) -> Path:
    """Refuse, before any training, a ``--json`` target that could not be written at the end
    (:func:`ddp_tutorial.atomic.check_writable`: ``/dev/null``, ``/dev/stdout`` and pipes are written through)."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise TutorialError("result.is_dir", path=str(target))
    try:
        atomic.check_writable(target)
    except OSError as error:
        raise TutorialError("result.unwritable", path=str(target), why=error.strerror or str(error)) from None
    return target


def write(path: str, result: TrainResult) -> Path:
    """Write ``result`` as JSON atomically; on failure keep it in a fallback file and say where
    (and when even that fails, print it on stderr: a finished training is never lost)."""
    payload = result.to_dict()
    try:
        return atomic.write_json(Path(path).expanduser(), payload)
    except OSError as error:
        why = error.strerror or str(error)
    fallback = Path(tempfile.gettempdir()) / f"ddp-tutorial-result-{os.getpid()}.json"
    try:
        atomic.write_json(fallback, payload)
    except OSError:
        try:
            print(json.dumps(payload, sort_keys=True, ensure_ascii=False), file=sys.stderr, flush=True)
        except OSError:
            pass
        raise TutorialError("result.lost", path=path, why=why,
                            sha=payload["weights_sha256"], acc=payload["test_accuracy"]) from None
    raise TutorialError("result.kept_elsewhere", path=path, why=why, fallback=str(fallback))
