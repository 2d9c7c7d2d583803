"""The kinds of rule a training option follows, and the bounds that span several options.

Which option follows which rule is written once, in the table of
:class:`~ddp_tutorial.config.TrainConfig` (``config.TRAIN_RULES``); the SLURM job spec
(:mod:`ddp_tutorial.slurm.spec`) checks its training options with the same rules, so a value is
accepted or refused in the same words wherever it is given. No torch import.

Each rule says which values are allowed; :func:`check` raises a bilingual
:class:`~ddp_tutorial.i18n.TutorialError` naming the option, the value and the rule.
Bounds are generous but finite: a ``--seed`` beyond 2**63 or ``--hidden 10**9`` is refused here,
with a message, instead of failing deep inside torch — and so are a model too large for any
node (:func:`check_model_size`) and more processes than this machine can hold
(:func:`check_processes`), before anything is allocated or started.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Optional, Sequence

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


@dataclass(frozen=True)
class NonEmptyPath:
    """A path that is not empty: ``--json ''`` (an unset shell variable) must not turn the feature off
    in silence. ``~`` is expanded where the path is used (:meth:`expand`)."""

    def ok(self, value) -> bool:
        return isinstance(value, str) and value.strip() != "" and "\0" not in value

    def describe(self) -> str:
        return t("rule.path")

    @staticmethod
    def expand(value: str) -> str:
        return os.path.expanduser(value)


def option_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def check(field: str, value, rule, option: Optional[str] = None):
    """``value`` if ``rule`` allows it, else a :class:`TutorialError` naming option ``field``."""
    if not rule.ok(value):
        raise TutorialError("config.bad_value", option=option or option_name(field), value=value,
                            rule=rule.describe())
    return value


# --------------------------------------------------------------------------------------
# Bounds across options: the model's size, the number of processes

#: Weights, gradients and Adam's two moments: 4 float32 copies of every parameter.
BYTES_PER_PARAMETER = 4 * 4
#: At most 2**28 parameters: 4 GiB per process with Adam (the seed's model has 134 794).
MAX_PARAMETERS = 1 << 28
IMAGE_FEATURES, CLASSES = 28 * 28, 10   # both data sets: 28 × 28 pixels in, 10 classes out


def mlp_parameters(num_layers: int, hidden: int, inputs: int = IMAGE_FEATURES, classes: int = CLASSES) -> int:
    """Parameters of :class:`~ddp_tutorial.model.DeepNeuralNetwork`: inputs → hidden × (layers − 1) → classes."""
    return (inputs + 1) * hidden + (num_layers - 2) * (hidden + 1) * hidden + (hidden + 1) * classes


def check_model_size(num_layers: int, hidden: int) -> int:
    """The parameter count, if the model fits the bound; else a message (before any allocation:
    ``--hidden 65536 --num-layers 64`` passes each option's rule but would ask for terabytes)."""
    count = mlp_parameters(num_layers, hidden)
    if count > MAX_PARAMETERS:
        raise TutorialError("config.model_too_large", layers=num_layers, hidden=hidden, parameters=number(count),
                            gib=number(count * BYTES_PER_PARAMETER / 2**30, decimals=1),
                            limit=number(MAX_PARAMETERS),
                            limit_gib=number(MAX_PARAMETERS * BYTES_PER_PARAMETER / 2**30, decimals=0))
    return count


#: The most processes a node may be asked for (the SLURM job spec's bound too).
MAX_PROCESSES = 1024
PROCESSES_PER_CORE = 4   # oversubscribing a little is fine for a lesson; each process imports torch (≈0.5 GB)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def local_process_limit() -> int:
    """How many training processes this machine may start: 4 per usable core (at least 8), at most 1024."""
    return min(MAX_PROCESSES, max(8, PROCESSES_PER_CORE * usable_cores()))


def check_processes(n, option: str = "--nproc-per-node"):
    """``n`` if this machine can start that many processes (``n < 1`` is the world-size rule's to refuse)."""
    limit = local_process_limit()
    if isinstance(n, int) and not isinstance(n, bool) and n > limit:
        raise TutorialError("config.too_many_processes", option=option, n=n, cores=usable_cores(), limit=limit)
    return n
