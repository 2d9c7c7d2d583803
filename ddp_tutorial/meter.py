"""What a run measures and reports, beside the story: one epoch's loss, the run's record and clock.

* :class:`EpochMeter` — one rank's loss sum of one epoch, added on the device (no per-step
  device→host sync); built at the start of every epoch (a resumed epoch starts from the saved sum);
* :class:`RunRecord` — the run's :class:`~ddp_tutorial.result.TrainResult`, its clock (started when the
  record is built, after the start barrier), rank 0's progress bar, the epoch line, the divergence
  warning, and the end: the weights' fingerprint and the JSON result (rank 0).
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Callable, Iterator, List, Optional, Tuple

import torch

from . import result as results
from .checkpoint import Position
from .config import TrainConfig
from .i18n import t
from .result import TrainResult
from .threads import WAIT_POLICY_VARIABLE
from .whoami import DistEnv


class EpochMeter:
    """This rank's loss of epoch ``epoch``; when the run resumed inside it (``start``), it starts at the
    saved step with the saved loss sum."""

    def __init__(self, device: torch.device, start: Position, epoch: int):
        resumed = epoch == start.epoch
        self.first_step = start.step if resumed else 0
        self.loss_sum, self.steps = (start.loss_sum, start.steps) if resumed else (0.0, 0)
        self.running = torch.zeros((), device=device)
        self.step_losses: List[torch.Tensor] = []
        self.samples = 0

    def record(self, loss: torch.Tensor, samples: int) -> None:
        """One step's loss, added on the device (no per-step device→host sync)."""
        self.running += loss.detach()
        self.step_losses.append(loss.detach())
        self.steps += 1
        self.samples += samples

    def epoch_loss(self) -> Tuple[float, int]:
        """This rank's loss sum and number of batches so far in this epoch (one device→host copy)."""
        return self.loss_sum + self.running.item(), self.steps


class RunRecord:
    """The result of one run, filled epoch by epoch; the clock starts when it is built."""

    def __init__(self, config: TrainConfig, env: DistEnv, say: Callable[..., None], model, parameters: int, lr: float,
                 device: torch.device, backend: str, share: int, start: Position):
        """``say``: how this run prints (:meth:`~ddp_tutorial.runstate.RunState.say`); ``parameters``: how many
        the model has (:func:`~ddp_tutorial.model.count_parameters`); ``backend``: the group's (at world 1, no
        group: the one this device would use, as train.py printed it); ``share``: this rank's samples per epoch (the
        sampler's); ``start``: where the run starts, with what a resumed run brings along."""
        steps_per_epoch = -(-share // config.batch_size)  # the last batch may be short
        self.config, self.env, self.say = config, env, say
        self.model, self.device, self.steps_per_epoch = model, device, steps_per_epoch
        self.classes = list(model.hidden_layers)[-1].out_features
        self.result = TrainResult(  # the options as given (config.py's table), then what this run resolved
            **config.recorded(), rank=env.rank, world_size=env.world_size, backend=backend, device=str(device),
            lr=lr, steps_per_epoch=steps_per_epoch, num_parameters=parameters, launcher=env.scheme,
            num_nodes=env.num_nodes, threads=torch.get_num_threads(),
            omp_wait_policy=os.environ.get(WAIT_POLICY_VARIABLE, ""), epochs=list(start.epochs),
            rank_losses=[list(r) for r in start.rank_losses], resumed_from=start.resumed_from)
        self.samples = 0
        self.started = time.perf_counter()  # after the start barrier: the clock of the throughput

    def progress(self, epoch: int, steps: range) -> Iterator[int]:
        """``steps``, with rank 0's progress bar for this epoch (tqdm; only where it is shown)."""
        progress, first = self.config.progress, steps.start
        show = progress if progress is not None else sys.stderr.isatty()
        bar = None
        if self.env.is_main and show:
            try:
                from tqdm.auto import tqdm
                bar = tqdm(total=self.steps_per_epoch, initial=first, desc=f"epoch {epoch}",
                           unit=t("train.progress_unit"), leave=False)
            except ImportError:
                pass
        try:
            for step in steps:
                yield step
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()

    def end_epoch(self, epoch: int, totals: List[torch.Tensor], meter: EpochMeter) -> None:
        """``totals``: every rank's (loss sum, batches) of this epoch, as gathered in the story."""
        rank_sums = [float(total[0]) for total in totals]
        mean_loss = sum(rank_sums) / max(1.0, sum(float(total[1]) for total in totals))
        self.samples += meter.samples
        self.result.epochs.append(mean_loss)
        self.result.rank_losses.append(rank_sums)
        if meter.step_losses:
            self.result.step_losses += torch.stack(meter.step_losses).tolist()  # one device→host copy per epoch
        chance = math.log(self.classes)  # the cross-entropy of a uniform guess over the classes
        if not math.isfinite(mean_loss) or mean_loss > 10 * chance:
            self.say("train.diverged", loss=mean_loss, chance=chance, lr=self.result.lr, everyone=False)
        rate = self.samples * self.env.world_size / max(time.perf_counter() - self.started, 1e-9)
        self.say("train.epoch_summary", epoch=epoch, world_size=self.env.world_size, loss=mean_loss, rate=rate,
                 everyone=False)

    def finish(self, accuracy: Optional[float]) -> TrainResult:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self.result.train_seconds = time.perf_counter() - self.started
        self.result.samples_per_second = self.samples * self.env.world_size / max(self.result.train_seconds, 1e-9)
        self.result.test_accuracy = accuracy
        self.result.weights_sha256 = results.weights_digest(self.model)
        if self.env.is_main and self.config.json:
            path = results.write(self.config.json, self.result)
            self.say("train.result_written", path=path)
        return self.result
