"""The kinds of value a job spec field may hold, each with its check and its bilingual refusal.

Which field follows which rule is written once, in :class:`~ddp_tutorial.slurm.spec.JobSpec`'s table
(``job_field(rule=…)``); :func:`~ddp_tutorial.slurm.spec.validate` loops over that table.

* values that end up on ``#SBATCH`` lines (names, times, paths, module names) must match a
  strict pattern as a whole (``fullmatch``: a trailing newline is not "the end");
* values used in shell commands are quoted once by the renderer; here they may contain
  anything except control characters (newlines, tabs, escape …) and the templates' own
  ``{{placeholders}}``.

No torch import: this runs on a login node.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Sequence

from ..i18n import TutorialError, t

NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
PATH = re.compile(r"[A-Za-z0-9_./+,@-]{1,4096}")
MODULE = re.compile(r"[A-Za-z0-9_./+][A-Za-z0-9_./+-]{0,255}")  # not "-f": `module load -f` is an option
TIME = re.compile(r"[0-9]{1,4}-[0-9]{1,2}(:[0-9]{1,2}){0,2}|[0-9]{1,6}(:[0-9]{1,2}){0,2}")  # ASCII digits only
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
JOB_ID = re.compile(r"[0-9]{1,12}")
SIGNAL = re.compile(r"[A-Z0-9]{1,10}")
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")   # newline, tab, escape, C1, line separators
PLACEHOLDER = re.compile(r"\{\{|\}\}")                       # the templates' own {{gaps}}


def bad_value(name: str, value, rule: str, **fields) -> TutorialError:
    """The bilingual "Invalid NAME=VALUE: RULE" error."""
    return TutorialError("slurm.bad_value", name=name, value=value, rule=t(rule, **fields))


def int_in(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise bad_value(name, value, "slurm.rule.int_range", low=low, high=high)
    return value


def matching(name: str, value, pattern: re.Pattern, allowed: str) -> str:
    """``value`` if it matches ``pattern`` as a whole, else a clear error."""
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise bad_value(name, value, "slurm.rule.pattern", allowed=t(allowed))
    return value


def plain_text(name: str, value, empty: bool = False) -> str:
    """Any text that will be shell-quoted: control characters (newlines …) and ``{{`` ``}}`` are refused."""
    if not isinstance(value, str) or (value == "" and not empty):
        raise bad_value(name, value, "slurm.rule.control")
    if CONTROL.search(value):
        raise bad_value(name, value, "slurm.rule.control")
    if PLACEHOLDER.search(value):
        raise bad_value(name, value, "slurm.rule.placeholder")
    return value


def job_id_of(value) -> str:
    """A job id as text, checked: ASCII digits only (array/het suffixes are not used here)."""
    text = str(value).strip(" \t\r\n")
    if not JOB_ID.fullmatch(text):
        raise TutorialError("slurm.bad_job_id", value=value)
    return text


def time_limit_seconds(text: str) -> int:
    """SLURM's ``--time`` in seconds (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``); 0: no limit."""
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        hours, minutes, seconds = (parts + [0, 0])[:3]
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    if len(parts) == 3:
        return (parts[0] * 60 + parts[1]) * 60 + parts[2]
    return parts[0] * 60 + (parts[1] if len(parts) == 2 else 0)


# --------------------------------------------------------------------------------------
# The rules of the table: each has check(name, value), raising the field's bilingual refusal.


@dataclass(frozen=True)
class IntIn:
    low: int
    high: int

    def check(self, name: str, value) -> None:
        int_in(name, value, self.low, self.high)


@dataclass(frozen=True)
class Pattern:
    """Text written on an ``#SBATCH`` line (or a ``module load``): the whole value matches ``pattern``."""
    pattern: re.Pattern
    allowed: str  # the catalogue key that says what is allowed

    def check(self, name: str, value) -> None:
        matching(name, value, self.pattern, self.allowed)


@dataclass(frozen=True)
class Text:
    """Text that the script quotes once: anything but control characters and ``{{ }}``."""
    empty: bool = False

    def check(self, name: str, value) -> None:
        plain_text(name, value, empty=self.empty)


@dataclass(frozen=True)
class Time:
    def check(self, name: str, value) -> None:
        if not isinstance(value, str) or not TIME.fullmatch(value):
            raise bad_value(name, value, "slurm.rule.time")


@dataclass(frozen=True)
class OneOf:
    """One of ``choices``; refused with ``key`` (``name``, ``choices``)."""
    choices: Sequence[str]
    key: str

    def check(self, name: str, value) -> None:
        if value not in self.choices:
            raise TutorialError(self.key, name=value, choices=", ".join(self.choices))


@dataclass(frozen=True)
class Flag:
    def check(self, name: str, value) -> None:
        if not isinstance(value, bool):
            raise bad_value(name, value, "slurm.rule.choice", choices="True, False")


@dataclass(frozen=True)
class Each:
    """A tuple of values, each following ``rule`` (reported under ``item``, e.g. ``module``)."""
    rule: object
    item: str

    def check(self, name: str, value) -> None:
        for element in value:
            self.rule.check(self.item, element)


@dataclass(frozen=True)
class EnvPairs:
    """``(NAME, value)`` pairs: a variable name, and a value the script quotes (empty allowed)."""

    def check(self, name: str, value) -> None:
        for pair in value:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise bad_value(name, pair, "slurm.rule.env_name")
            key, text = pair
            if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
                raise bad_value(name, key, "slurm.rule.env_name")
            plain_text(key, text, empty=True)


@dataclass(frozen=True)
class Arguments:
    """A script's arguments: a tuple of texts, or one string split like a shell would (nothing expanded)."""

    def check(self, name: str, value) -> None:
        if isinstance(value, str):
            plain_text(name, value, empty=True)
        for arg in split_arguments(name, value):
            plain_text(name, arg, empty=True)


def split_arguments(name: str, value) -> tuple:
    """``value`` as a tuple of arguments (a string is split like a shell would, nothing expanded)."""
    if isinstance(value, str):
        try:
            return tuple(shlex.split(value))
        except ValueError as error:
            raise bad_value(name, value, "slurm.rule.split", detail=str(error)) from None
    return tuple(value)
