"""Which stored notebook outputs show a message the current catalogue no longer prints.

A line of a stored output that carries a piece of one of the package's messages must be that
message as the current catalogue (``ddp_tutorial/messages/*.toml``) writes it. When a message is
reworded, or its numbers are written the Turkish way, every notebook that still shows the old
wording is stale: :func:`stale_notebooks` names them, ``tests/test_notebooks_fresh.py`` fails on
them, and ``python notebooks/build.py --execute --stale`` re-executes just those, in just the
languages that are stale.
"""

from __future__ import annotations

import re
import string
from functools import lru_cache
from pathlib import Path

from ddp_tutorial import i18n

LANGUAGES = ("tr", "en")
MIN_ANCHOR = 16  # a literal piece this long is specific enough to say "this line is that message"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# A line of a rendered job script (its comments are English, as the script files in slurm/ are).
SCRIPT_LINE = re.compile(r"^\s*(#|[A-Za-z_][A-Za-z0-9_]*=|export\s)")
NUMBER = {"tr": r"-?(?:\d{1,3}(?:\.\d{3})+|\d+)(?:,\d+)?",   # 1.234,5 · 0,4568 · 29374
          "en": r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"}   # 1,234.5 · 0.4568
# Notebooks that must run somewhere special to store real outputs: the build's extra option.
RUNS_ON = {"05": "--slurmlab"}  # 05 submits its jobs to the test suite's SLURM cluster (root)


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
    """The lines of ``text`` (one output of a ``lang`` notebook) that show a message other than the
    catalogue writes it now: reworded since, two processes' lines glued together, or (Turkish) English."""
    stale = []
    for line in ANSI.sub("", text).splitlines():
        found = [(anchor, regexes) for anchor, regexes in patterns(lang).items() if anchor in line]
        if found:
            glued = any(line.count(anchor) > 1 for anchor, _ in found)
            if glued or not any(r.search(line) for _, regexes in found for r in regexes):
                stale.append(line.strip())
        elif lang == "tr" and not SCRIPT_LINE.match(line) and any(a in line for a in english_only()):
            stale.append(line.strip() + "   ← English package text in a Turkish notebook")
    return stale


def outputs(nb):
    """(cell index, text) for every stored text output of ``nb``."""
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                yield i, out.text
            elif out.output_type == "error":
                yield i, "\n".join([f"{out.ename}: {out.evalue}", *out.traceback])
            elif "text/plain" in out.get("data", {}):
                yield i, out.data["text/plain"]


def stale_cells(path: Path, lang: str) -> list:
    """``cell N: line`` for every stale line of the notebook at ``path``."""
    import nbformat  # here, not at the top: build.py says a malformed source before anything imports it (1 s)
    nb = nbformat.read(path, as_version=4)
    return [f"cell {i}: {line}" for i, text in outputs(nb) for line in stale_lines(text, lang)]


def stale_notebooks(folder: Path, only: tuple = ()) -> dict:
    """{(stem, lang): [stale lines]} for the stored notebooks under ``folder/tr`` and ``folder/en``
    (only the names starting with one of ``only``, when given) that show an old message."""
    found = {}
    for lang in LANGUAGES:
        for path in sorted((folder / lang).glob("*.ipynb")):
            if only and not path.name.startswith(tuple(only)):
                continue
            if lines := stale_cells(path, lang):
                found[(path.stem, lang)] = lines
    return found


def rerun_command(stale) -> str:
    """The one command that re-executes just the stale notebooks (05 on the SLURM lab, which needs root)."""
    lab = sorted({RUNS_ON[stem[:2]] for stem, _ in stale if stem[:2] in RUNS_ON})
    return " ".join(["python notebooks/build.py --execute --stale", *lab])
