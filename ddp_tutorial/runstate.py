"""The run around the story: one small object per training process, and the pieces train.py builds.

:mod:`ddp_tutorial.train` tells the story (who am I → process group → sampler → DDP → loop →
rank-0 test). Around it, three collaborators, each complete when it is built:

* :class:`RunState` (here): the ``with`` block — before the rendezvous the ``--json`` target and
  ``--checkpoint-dir`` are checked and SIGUSR1 is caught (:class:`~ddp_tutorial.preemption.StopRequest`);
  ``say`` prints; ``lost_peer`` names a collective that failed because another rank died; any
  :class:`~ddp_tutorial.i18n.TutorialError` leaving the block names the rank that raised it;
* :class:`~ddp_tutorial.resume.Resume`: ``--resume`` (:meth:`~ddp_tutorial.resume.Resume.start`), rank 0's
  checkpoints (``save``), the exit 75 after a stop vote (``preempted``) — the tutorial series'
  ``_load_snapshot`` / ``_save_snapshot``;
* :class:`~ddp_tutorial.meter.RunRecord` and :class:`~ddp_tutorial.meter.EpochMeter`: the result, the
  clock, rank 0's progress bar, the epoch line; one rank's loss of one epoch, kept on the device.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import List, Optional

from .config import TrainConfig
from .failures import classify_failure
from .i18n import TutorialError, t
from . import checkpoint as ckpt
from . import exits
from . import result as results
from .preemption import StopRequest
from .threads import available_cores
from .whoami import DistEnv

STOP_CHECK_EVERY = 10  # steps between two "should we stop?" votes (each is a small collective)


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


def scaled_lr(config: TrainConfig, world_size: int) -> float:
    """The learning rate for ``world_size`` ranks: ``--scale-lr linear`` (× N, Goyal et al. for SGD),
    ``sqrt`` (× √N, the usual heuristic for Adam) or ``none``."""
    factor = {"none": 1.0, "linear": float(world_size), "sqrt": math.sqrt(world_size)}[config.scale_lr]
    return config.lr * factor


def warmup_lr(lr: float, done: int, warmup_steps: int) -> float:
    """``--warmup-steps N``: the learning rate of step ``done`` (counted over the whole run) rises linearly
    from lr/N to lr over the first N steps, then stays at lr (nanoGPT's ``get_lr``, without the decay)."""
    return lr * min(1.0, (done + 1) / warmup_steps) if warmup_steps else lr


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


class RunState:
    """``with RunState(config, env) as run:`` — the checks before the rendezvous, SIGUSR1, printing."""

    def __init__(self, config: TrainConfig, env: DistEnv):
        self.config, self.env = config, env
        self.distributed = env.world_size > 1
        self.stop = StopRequest()

    def __enter__(self) -> "RunState":
        self.stop.install()  # from now on SIGUSR1 (SLURM's warning) means "checkpoint and stop"
        cores = available_cores()
        if self.config.threads and self.config.threads * self.env.local_world_size > 2 * cores:
            self.say(t("train.too_many_threads", threads=self.config.threads, per_node=self.env.local_world_size,
                       cores=cores), everyone=False)  # 1024 threads on 2 cores: 250× slower, not an error
        if self.env.is_main:  # problems that would only show after all the training: now
            if self.config.json:
                results.check_target(self.config.json)
            if self.config.checkpoint_dir:
                ckpt.ensure_writable(self.config.checkpoint_dir)
        return self

    def __exit__(self, kind, error, trace) -> None:
        self.stop.uninstall()
        if self.env.is_main and self.config.checkpoint_dir:
            ckpt.release(self.config.checkpoint_dir)  # the directory's lock, taken by ensure_writable
        if isinstance(error, TutorialError) and self.distributed and "rank" not in error.fields:
            error.rank = self.env.rank  # entry.run_and_exit prints "error (rank N): …"

    def say(self, text: str, everyone: bool = True) -> None:
        if not self.config.quiet and (everyone or self.env.is_main):
            try:
                sys.stdout.write(text + "\n")  # one write per line: ranks printing at once do not mix
                sys.stdout.flush()
            except BrokenPipeError:  # `… | head`: the reader left; the training goes on, silently
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
                os.close(devnull)

    def lost_peer(self, error: BaseException, backend: str) -> Optional[TutorialError]:
        """A collective failed because another rank died: our message (exit code 3), said at once —
        before the process group is torn down — and returned; None for any other failure."""
        text = str(error)
        if not (self.distributed and classify_failure(text, backend) == "lost_peer"):
            return None
        lost = TutorialError("train.lost_peer", rank=self.env.rank, detail=text.strip().splitlines()[0][:200])
        lost.exit_code = exits.LOST_PEER  # a consequence of another rank's failure (spawn's supervisor)
        print(f"{t('error.prefix')} (rank {self.env.rank}): {lost}", file=sys.stderr, flush=True)
        lost.said = True  # entry.run_and_exit: only the exit code is left to give
        return lost
