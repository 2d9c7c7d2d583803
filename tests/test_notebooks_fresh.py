"""Stored notebook outputs come from the current code.

A line of a stored output that carries a piece of one of the package's messages must be that
message as the current catalogue writes it: when a message is reworded (or its numbers are written
the Turkish way), a notebook that still shows the old wording fails here until it is re-executed
(``python notebooks/build.py --execute NN``). Stored tracebacks must not show the package's own
frames (their line numbers go stale with every edit, and an attendee needs their cell, not ours).
"""

from __future__ import annotations

import re
import string
from functools import lru_cache
from pathlib import Path

import nbformat
import pytest

from ddp_tutorial import i18n

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = sorted(p.name for p in (NOTEBOOKS / "en").glob("*.ipynb"))
MIN_ANCHOR = 16  # a literal piece this long is specific enough to say "this line is that message"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# A line of a rendered job script (its comments are English, as the script files in slurm/ are).
SCRIPT_LINE = re.compile(r"^\s*(#|[A-Za-z_][A-Za-z0-9_]*=|export\s)")


NUMBER = {"tr": r"-?(?:\d{1,3}(?:\.\d{3})+|\d+)(?:,\d+)?",   # 1.234,5 · 0,4568 · 29374
          "en": r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"}   # 1,234.5 · 0.4568


def _field(spec: str, lang: str) -> str:
    """What a field may print: a number written the language's way for a number format, else anything."""
    return NUMBER[lang] if spec and spec[-1] in "fdeg%" else ".*?"


@lru_cache(maxsize=None)
def patterns(lang: str) -> dict:
    """{anchor: [regex, …]}: for every line of every message, its longest literal piece and a
    regex of the whole line (fields match anything)."""
    found: dict = {}
    for text in i18n.messages(lang).values():
        for line in text.splitlines():
            parsed = list(string.Formatter().parse(line))
            pieces = [literal for literal, *_ in parsed]
            anchor = re.sub(r"^\W+|\W+$", "", max(pieces, key=len))  # its words, without the punctuation
            if len(anchor) < MIN_ANCHOR:
                continue
            regex = "".join(re.escape(literal) + (_field(spec, lang) if field is not None else "")
                            for literal, field, spec, _ in parsed)
            found.setdefault(anchor, []).append(re.compile(regex, re.S))
    return found


@lru_cache(maxsize=None)
def english_only() -> tuple:
    """Anchors of English messages that no Turkish message contains: package text in English."""
    turkish = "\n".join(i18n.messages("tr").values())
    return tuple(a for a in patterns("en") if a not in turkish)


def stale_lines(text: str, lang: str) -> list:
    stale = []
    for line in ANSI.sub("", text).splitlines():
        found = [(anchor, regexes) for anchor, regexes in patterns(lang).items() if anchor in line]
        if found:
            glued = any(line.count(anchor) > 1 for anchor, _ in found)
            if glued or not any(r.search(line) for _, regexes in found for r in regexes):
                stale.append(line.strip())  # reworded since, or two processes' lines glued together
        elif lang == "tr" and not SCRIPT_LINE.match(line) and any(a in line for a in english_only()):
            stale.append(line.strip() + "   ← English package text in a Turkish notebook")
    return stale


def outputs(nb):
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                yield i, out.text
            elif out.output_type == "error":
                yield i, "\n".join([f"{out.ename}: {out.evalue}", *out.traceback])
            elif "text/plain" in out.get("data", {}):
                yield i, out.data["text/plain"]


@pytest.mark.parametrize("lang", ["tr", "en"])
@pytest.mark.parametrize("name", NAMES)
def test_stored_outputs_say_what_the_catalogue_says_now(name, lang):
    nb = nbformat.read(NOTEBOOKS / lang / name, as_version=4)
    stale = [f"cell {i}: {line}" for i, text in outputs(nb) for line in stale_lines(text, lang)]
    assert not stale, (f"{lang}/{name} shows messages the current code no longer prints "
                       f"(re-run: python notebooks/build.py --execute {name[:2]}):\n" + "\n".join(stale[:10]))


@pytest.mark.parametrize("name", NAMES)
def test_stored_tracebacks_show_no_package_frames(name):
    for lang in ("tr", "en"):
        nb = nbformat.read(NOTEBOOKS / lang / name, as_version=4)
        for i, cell in enumerate(nb.cells):
            for out in cell.get("outputs", []):
                if out.output_type == "error":
                    frames = [f for f in out.traceback
                              if re.search(r"ddp_tutorial[/\\][a-z_/\\]+\.py", ANSI.sub("", f))]
                    assert not frames, f"{lang}/{name} cell {i}: a stored traceback shows package frames"


def test_the_check_catches_an_old_wording():
    """The check itself: yesterday's Turkish accuracy line (dot decimals, % after) is stale today."""
    line = i18n.t("train.accuracy", lang="tr", n=10000, acc=85.24)
    assert not stale_lines(line, "tr")
    old = "10000 test görüntüsünde ağın doğruluğu: 85.24 %"
    assert stale_lines(old, "tr") == [old]
    loss = i18n.t("train.rank_loss", lang="tr", rank=1, loss=78.771, epoch=0, steps=79)
    assert not stale_lines(loss, "tr") and stale_lines(loss.replace("78,7710", "78.7710"), "tr")
    assert stale_lines(loss + loss, "tr")  # two ranks' lines glued into one
    english = i18n.t("train.accuracy", lang="en", n=10000, acc=85.24)
    assert stale_lines(english, "tr") and not stale_lines(english, "en")
