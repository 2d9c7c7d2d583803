"""The optimizer and its learning rate: the seed's Adam (or SGD with momentum), the learning rate for
N ranks (``--scale-lr``) and its warm-up over the first steps (``--warmup-steps``).

train.py builds the optimizer once over the DDP model's parameters and sets the rate of every step;
resume.py sets this run's rate after loading an optimizer saved with another.
"""

from __future__ import annotations

import math

import torch


def make_optimizer(kind: str, parameters, lr: float) -> torch.optim.Optimizer:
    """Adam as the seed (fused: one kernel updates all parameters), or SGD with momentum 0.9."""
    if kind == "adam":
        return torch.optim.Adam(parameters, lr=lr, fused=True)
    return torch.optim.SGD(parameters, lr=lr, momentum=0.9)


def scaled_lr(lr: float, rule: str, world_size: int) -> float:
    """The learning rate for ``world_size`` ranks: ``--scale-lr linear`` (× N, Goyal et al. for SGD),
    ``sqrt`` (× √N, the usual heuristic for Adam) or ``none``."""
    factor = {"none": 1.0, "linear": float(world_size), "sqrt": math.sqrt(world_size)}[rule]
    return lr * factor


def warmup_lr(lr: float, done: int, warmup_steps: int) -> float:
    """``--warmup-steps N``: the learning rate of step ``done`` (counted over the whole run) rises linearly
    from lr/N to lr over the first N steps, then stays at lr (nanoGPT's ``get_lr``, without the decay)."""
    return lr * min(1.0, (done + 1) / warmup_steps) if warmup_steps else lr


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Every parameter group of ``optimizer`` takes ``lr`` from its next step on."""
    for group in optimizer.param_groups:
        group["lr"] = lr
