"""argparse in the user's language: help, usage and usage errors under ``DDP_TUTORIAL_LANG=tr``.

Used by every entry point (``ddp-tutorial``, ``python -m ddp_tutorial.train``, ``python -m
ddp_tutorial.spawn``). No torch import.
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Iterator

from .i18n import t

# argparse's own words (it translates them through gettext) → our catalogue's keys.
ARGPARSE_WORDS = {
    "usage: ": "cli.argparse.usage",
    "positional arguments": "cli.argparse.positionals",
    "options": "cli.argparse.options",
    "show this help message and exit": "cli.argparse.help",
    "the following arguments are required: %s": "cli.argparse.required",
    "invalid %(type)s value: %(value)r": "cli.argparse.invalid_type",
    "invalid choice: %(value)r (choose from %(choices)s)": "cli.argparse.invalid_choice",
    "unrecognized arguments: %s": "cli.argparse.unrecognized",
    "argument %(argument_name)s: %(message)s": "cli.argparse.argument",
    "%(prog)s: error: %(message)s\n": "cli.argparse.error",
    "expected one argument": "cli.argparse.expected_one",
    "expected at most one argument": "cli.argparse.expected_at_most_one",
    "expected at least one argument": "cli.argparse.expected_at_least_one",
    "expected %s argument": "cli.argparse.expected_n",
    "expected %s arguments": "cli.argparse.expected_n",
    "ambiguous option: %(option)s could match %(matches)s": "cli.argparse.ambiguous",
    "not allowed with argument %s": "cli.argparse.not_allowed",
    "one of the arguments %s is required": "cli.argparse.one_required",
    "ignored explicit argument %r": "cli.argparse.ignored",
    "can't open '%(filename)s': %(error)s": "cli.argparse.cant_open",
}


def _gettext(message: str) -> str:
    key = ARGPARSE_WORDS.get(message)
    return t(key) if key else message


def _ngettext(singular: str, plural: str, n: int) -> str:
    return _gettext(singular if n == 1 else plural)


@contextlib.contextmanager
def argparse_in_user_language() -> Iterator[None]:
    """While parsers are built and arguments parsed, argparse speaks the user's language.

    argparse looks its words up through the module-level names ``_`` and ``ngettext`` (gettext);
    they are swapped for catalogue lookups here and put back afterwards, so other argparse users in
    the same process are untouched.
    """
    saved = argparse._, argparse.ngettext
    argparse._, argparse.ngettext = _gettext, _ngettext
    try:
        yield
    finally:
        argparse._, argparse.ngettext = saved
