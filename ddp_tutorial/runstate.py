"""Everything around the training story that is not DDP itself: one object per run.

:mod:`ddp_tutorial.train` tells the story (who am I → process group → sampler → DDP → loop →
rank-0 test). The chores it needs at fixed points are named calls on a :class:`RunState`:

* before the rendezvous: the ``--json`` target and ``--checkpoint-dir`` are checked, SIGUSR1 is caught;
* ``begin``: the run's record; with ``--resume``, weights, optimizer state, position and losses
  from a checkpoint that fits this run;
* ``steps``: the step numbers of one epoch — a resumed epoch starts where it stopped; rank 0's
  progress bar; ``set_lr``: the linear warm-up of ``--warmup-steps``;
* ``stop``: SIGUSR1 caught (the story votes on it every ``STOP_CHECK_EVERY`` steps, an all-reduce);
  ``save`` / ``preempted``: rank 0's checkpoint where every rank stands, then exit 75;
* ``record`` / ``epoch_loss``: this rank's loss sum, kept on the device (no per-step sync);
* ``end_epoch``: the gathered losses recorded, the epoch line, the epoch checkpoint;
* ``finish``: the weights' fingerprint and the JSON result (rank 0).

Any :class:`~ddp_tutorial.i18n.TutorialError` leaving the ``with RunState(...)`` block names the
rank that raised it (in a run of several processes).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Iterator, List, Optional, Tuple

import torch

from . import checkpoint as ckpt
from . import exits
from . import result as results
from .config import TrainConfig
from .failures import classify_failure
from .i18n import TutorialError, t
from .model import count_parameters
from .preemption import Preempted, StopRequest
from .result import TrainResult
from .threads import WAIT_POLICY_VARIABLE, available_cores
from .whoami import DistEnv

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
        self.started: Optional[float] = None
        self.start = Position()
        self.lost: Optional[TutorialError] = None

    # ------------------------------------------------------------------ the with block
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

    def begin(self, model, optimizer, device: torch.device, backend: str, control_group,
              steps_per_epoch: int) -> Position:
        """Record the run's setting; resume from the checkpoint when asked. Returns the start position.
        ``backend``: the group's (at world 1, no group: the one this device would use, as train.py printed
        it); ``control_group``: the group of the CPU-side collectives (the gloo side group on nccl, else None)."""
        self.model, self.optimizer, self.device, self.backend = model, optimizer, device, backend
        self.control_group, self.steps_per_epoch = control_group, steps_per_epoch
        layers = list(model.hidden_layers)
        self.shape = [len(layers), layers[0].in_features, layers[0].out_features, layers[-1].out_features]
        self.lr = optimizer.param_groups[0]["lr"]  # already scaled for this world size (train.py)
        self.result = TrainResult(  # the options as given (config.py's table), then what this run resolved
            **self.config.recorded(), rank=self.env.rank, world_size=self.env.world_size, backend=self.backend,
            device=str(device), lr=self.lr, steps_per_epoch=steps_per_epoch, num_parameters=count_parameters(model),
            launcher=self.env.scheme, num_nodes=self.env.num_nodes, threads=torch.get_num_threads(),
            omp_wait_policy=os.environ.get(WAIT_POLICY_VARIABLE, ""))
        self.start = self._resume() if self.config.resume else Position()
        if self.start.epoch >= self.config.epochs and not self.start.epoch:  # --epochs 0, nothing resumed (R01)
            self.say(t("ckpt.nothing_to_train"), everyone=False)
        elif self.start.epoch >= self.config.epochs:  # a finished run resumed with the same (or fewer) --epochs
            self.say(t("ckpt.nothing_left", path=self.config.checkpoint_dir, epoch=self.start.epoch,
                       epochs=self.config.epochs), everyone=False)
        return self.start

    # ------------------------------------------------------------------ resume
    def _expected(self) -> dict:
        c = self.config
        return dict(shape=self.shape, world_size=self.env.world_size, batch_size=c.batch_size, seed=c.seed,
                    dataset=c.dataset, train_subset=c.train_subset, optimizer_kind=c.optimizer, lr=self.lr)

    def _resume(self) -> Position:
        state = ckpt.load_checkpoint(self.config.checkpoint_dir, self._expected())
        if state is None:
            self.say(t("ckpt.none", path=self.config.checkpoint_dir), everyone=False)
            return Position()
        ckpt.load_into(self.config.checkpoint_dir, self.model, self.optimizer, state)
        for group in self.optimizer.param_groups:  # this run's lr, not the one saved with the optimizer
            group["lr"] = self.lr
        if state.get("lr") is not None and state["lr"] != self.lr:  # a new lr: applied, said, recorded
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
    def steps(self, epoch: int, num_batches: int) -> Iterator[int]:
        """The step numbers of one epoch, with the chores between two steps (see the module doc)."""
        if self.started is None:
            self.started = time.perf_counter()  # after the start barrier: the clock of the throughput
        first = self.start.step if epoch == self.start.epoch else 0
        self.loss_sum, self.steps_done = (self.start.loss_sum, self.start.steps) if epoch == self.start.epoch \
            else (0.0, 0)
        self.running = torch.zeros((), device=self.device)
        self.step_losses: List[torch.Tensor] = []
        self.epoch_samples = 0
        bar = self.progress(epoch, first)
        try:
            for step in range(first, num_batches):
                yield step
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()

    def record(self, loss: torch.Tensor, samples: int) -> None:
        """One step's loss, added on the device (no per-step device→host sync)."""
        self.running += loss.detach()
        self.step_losses.append(loss.detach())
        self.steps_done += 1
        self.epoch_samples += samples

    def epoch_loss(self) -> Tuple[float, int]:
        """This rank's loss sum and number of batches so far in this epoch (one device→host copy)."""
        return self.loss_sum + self.running.item(), self.steps_done

    def set_lr(self, epoch: int, step: int) -> None:
        """``--warmup-steps N``: the learning rate rises linearly from lr/N to lr over the first N steps."""
        warmup, done = self.config.warmup_steps, epoch * self.steps_per_epoch + step
        if warmup and done <= warmup:
            for group in self.optimizer.param_groups:
                group["lr"] = self.lr * min(1.0, (done + 1) / warmup)

    def preempted(self, epoch: int, step: int) -> None:
        """After the story's stop vote and rank 0's checkpoint: another SIGUSR1 changes nothing from
        here on (exit 75, not death by signal); say so, and leave with exit code 75."""
        self.stop.settle()
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

    def end_epoch(self, epoch: int, totals: List[torch.Tensor]) -> None:
        """``totals``: every rank's (loss sum, batches) of this epoch, as gathered in the story."""
        rank_sums = [float(total[0]) for total in totals]
        mean_loss = sum(rank_sums) / max(1.0, sum(float(total[1]) for total in totals))
        self.samples += self.epoch_samples
        self.result.epochs.append(mean_loss)
        self.result.rank_losses.append(rank_sums)
        if self.step_losses:
            self.result.step_losses += torch.stack(self.step_losses).tolist()  # one device→host copy per epoch
        chance = math.log(self.shape[-1])  # the cross-entropy of a uniform guess over the classes
        if not math.isfinite(mean_loss) or mean_loss > 10 * chance:
            self.say(t("train.diverged", loss=mean_loss, chance=chance, lr=self.lr), everyone=False)
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
        with signals_held():  # a launcher's SIGTERM (Ctrl-C) waits until the checkpoint is whole
            path = ckpt.save_checkpoint(self.config.checkpoint_dir, state)
        self.say(t("ckpt.saved", path=path, epoch=epoch, step=step))
        return True

    def lost_peer(self, error: BaseException) -> Optional[TutorialError]:
        """A collective failed because another rank died: our message (exit code 3), said at once —
        before the process group is torn down — and returned; None for any other failure."""
        text = str(error)
        if not (self.distributed and classify_failure(text, self.backend) == "lost_peer"):
            return None
        lost = TutorialError("train.lost_peer", rank=self.env.rank, detail=text.strip().splitlines()[0][:200])
        lost.exit_code = exits.LOST_PEER  # a consequence of another rank's failure (spawn's supervisor)
        print(f"{t('error.prefix')} (rank {self.env.rank}): {lost}", file=sys.stderr, flush=True)
        lost.said = True  # entry.run_and_exit: only the exit code is left to give
        return lost

    # ------------------------------------------------------------------ the end
    def finish(self, accuracy: Optional[float]) -> TrainResult:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self.result.train_seconds = time.perf_counter() - (self.started or time.perf_counter())
        self.result.samples_per_second = self.samples * self.env.world_size / max(self.result.train_seconds, 1e-9)
        self.result.test_accuracy = accuracy
        self.result.weights_sha256 = results.weights_digest(self.model)
        if self.env.is_main and self.config.json:
            path = results.write(self.config.json, self.result)
            self.say(t("train.result_written", path=path))
        return self.result
