"""``--resume`` and rank 0's checkpoints: one object, complete when built, beside the story.

The tutorial series' ``Trainer`` has ``_load_snapshot`` and ``_save_snapshot``; here they are
:meth:`Resume.start` and :meth:`Resume.save`, with the checks that make a resumed run the same run:
the checkpoint must fit this one (model shape, world size, batch, seed, data, optimizer —
:func:`ddp_tutorial.checkpoint.load_checkpoint` says what differs), a new learning rate is applied
and said, the random state comes back, and a stop vote ends in :meth:`Resume.preempted` (exit 75).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from . import checkpoint as ckpt
from . import exits
from .i18n import t
from .preemption import Preempted
from .result import TrainResult
from .runstate import Position, RunState, signals_held


class Resume:
    def __init__(self, run: RunState, model, optimizer, lr: float, device: torch.device):
        self.run, self.model, self.optimizer, self.lr, self.device = run, model, optimizer, lr, device
        c, layers = run.config, list(model.hidden_layers)
        shape = [len(layers), layers[0].in_features, layers[0].out_features, layers[-1].out_features]
        # what a checkpoint must have been made with to be resumed by this run
        self.expected = dict(shape=shape, world_size=run.env.world_size, batch_size=c.batch_size, seed=c.seed,
                             dataset=c.dataset, train_subset=c.train_subset, optimizer_kind=c.optimizer, lr=lr)

    def start(self) -> Position:
        """Where this run starts: the beginning, or (``--resume``) where the checkpoint stands."""
        config = self.run.config
        start = self._load() if config.resume else Position()
        if start.epoch >= config.epochs and not start.epoch:  # --epochs 0, nothing resumed (R01)
            self.run.say(t("ckpt.nothing_to_train"), everyone=False)
        elif start.epoch >= config.epochs:  # a finished run resumed with the same (or fewer) --epochs
            self.run.say(t("ckpt.nothing_left", path=config.checkpoint_dir, epoch=start.epoch,
                           epochs=config.epochs), everyone=False)
        return start

    def _load(self) -> Position:
        directory, say, rank = self.run.config.checkpoint_dir, self.run.say, self.run.env.rank
        state = ckpt.load_checkpoint(directory, self.expected)
        if state is None:
            say(t("ckpt.none", path=directory), everyone=False)
            return Position()
        ckpt.load_into(directory, self.model, self.optimizer, state)
        for group in self.optimizer.param_groups:  # this run's lr, not the one saved with the optimizer
            group["lr"] = self.lr
        resumed_from = {"epoch": state["epoch"], "step": state["step"]}
        if state.get("lr") is not None and state["lr"] != self.lr:  # a new lr: applied, said, recorded
            say(t("ckpt.lr_changed", saved=state["lr"], current=self.lr), everyone=False)
            resumed_from["lr_before"] = state["lr"]
        loss_sum, steps = state.get("partial_loss", 0.0), state.get("partial_steps", 0)
        if isinstance(loss_sum, list):  # stopped mid-epoch: one entry per rank (same world size, checked)
            loss_sum, steps = loss_sum[rank], steps[rank]
        if "rng" in state:
            torch.set_rng_state(state["rng"])
        say(t("ckpt.resumed", path=directory, epoch=state["epoch"], step=state["step"]), everyone=False)
        return Position(state["epoch"], state["step"], loss_sum, steps, epochs=list(state.get("epochs", [])),
                        rank_losses=[list(r) for r in state.get("rank_losses", [])], resumed_from=resumed_from)

    def settle_ddp_buckets(self, ddp_model, data, criterion, start: Position) -> None:
        """After a resume: one forward/backward whose gradients are thrown away, so that the resumed run
        sums gradients in the same order as an uninterrupted one.

        DDP packs gradients into buckets in the reverse order of ``parameters()`` for the first step,
        then re-packs them once in the order autograd produced them. With three or more ranks the
        all-reduce adds the ranks' values in an order that depends on where a gradient sits in its
        bucket, so a fresh process's first step would round differently (≈1e-7) from the uninterrupted
        run's step at the same point. No optimizer step is taken: the weights do not change."""
        if not (self.run.distributed and start.resumed_from):
            return
        images, labels = data.batch(torch.arange(min(self.run.config.batch_size, len(data)), device=self.device))
        criterion(ddp_model(images), labels).backward()
        self.optimizer.zero_grad(set_to_none=True)

    def save(self, epoch: int, step: int, partial_loss, partial_steps, record: TrainResult) -> bool:
        """Rank 0 writes the checkpoint (atomically); False when there is nowhere to write it."""
        directory = self.run.config.checkpoint_dir
        if not (self.run.env.is_main and directory):
            return False
        state = dict(model=self.model.state_dict(), optimizer=self.optimizer.state_dict(), epoch=epoch,
                     step=step, partial_loss=partial_loss, partial_steps=partial_steps, epochs=record.epochs,
                     rank_losses=record.rank_losses, rng=torch.get_rng_state(), **self.expected)
        with signals_held():  # a launcher's SIGTERM (Ctrl-C) waits until the checkpoint is whole
            path = ckpt.save_checkpoint(directory, state)
        self.run.say(t("ckpt.saved", path=path, epoch=epoch, step=step))
        return True

    def preempted(self, epoch: int, step: int) -> None:
        """After the story's stop vote and rank 0's checkpoint: another SIGUSR1 changes nothing from
        here on (exit 75, not death by signal); say so, and leave with exit code 75."""
        self.run.stop.settle()
        key = "train.preempted" if self.run.config.checkpoint_dir else "ckpt.nothing_saved"
        self.run.say(t(key, rank=self.run.env.rank, epoch=epoch, step=step, code=exits.REQUEUE))
        raise Preempted()


def position(directory) -> Optional[Tuple[int, int]]:
    """Where the checkpoint in ``directory`` stands, ``(epoch, step)``, read as :meth:`Resume.start` reads it
    (rank 0's file, loaded on the CPU); ``None`` when there is none, or it cannot be read."""
    try:
        path = ckpt.checkpoint_path(directory)
        if not ckpt._regular_or_absent(path):
            return None
        handle = ckpt._open_regular(path)
        if handle is None:
            return None
        with handle:
            state = torch.load(handle, map_location="cpu", weights_only=True)
        return int(state["epoch"]), int(state["step"])
    except Exception:  # noqa: BLE001 - unreadable or not a checkpoint: no position (the resumed run says why)
        return None


if __name__ == "__main__":
    # python -m ddp_tutorial.resume DIR: "EPOCH STEP" of DIR's checkpoint, nothing when there is none.
    # The job templates ask it after exit 75: a requeue whose checkpoint did not move on stops (P8).
    import sys

    found = position(sys.argv[1]) if len(sys.argv) == 2 else None
    if found is not None:
        print(*found)
