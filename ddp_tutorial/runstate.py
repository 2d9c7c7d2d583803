"""Everything around the training story that is not DDP itself: one object per run.

:mod:`ddp_tutorial.train` tells the story (who am I → process group → sampler → DDP → loop →
rank-0 test). The chores it needs at fixed points are named calls on a :class:`RunState`:

* before the rendezvous: the ``--json`` target and ``--checkpoint-dir`` are checked, SIGUSR1 is caught;
* ``resume``: weights, optimizer state, position and losses from a checkpoint that fits this run;
* ``should_stop`` / ``preempt``: all ranks agree to stop at a step boundary, rank 0 checkpoints;
* ``lr_at``: the linear warm-up of ``--warmup-steps``;
* ``progress``: rank 0's progress bar;
* ``gather`` / ``end_epoch``: every rank's loss (a collective), the record, the epoch checkpoint;
* ``finish``: the weights' fingerprint and the JSON result (rank 0).

Any :class:`~ddp_tutorial.i18n.TutorialError` leaving the ``with RunState(...)`` block names the
rank that raised it (in a run of several processes).
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
import torch.distributed as dist

from . import checkpoint as ckpt
from . import exits
from . import result as results
from .config import TrainConfig
from .distributed import DistEnv, classify_failure, control_group
from .i18n import TutorialError, t
from .preemption import Preempted, StopRequest
from .result import TrainResult
from .threads import WAIT_POLICY_VARIABLE

STOP_CHECK_EVERY = 10  # steps between two "should we stop?" votes (each is a small collective)


@dataclass
class Position:
    """Where training starts: epoch, step inside it, and this rank's loss sum / steps so far."""
    epoch: int = 0
    step: int = 0
    loss_sum: float = 0.0
    steps: int = 0


def scaled_lr(config: TrainConfig, world_size: int) -> float:
    """The learning rate for ``world_size`` ranks: ``--scale-lr linear`` (× N, Goyal et al. for SGD),
    ``sqrt`` (× √N, the usual heuristic for Adam) or ``none``."""
    factor = {"none": 1.0, "linear": float(world_size), "sqrt": math.sqrt(world_size)}[config.scale_lr]
    return config.lr * factor


