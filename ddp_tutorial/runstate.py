"""The run around the story: one small object per training process, the ``with`` block of train.py.

:mod:`ddp_tutorial.train` tells the story (who am I → process group → sampler → DDP → loop →
rank-0 test). Around it, three collaborators, each complete when it is built and each given what
it uses (the config, the environment, the ``say`` it prints with), never the run itself:

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

import os
import sys
from typing import Optional

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
            self.say("train.too_many_threads", threads=self.config.threads, per_node=self.env.local_world_size,
                     cores=cores, everyone=False)  # 1024 threads on 2 cores: 250× slower, not an error
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

    def say(self, key: str, everyone: bool = True, **fields) -> None:
        """Print the catalogue's message ``key`` with ``fields`` in the user's language — on every rank, or
        (``everyone=False``) on rank 0 only; nothing with ``--quiet``. The collaborators print with it."""
        if not self.config.quiet and (everyone or self.env.is_main):
            text = t(key, **fields)
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
