"""Bilingual (Turkish / English) user-facing messages.

Every message a user can see lives in a catalogue as a pair of strings, one per
language. The language comes from the environment variable ``DDP_TUTORIAL_LANG``
(``tr`` or ``en``; English when unset or unknown), so the same job prints Turkish
for a Turkish workshop and English elsewhere.

Each module registers the messages it owns with :func:`register`, keeping the
text next to the code that uses it::

    register({"data.missing": {"en": "No data in {root}.", "tr": "{root} içinde veri yok."}})
    print(t("data.missing", root="/tmp"))

Errors a user can cause are raised as :class:`TutorialError`: its text is the
message in the user's language, and the command line prints it without a
traceback and exits with a non-zero code.
"""

from __future__ import annotations

import os
from typing import Dict, Mapping

LANGUAGES = ("en", "tr")
DEFAULT_LANGUAGE = "en"
LANG_VARIABLE = "DDP_TUTORIAL_LANG"

_CATALOGUE: Dict[str, Dict[str, str]] = {}


def language() -> str:
    """The language chosen by ``DDP_TUTORIAL_LANG`` (``en`` when unset or unknown)."""
    value = os.environ.get(LANG_VARIABLE, DEFAULT_LANGUAGE).strip().lower()
    # Accept locale-like values such as "tr_TR.UTF-8".
    value = value.split("_")[0].split(".")[0].split("-")[0]
    return value if value in LANGUAGES else DEFAULT_LANGUAGE


def register(messages: Mapping[str, Mapping[str, str]]) -> None:
    """Add messages to the catalogue; every message needs both languages."""
    for key, texts in messages.items():
        missing = [lang for lang in LANGUAGES if not texts.get(lang)]
        if missing:
            raise ValueError(f"message {key!r} lacks {missing}")
        if key in _CATALOGUE and dict(texts) != _CATALOGUE[key]:
            raise ValueError(f"message {key!r} registered twice with different texts")
        _CATALOGUE[key] = dict(texts)


def t(key: str, lang: str | None = None, **fields: object) -> str:
    """The message ``key`` in ``lang`` (default: :func:`language`), formatted with ``fields``."""
    texts = _CATALOGUE[key]
    return texts[lang or language()].format(**fields)


def catalogue() -> Dict[str, Dict[str, str]]:
    """A copy of every registered message (used by the parity tests)."""
    return {key: dict(texts) for key, texts in _CATALOGUE.items()}


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


register(
    {
        "error.prefix": {"en": "error", "tr": "hata"},
    }
)
