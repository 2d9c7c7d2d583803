"""Bilingual (Turkish / English) user-facing messages.

Every message a user can see lives in ``ddp_tutorial/messages/<language>.toml``, one file per
language, one section per area (``[train]``, ``[slurm]`` …; an exercise's texts in a sub-table
such as ``[ex.lr_for]``, keys ``ex.lr_for.hint1`` …), so a translator edits text, never Python.
The code names a message by its literal key (``t("train.accuracy", acc=92.8)``), so ``grep``
finds every use (an exercise's standard texts are listed by ``Exercise.message_keys()``). The
language comes from ``DDP_TUTORIAL_LANG`` (``tr`` or ``en``; English when unset or unknown).

Errors a user can cause are raised as :class:`TutorialError`: its text is the message in the
user's language; the command line prints it without a traceback and exits with code 2.
"""

from __future__ import annotations

import functools
import os
import re
import string
import sys
from importlib import resources
from typing import Dict

import tomllib

LANGUAGES = ("en", "tr")
DEFAULT_LANGUAGE = "en"
LANG_VARIABLE = "DDP_TUTORIAL_LANG"


def language() -> str:
    """The language chosen by ``DDP_TUTORIAL_LANG`` (``en`` when unset or unknown)."""
    value = os.environ.get(LANG_VARIABLE, DEFAULT_LANGUAGE).strip().lower()
    value = value.split("_")[0].split(".")[0].split("-")[0]  # "tr_TR.UTF-8" → "tr"
    if value == "tr" and not _streams_can_write("ığşİ"):  # I01/I02: a C or Latin-1 terminal would show \u0131
        return DEFAULT_LANGUAGE
    return value if value in LANGUAGES else DEFAULT_LANGUAGE


