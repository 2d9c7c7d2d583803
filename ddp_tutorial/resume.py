"""``--resume`` and rank 0's checkpoints: one object, complete when built, beside the story.

The tutorial series' ``Trainer`` has ``_load_snapshot`` and ``_save_snapshot``; here they are
:meth:`Resume.start` and :meth:`Resume.save`, with the checks that make a resumed run the same run:
the checkpoint must fit this one (model shape, world size, batch, seed, data, optimizer —
:func:`ddp_tutorial.checkpoint.load_checkpoint` says what differs), a new learning rate is applied
and said, the random state comes back, and a stop vote ends in :meth:`Resume.preempted` (exit 75).

torch is imported where it is used: ``python -m ddp_tutorial.resume DIR``, which the job templates run after
every stop, answers without it (:func:`ddp_tutorial.checkpoint.stands_at`).
"""

from __future__ import annotations

from typing import Callable

from . import checkpoint as ckpt
from .checkpoint import Position
from . import exits
from .config import TrainConfig
from .preemption import Preempted
from .result import TrainResult
from .whoami import DistEnv


class Resume:
    """``--resume`` and rank 0's checkpoints of one run: ``say`` is how the run prints
    (:meth:`~ddp_tutorial.runstate.RunState.say`), ``lr`` its learning rate for this world size."""

    def __init__(self, config: TrainConfig, env: DistEnv, say: Callable[..., None], model, optimizer, lr: float):
        self.config, self.env, self.say = config, env, say
        self.model, self.optimizer, self.lr = model, optimizer, lr
        layers = list(model.hidden_layers)
        shape = [len(layers), layers[0].in_features, layers[0].out_features, layers[-1].out_features]
        # what a checkpoint must have been made with to be resumed by this run (the options: config.py's table)
        self.expected = dict(shape=shape, world_size=env.world_size, lr=lr, **ckpt.kept_options(config))

    def start(self) -> Position:
        """Where this run starts: the beginning, or (``--resume``) where the checkpoint stands."""
        config = self.config
        start = self._load() if config.resume else Position()
        if start.epoch >= config.epochs and not start.epoch:  # --epochs 0, nothing resumed (R01)
            self.say("ckpt.nothing_to_train", everyone=False)
        elif start.epoch >= config.epochs:  # a finished run resumed with the same (or fewer) --epochs
            self.say("ckpt.nothing_left", path=config.checkpoint_dir, epoch=start.epoch, epochs=config.epochs,
                     everyone=False)
        return start

    def _load(self) -> Position:
        import torch
        from .optim import set_lr
        directory, say, rank = self.config.checkpoint_dir, self.say, self.env.rank
        state = ckpt.load_checkpoint(directory, self.expected)
        if state is None:
            say("ckpt.none", path=directory, everyone=False)
            return Position()
        ckpt.load_into(directory, self.model, self.optimizer, state)
        set_lr(self.optimizer, self.lr)  # this run's lr, not the one saved with the optimizer
        resumed_from = {"epoch": state["epoch"], "step": state["step"]}
        if state.get("lr") is not None and state["lr"] != self.lr:  # a new lr: applied, said, recorded
            say("ckpt.lr_changed", saved=state["lr"], current=self.lr, everyone=False)
            resumed_from["lr_before"] = state["lr"]
        loss_sum, steps = state.get("partial_loss", 0.0), state.get("partial_steps", 0)
        if isinstance(loss_sum, list):  # stopped mid-epoch: one entry per rank (same world size, checked)
            loss_sum, steps = loss_sum[rank], steps[rank]
        if "rng" in state:
            torch.set_rng_state(state["rng"])
        say("ckpt.resumed", path=directory, epoch=state["epoch"], step=state["step"], everyone=False)
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
        if not (self.env.world_size > 1 and start.resumed_from):
            return
        import torch
        images, labels = data.batch(torch.arange(min(self.config.batch_size, len(data))))  # on the data's device
        criterion(ddp_model(images), labels).backward()
        self.optimizer.zero_grad(set_to_none=True)

    def save(self, epoch: int, step: int, partial_loss, partial_steps, record: TrainResult) -> bool:
        """Rank 0 writes the checkpoint (atomically); False when there is nowhere to write it."""
        directory = self.config.checkpoint_dir
        if not (self.env.is_main and directory):
            return False
        import torch
        state = dict(model=self.model.state_dict(), optimizer=self.optimizer.state_dict(), epoch=epoch,
                     step=step, partial_loss=partial_loss, partial_steps=partial_steps, epochs=record.epochs,
                     rank_losses=record.rank_losses, rng=torch.get_rng_state(), **self.expected)
        path = ckpt.save_checkpoint(directory, state)  # a launcher's SIGTERM (Ctrl-C) waits until it is whole
        self.say("ckpt.saved", path=path, epoch=epoch, step=step)
        return True

    def preempted(self, epoch: int, step: int) -> None:
        """After the story's stop vote and rank 0's checkpoint: say so, and leave with exit code 75."""
        key = "train.preempted" if self.config.checkpoint_dir else "ckpt.nothing_saved"
        self.say(key, rank=self.env.rank, epoch=epoch, step=step, code=exits.REQUEUE)
        raise Preempted()


if __name__ == "__main__":
    # python -m ddp_tutorial.resume DIR: "EPOCH STEP" of DIR's checkpoint, nothing when there is none.
    # The job templates ask it after exit 75: a requeue whose checkpoint did not move on stops (P8).
    import sys

    found = ckpt.stands_at(sys.argv[1]) if len(sys.argv) == 2 else None
    if found is not None:
        print(*found)