class RunState:
    def __init__(self, config: TrainConfig, env: DistEnv):
        self.config, self.env = config, env
        self.distributed = env.world_size > 1
        self.stop = StopRequest()
        self.model = self.optimizer = None
        self.device = torch.device("cpu")
        self.backend = "gloo"
        self.control_group = None
        self.result: Optional[TrainResult] = None
        self.samples = 0
        self.started = 0.0
        self.epoch_step_losses: List[torch.Tensor] = []

    # ------------------------------------------------------------------ the with block
    def __enter__(self) -> "RunState":
        self.stop.install()  # from now on SIGUSR1 (SLURM's warning) means "checkpoint and stop"
        if self.env.is_main:  # problems that would only show after all the training: now
            if self.config.json:
                results.check_target(self.config.json)
            if self.config.checkpoint_dir:
                ckpt.ensure_writable(self.config.checkpoint_dir)
        return self

    def __exit__(self, kind, error, trace) -> None:
        self.stop.uninstall()
        if isinstance(error, TutorialError) and self.distributed and "rank" not in error.fields:
            error.rank = self.env.rank  # entry.run_and_exit prints "error (rank N): …"

    def say(self, text: str, everyone: bool = True) -> None:
        if not self.config.quiet and (everyone or self.env.is_main):
            sys.stdout.write(text + "\n")  # one write per line: ranks printing at once do not mix
            sys.stdout.flush()

    def begin(self, model, optimizer, device: torch.device, backend: str, steps_per_epoch: int,
              shape: List[int], num_parameters: int) -> Position:
        """Record the run's setting; resume from the checkpoint when asked. Returns the start position."""
        self.model, self.optimizer, self.device, self.backend = model, optimizer, device, backend
        self.steps_per_epoch = steps_per_epoch
        self.shape = shape
        self.lr = scaled_lr(self.config, self.env.world_size)
        if self.distributed:  # nccl: votes and loss sums on the CPU through a gloo side group
            self.control_group = control_group()
        self.result = TrainResult(
            rank=self.env.rank, world_size=self.env.world_size, dataset=self.config.dataset, backend=backend,
            device=str(device), seed=self.config.seed, lr=self.lr, batch_size=self.config.batch_size,
            steps_per_epoch=steps_per_epoch, num_parameters=num_parameters, launcher=self.env.scheme,
            num_nodes=self.env.num_nodes, scale_lr=self.config.scale_lr, warmup_steps=self.config.warmup_steps,
            threads=torch.get_num_threads(), omp_wait_policy=os.environ.get(WAIT_POLICY_VARIABLE, ""))
        position = self._resume() if self.config.resume else Position()
        if self.distributed:
            dist.barrier(self.control_group)
        self.started = time.perf_counter()
        return position

    # ------------------------------------------------------------------ resume
    def _expected(self) -> dict:
        c = self.config
        return dict(shape=self.shape, world_size=self.env.world_size, batch_size=c.batch_size, seed=c.seed,
                    dataset=c.dataset, train_subset=c.train_subset, optimizer_kind="adam", lr=self.lr)

    def _resume(self) -> Position:
        state = ckpt.load_checkpoint(self.config.checkpoint_dir, self._expected())
        if state is None:
            self.say(t("ckpt.none", path=self.config.checkpoint_dir), everyone=False)
            return Position()
        ckpt.load_into(self.config.checkpoint_dir, self.model, self.optimizer, state)
        if state.get("lr") is not None and state["lr"] != self.lr:  # a new lr: applied, said, recorded
            for group in self.optimizer.param_groups:
                group["lr"] = self.lr
            self.say(t("ckpt.lr_changed", saved=state["lr"], current=self.lr), everyone=False)
        loss_sum, steps = state.get("partial_loss", 0.0), state.get("partial_steps", 0)
        if isinstance(loss_sum, list):  # stopped mid-epoch: one entry per rank (same world size, checked)
            loss_sum, steps = loss_sum[self.env.rank], steps[self.env.rank]
        self.result.epochs = list(state.get("epochs", []))
        self.result.rank_losses = [list(r) for r in state.get("rank_losses", [])]
        if "rng" in state:
            torch.set_rng_state(state["rng"])
        self.result.resumed_from = {"epoch": state["epoch"], "step": state["step"]}
        if state.get("lr") is not None and state["lr"] != self.lr:
            self.result.resumed_from["lr_before"] = state["lr"]
        self.say(t("ckpt.resumed", path=self.config.checkpoint_dir, epoch=state["epoch"], step=state["step"]),
                 everyone=False)
        return Position(state["epoch"], state["step"], loss_sum, steps)

    def settle_ddp_buckets(self, ddp_model, data, criterion) -> None:
        """After a resume: one forward/backward whose gradients are thrown away, so that the resumed run
        sums gradients in the same order as an uninterrupted one.

        DDP packs gradients into buckets in the reverse order of ``parameters()`` for the first step,
        then re-packs them once in the order autograd produced them. With three or more ranks the
        all-reduce adds the ranks' values in an order that depends on where a gradient sits in its
        bucket, so a fresh process's first step would round differently (≈1e-7) from the uninterrupted
        run's step at the same point. No optimizer step is taken: the weights do not change."""
        if not (self.distributed and self.result.resumed_from):
            return
        images, labels = data.batch(torch.arange(min(self.config.batch_size, len(data)), device=self.device))
        criterion(ddp_model(images), labels).backward()
        self.optimizer.zero_grad(set_to_none=True)

    # ------------------------------------------------------------------ during the loop
    def set_lr(self, epoch: int, step: int) -> None:
        """``--warmup-steps N``: the learning rate rises linearly from lr/N to lr over the first N steps."""
        warmup, done = self.config.warmup_steps, epoch * self.steps_per_epoch + step
        if warmup and done <= warmup:
            for group in self.optimizer.param_groups:
                group["lr"] = self.lr * min(1.0, (done + 1) / warmup)

    def should_stop(self, step: int) -> bool:
        """Every ``STOP_CHECK_EVERY`` steps, all ranks vote: did any of them get SIGUSR1?"""
        return step % STOP_CHECK_EVERY == 0 and self.stop.agreed(self.distributed, self.control_group)

    def preempt(self, epoch: int, step: int, loss_sum: float, steps: int) -> None:
        """Checkpoint where every rank stands (rank 0 writes), then leave with exit code 75."""
        partials = self.gather(loss_sum, steps)
        self.save(epoch, step, [p[0] for p in partials], [int(p[1]) for p in partials])
        if self.distributed:
            dist.barrier(self.control_group)  # nobody exits before the checkpoint is on disk
        key = "train.preempted" if self.config.checkpoint_dir else "ckpt.nothing_saved"
        self.say(t(key, rank=self.env.rank, epoch=epoch, step=step, code=exits.REQUEUE))
        raise Preempted()

    def progress(self, epoch: int, first: int):
        """Rank 0's progress bar for one epoch (tqdm; None when not shown)."""
        show = self.config.progress if self.config.progress is not None else sys.stderr.isatty()
        if not (self.env.is_main and show):
            return None
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return None
        return tqdm(total=self.steps_per_epoch, initial=first, desc=f"epoch {epoch}", unit="batch", leave=False)

    def gather(self, loss_sum: float, steps: int) -> List[Tuple[float, float]]:
        """Every rank's (loss sum, steps): an all_gather on the CPU (through gloo)."""
        totals = torch.tensor([loss_sum, float(steps)], dtype=torch.float64)
        if not self.distributed:
            return [tuple(totals.tolist())]
        if self.backend == "nccl" and self.control_group is None:
            totals = totals.to(self.device)
        gathered = [torch.zeros_like(totals) for _ in range(self.env.world_size)]
        dist.all_gather(gathered, totals, group=self.control_group)
        return [tuple(g.tolist()) for g in gathered]

    def end_epoch(self, epoch: int, rank_sums: List[float], mean_loss: float, step_losses: list,
                  samples: int) -> None:
        self.samples += samples
        self.result.epochs.append(mean_loss)
        self.result.rank_losses.append(rank_sums)
        if step_losses:
            self.result.step_losses += torch.stack(step_losses).tolist()  # one device→host copy per epoch
        rate = self.samples * self.env.world_size / max(time.perf_counter() - self.started, 1e-9)
        self.say(t("train.epoch_summary", epoch=epoch, world_size=self.env.world_size, loss=mean_loss,
                   rate=rate), everyone=False)
        self.save(epoch + 1, 0, 0.0, 0)

    def save(self, epoch: int, step: int, partial_loss, partial_steps) -> bool:
        """Rank 0 writes the checkpoint (atomically); False when there is nowhere to write it."""
        if not (self.env.is_main and self.config.checkpoint_dir):
            return False
        state = dict(model=self.model.state_dict(), optimizer=self.optimizer.state_dict(), epoch=epoch,
                     step=step, partial_loss=partial_loss, partial_steps=partial_steps,
                     epochs=self.result.epochs, rank_losses=self.result.rank_losses, rng=torch.get_rng_state(),
                     **self._expected())
        path = ckpt.save_checkpoint(self.config.checkpoint_dir, state)
        self.say(t("ckpt.saved", path=path, epoch=epoch, step=step))
        return True

    def lost_peer(self, error: BaseException) -> None:
        """A collective failed because another rank died: raise our message (exit code 3) instead."""
        text = str(error)
        if self.distributed and classify_failure(text, self.backend) == "lost_peer":
            lost = TutorialError("train.lost_peer", rank=self.env.rank, detail=text.strip().splitlines()[0][:200])
            lost.exit_code = exits.LOST_PEER  # a consequence of another rank's failure (spawn's supervisor)
            raise lost from None

    # ------------------------------------------------------------------ the end
    def finish(self, accuracy: Optional[float]) -> TrainResult:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self.result.train_seconds = time.perf_counter() - self.started
        self.result.samples_per_second = self.samples * self.env.world_size / max(self.result.train_seconds, 1e-9)
        self.result.test_accuracy = accuracy
        self.result.weights_sha256 = results.weights_digest(self.model)
        if self.env.is_main and self.config.json:
            path = results.write(self.config.json, self.result)
            self.say(t("train.result_written", path=path))
        return self.result
