"""The rules for the training options, shared by :class:`~ddp_tutorial.config.TrainConfig` and
the SLURM job spec (:mod:`ddp_tutorial.slurm.spec`), so a value is accepted or refused in the
same words wherever it is given. No torch import.

Each rule says which values are allowed; :func:`check` raises a bilingual
:class:`~ddp_tutorial.i18n.TutorialError` naming the option, the value and the rule.
Bounds are generous but finite: a ``--seed`` beyond 2**63 or ``--hidden 10**9`` is refused here,
with a message, instead of failing deep inside torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from .datasets import NAMES as DATASET_NAMES
from .i18n import TutorialError, number, t


@dataclass(frozen=True)
class Int:
    low: int
    high: int

    def ok(self, value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and self.low <= value <= self.high

    def describe(self) -> str:
        return t("rule.int_range", low=number(self.low), high=number(self.high))


@dataclass(frozen=True)
class Number:
    """A finite number with ``low < value ≤ high``."""
    low: float
    high: float

    def ok(self, value) -> bool:
        return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                and self.low < value <= self.high)

    def describe(self) -> str:
        return t("rule.number_range", low=number(self.low), high=number(self.high))


@dataclass(frozen=True)
class Choice:
    choices: Sequence[str]

    def ok(self, value) -> bool:
        return value in self.choices

    def describe(self) -> str:
        return t("rule.choice", choices=", ".join(self.choices))


# The training options, by their TrainConfig field name (the option is --name-with-dashes).
TRAIN_RULES = {
    "dataset": Choice(DATASET_NAMES),
    "epochs": Int(0, 100_000),
    "batch_size": Int(1, 1 << 20),
    "lr": Number(0.0, 10.0),
    "seed": Int(0, 2**63 - 1 - 100_000),   # DistributedSampler seeds each epoch with seed + epoch
    "num_layers": Int(2, 64),              # an input and an output layer at least
    "hidden": Int(1, 1 << 16),
    "timeout": Number(0.0, 7 * 24 * 3600.0),
    "threads": Int(1, 1024),
    "train_subset": Int(1, 10**9),
    "backend": Choice(("auto", "gloo", "nccl")),
    "device": Choice(("auto", "cpu", "cuda")),
    "scale_lr": Choice(("none", "linear", "sqrt")),
    "warmup_steps": Int(0, 10_000_000),
}


def option_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def check(field: str, value, option: Optional[str] = None):
    """``value`` if the rule of training option ``field`` allows it, else a :class:`TutorialError`."""
    rule = TRAIN_RULES[field]
    if not rule.ok(value):
        raise TutorialError("config.bad_value", option=option or option_name(field), value=value,
                            rule=rule.describe())
    return value