def _streams_can_write(letters: str) -> bool:
    """Whether stdout and stderr can write ``letters`` (an ASCII or Latin-1 terminal cannot write ı, ğ, ş)."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        if not encoding:
            continue
        try:
            letters.encode(encoding)
        except (UnicodeEncodeError, LookupError):
            return False
    return True


@functools.lru_cache(maxsize=None)
def messages(lang: str) -> Dict[str, str]:
    """Every message of one language, by key, read from its TOML file: ``area.name`` for a message of
    ``[area]``, ``area.table.name`` for one of a sub-table such as ``[ex.shard_indices]``."""
    text = resources.files("ddp_tutorial").joinpath("messages", f"{lang}.toml").read_text("utf-8")
    try:
        return _flatten(tomllib.loads(text))
    except tomllib.TOMLDecodeError as error:  # N04: the damaged file is named
        raise ValueError(f"ddp_tutorial/messages/{lang}.toml: {error}") from None


def _flatten(table: dict, prefix: str = "") -> Dict[str, str]:
    """``{"ex": {"title": …, "lr_for": {"hint1": …}}}`` → ``{"ex.title": …, "ex.lr_for.hint1": …}``."""
    flat: Dict[str, str] = {}
    for name, value in table.items():
        key = prefix + name
        if isinstance(value, dict):
            flat.update(_flatten(value, key + "."))
        else:
            flat[key] = value
    return flat


class _LocalNumbers(string.Formatter):
    """``str.format`` that writes numbers the Turkish way: decimal comma, dot between thousands
    (``{loss:.4f}`` → 0,4567; ``{rate:.0f}`` of 12345.0 → 12.345: a float from 10 000 on is grouped,
    as :func:`number` groups it, so both catalogues use the same specs). Ints (ports, ids, options as
    typed) and text fields are left as they are; a :class:`Count` is grouped like a float."""

    def format_field(self, value, format_spec):
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if isinstance(value, (float, Count)) and abs(value) >= 10_000:  # a measurement: 60.782 örnek/s, as number()
            format_spec = _grouped(format_spec)                 # writes it (ints can be ports, ids, options)
        text = super().format_field(value, format_spec)
        return _turkish_separators(text) if number else text


class Count(int):
    """An int that is a quantity (10.000 test görüntüsü), not a port or an id: Turkish messages group it
    from 10 000 on, as they group floats; in English it prints as a plain int, as the seed printed it."""


def _turkish_separators(text: str) -> str:
    """1,234.5 → 1.234,5."""
    return text.replace(",", "\0").replace(".", ",").replace("\0", ".")


_SPEC = re.compile(r"^(?P<head>(?:.?[<>=^])?[+\- ]?z?#?0?\d*)(?P<group>[,_]?)(?P<tail>(?:\.\d+)?[a-zA-Z%]?)$")


def _grouped(spec: str) -> str:
    """``spec`` with thousands grouping, where the spec has none and its type allows it."""
    m = _SPEC.match(spec)
    if not m or m["group"] or m["tail"][-1:] not in ("", "f", "F"):
        return spec
    return m["head"] + "," + m["tail"]


_TURKISH = _LocalNumbers()


def t(key: str, lang: str | None = None, **fields: object) -> str:
    """The message ``key`` in ``lang`` (default: :func:`language`), formatted with ``fields``;
    numbers are written the way the language writes them (0,5 and 1.234 in Turkish)."""
    lang = lang or language()
    text = messages(lang)[key]
    return _TURKISH.format(text, **fields) if lang == "tr" else text.format(**fields)


def catalogue() -> Dict[str, Dict[str, str]]:
    """Every message as ``{key: {language: text}}`` (used by the parity tests)."""
    by_lang = {lang: messages(lang) for lang in LANGUAGES}
    keys = set().union(*by_lang.values())
    return {key: {lang: by_lang[lang].get(key, "") for lang in LANGUAGES} for key in sorted(keys)}


class TutorialError(Exception):
    """An error the user can fix; its text says what was wrong and what to do.

    ``exit_code`` is what the command line exits with (2: bad input, the usual
    convention of argparse and most Unix tools).
    """

    exit_code = 2

    def __init__(self, key: str, **fields: object):
        self.key = key
        self.fields = fields
        super().__init__(t(key, **fields))

    def text(self, lang: str | None = None) -> str:
        return t(self.key, lang=lang, **self.fields)


def number(value: float, lang: str | None = None, decimals: int | None = None) -> str:
    """``value`` written the way the language writes numbers: 604.800 and 0,5 in Turkish,
    604,800 and 0.5 in English (thousands grouped from 10 000 on)."""
    lang = lang or language()
    if decimals is None:
        text = f"{value:,}" if float(value).is_integer() and abs(value) < 1e15 else f"{value:,.6g}"
        if float(value).is_integer():
            text = f"{int(value):,}"
    else:
        text = f"{value:,.{decimals}f}"
    if abs(value) < 10_000:
        text = text.replace(",", "")
    return _turkish_separators(text) if lang == "tr" else text


def percent(value: float, decimals: int = 2, lang: str | None = None) -> str:
    """A percentage the way the language writes it: ``%85,24`` in Turkish, ``85.24 %`` in English."""
    lang = lang or language()
    text = number(value, lang, decimals)
    return f"%{text}" if lang == "tr" else f"{text} %"


def yes_no(flag: object, lang: str | None = None) -> str:
    """A check's answer in words: ``evet`` / ``hayır`` in Turkish, ``yes`` / ``no`` in English, where
    ``print`` would write Python's ``True`` / ``False``. ``flag`` is read with ``bool()``, so a numpy or
    one-element torch boolean works too."""
    return t("answer.yes", lang) if bool(flag) else t("answer.no", lang)


def localise_axes(fig, lang: str | None = None):
    """Give every axis of the matplotlib figure ``fig`` tick labels written the language's way
    (0,5 and 60.000 in Turkish); English keeps matplotlib's own. The one place figures localise
    their numbers: every figure the package or a notebook draws passes through it."""
    if (lang or language()) != "tr":
        return fig
    from matplotlib.ticker import FuncFormatter, ScalarFormatter

    def tick(value, _position=None):
        return number(round(value, 6), lang="tr")

    for ax in fig.get_axes():
        for axis in (ax.xaxis, ax.yaxis):
            if isinstance(axis.get_major_formatter(), ScalarFormatter):  # names and dates stay
                axis.set_major_formatter(FuncFormatter(tick))
    return fig


def decimal_number(text: str) -> float:
    """argparse ``type`` for a float option: ``0,001`` gets a message (in the user's language)
    saying to write a dot (``0.001``), not argparse's bare "invalid float value"."""
    import argparse

    try:
        return float(text)
    except ValueError:
        if "," in text:
            raise argparse.ArgumentTypeError(t("cli.decimal_comma", value=text,
                                               fixed=text.replace(",", "."))) from None
        raise argparse.ArgumentTypeError(t("cli.not_a_number", value=text)) from None


def whole_number(text: str) -> int:
    """argparse ``type`` for an int option: ``x`` gets a message in the user's language, not argparse's
    "invalid int value" (a Python type name)."""
    import argparse

    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(t("cli.not_an_integer", value=text)) from None


#: The placeholders of the options' help (their metavars) → the catalogue's keys: the Turkish help writes
#: ``--script YOL`` beside the Turkish words that explain it (docs/style.tr.md, placeholders).
METAVARS = {
    "PATH": "cli.metavar.path",
    "DIR": "cli.metavar.dir",
    "FILE": "cli.metavar.file",
    "SECONDS": "cli.metavar.seconds",
    "NAME=VALUE": "cli.metavar.name_value",
    "ARGS": "cli.metavar.args",
    "MODULE": "cli.metavar.module",
}


def metavar(word: str) -> str:
    """argparse ``metavar``: an option's placeholder in the user's language (``PATH`` → ``YOL`` under tr);
    quotes around it stay."""
    bare = word.strip('"')
    return word.replace(bare, t(METAVARS[bare])) if bare in METAVARS else word


BILINGUAL = re.compile(r"⟪([^⟪⟫‖]*)‖([^⟪⟫‖]*)⟫")
"""``⟪Türkçe‖English⟫`` in code (a comment, a docstring, a printed text): one text per language."""


def localize_code(code: str, lang: str | None = None) -> str:
    """``code`` in one language: every ``⟪tr‖en⟫`` becomes its ``lang`` part (default: :func:`language`).
    The notebooks' code cells (notebooks/build.py) and the exercises' solutions are written this way.
    A stray or unbalanced marker raises ``ValueError``."""
    lang = lang or language()
    code = BILINGUAL.sub(lambda m: m.group(1 if lang == "tr" else 2), code)
    if "⟪" in code or "⟫" in code or "‖" in code:
        raise ValueError(f"an unbalanced ⟪…‖…⟫ in a code cell:\n{code}")
    return code
