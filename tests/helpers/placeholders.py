"""The placeholder rule of the style sheet, read from its table (docs/style.tr.md, "Kodda yer tutucular").

A placeholder (a word in capitals the reader replaces) is written in the page's language, in code too:
``KULLANICI`` on a Turkish page where the English twin writes ``USER``. :func:`to_english` maps a Turkish
line's placeholders to English, so a Turkish code block can be compared with its twin; :func:`foreign`
finds the other language's placeholders on a page.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

STYLE = Path(__file__).resolve().parents[2] / "docs" / "style.tr.md"
SECTION = "## Kodda yer tutucular"


@lru_cache(maxsize=None)
def pairs() -> tuple:
    """((english, turkish), …) from the table of the style sheet's placeholder section."""
    text = STYLE.read_text(encoding="utf-8")
    section = text[text.index(SECTION):].split("\n## ", 1)[0]
    rows = [re.findall(r"`([^`]+)`", line) for line in section.splitlines() if line.startswith("| `")]
    return tuple((row[0], row[1]) for row in rows if len(row) == 2)


def _pattern(word: str) -> re.Pattern:
    """``word`` as a whole placeholder: not part of a longer name, not a shell variable (``$USER``)."""
    if word.startswith("/"):
        return re.compile(re.escape(word))
    return re.compile(r"(?<![\w${])" + re.escape(word) + r"(?![\w=])")


def to_english(line: str) -> str:
    """``line`` with every Turkish placeholder of the table written in English."""
    for english, turkish in pairs():
        line = _pattern(turkish).sub(english, line)
    return line


def foreign(text: str, lang: str) -> list:
    """``(line number, placeholder)`` for every placeholder of the other language in ``text``
    (a page in ``lang``)."""
    other = 0 if lang == "tr" else 1
    return [(number, pair[other]) for number, line in enumerate(text.splitlines(), 1)
            for pair in pairs() if _pattern(pair[other]).search(line)]
