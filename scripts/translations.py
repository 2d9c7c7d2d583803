"""Which Turkish texts may be stale: the English each one translates, as a hash, in ``translations.lock.json``.

Every English text that has a Turkish twin is one *unit*: each ``=== md en`` block of
``notebooks/src/*.cells`` (twin: the ``=== md tr`` block before it), each ``⟪tr‖en⟫`` pair in a code
cell (its English half), each section (heading to heading) of a ``docs/**/*.md`` page that has a
``.tr.md`` twin and of README.md's English half, and each key of ``ddp_tutorial/messages/en.toml``.
The lock holds, per file, the sha256 of every unit's English text at the time its Turkish was last
confirmed. ``check`` lists every unit whose English hash is not in the lock (new, or edited since the
Turkish was confirmed): its Turkish twin must be read again. After a translator has updated the Turkish::

    python scripts/translations.py check      # what to re-read (exit 1 if anything)
    python scripts/translations.py confirm    # record the current English as translated
    python notebooks/build.py --confirm-translations   # the same as confirm

The cells and pages are hashed by content, not by position, so inserting a block flags only that block.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "translations.lock.json"
sys.path.insert(0, str(ROOT))
from ddp_tutorial.i18n import BILINGUAL  # noqa: E402 - the one marker regex (⟪Türkçe‖English⟫)
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+\S")


def sha(text: str) -> str:
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()


_BUILD: dict = {}  # notebooks/build.py, loaded once


def checked_source(path: Path) -> str:
    """The text of a .cells file, refused as ``notebooks/build.py`` refuses it (its own parser:
    ``file:line: what to fix`` for a file that is not UTF-8, empty, misnamed or malformed)."""
    if "build" not in _BUILD:
        spec = importlib.util.spec_from_file_location("notebook_build", ROOT / "notebooks" / "build.py")
        _BUILD["build"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_BUILD["build"])
    build = _BUILD["build"]
    build.parse(path)  # raises build.SourceError (a ValueError) with one clear line
    return build.read_source(path)


def cell_blocks(path: Path) -> list:
    """(kind, first line number, text) for every ``=== `` block of a .cells file."""
    blocks, kind, start, lines = [], None, 0, []
    for number, line in enumerate(checked_source(path).splitlines(), 1):
        if line.startswith("=== "):
            if kind is not None:
                blocks.append((kind, start, "\n".join(lines).strip("\n")))
            kind, start, lines = line[4:].strip(), number, []
        else:
            lines.append(line)
    if kind is not None:
        blocks.append((kind, start, "\n".join(lines).strip("\n")))
    return blocks


def md_pairs(path: Path) -> list:
    """(line of the Turkish block, Turkish text, English text) for every md tr/en pair of a .cells file."""
    blocks, pairs = cell_blocks(path), []
    for (kind, line, text), following in zip(blocks, blocks[1:] + [None]):
        if kind == "md tr" and following and following[0] == "md en":
            pairs.append((line, text, following[2]))
    return pairs


def sections(text: str) -> list:
    """The text split at its headings (outside code fences): [(heading line or '', section text)]."""
    parts, fenced = [("", [])], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        if not fenced and HEADING.match(line):
            parts.append((line.strip(), []))
        parts[-1][1].append(line)
    return [(head, "\n".join(body)) for head, body in parts if "\n".join(body).strip()]


def readme_halves() -> tuple:
    """README.md's Turkish and English halves (from '## Türkçe' and '## English' on)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    tr_at, en_at = text.find("\n## Türkçe"), text.find("\n## English")
    if tr_at < 0 or en_at < 0:
        return "", ""
    return (text[tr_at:en_at], text[en_at:]) if tr_at < en_at else (text[tr_at:], text[en_at:tr_at])


def preamble(text: str) -> str:
    """README.md's bilingual preamble (before '## Türkçe'): its English paragraph, the one that opens with
    '**Workshop:**' (its Turkish twin is the '**Atölye:**' paragraph above it)."""
    head = text.split("\n## Türkçe")[0]
    return next((p for p in head.split("\n\n") if p.startswith("**Workshop:**")), "")


#: Bilingual pages outside docs/ whose two languages sit side by side: every section is a unit (its
#: Turkish is in the same section), so an edit of either language flags that section.
INTERLEAVED = ("slurm/README.md",)
#: English pages under docs/ that need no .tr.md twin (bilingual within the page).
NO_TWIN = {"docs/reliability.md"}


def missing_twins(root: Path = ROOT) -> list:
    """Every docs page that has lost its twin: an English page without .tr.md (NO_TWIN aside), a .tr.md
    without its English."""
    pages = sorted((root / "docs").rglob("*.md"))
    names = {str(p.relative_to(root)) for p in pages}
    problems = []
    for name in sorted(names):
        twin = name[:-6] + ".md" if name.endswith(".tr.md") else name[:-3] + ".tr.md"
        if twin not in names and name not in NO_TWIN:
            problems.append(f"{name}: its twin {twin} is missing (restore it: git checkout -- {twin})")
    return problems


#: Words a tr.toml value may share with its English (names, terms the glossary keeps in English).
SAME_WORDS = {"python", "torch", "optimizer", "adam", "sgd", "rank", "epoch", "batch", "gloo", "nccl", "cpu",
              "cuda", "mnist", "fashion", "ddp", "slurm", "usage", "seed", "torchrun"}


def _same_in_both(value: str) -> bool:
    rest = re.sub(r"\{[^}]*\}|--[\w-]+", " ", value)
    return all(word.lower() in SAME_WORDS for word in re.findall(r"[A-Za-z]{3,}", rest))


def untranslated(english: dict, turkish: dict) -> list:
    """Keys whose Turkish is a copy of the English (a tr.toml message replaced by its English text)."""
    return [f"ddp_tutorial/messages/tr.toml: [{key}] is the English text ({value[:60]!r}): translate it"
            for key, value in sorted(english.items()) if turkish.get(key) == value and not _same_in_both(value)]


ENGLISH_WORD = re.compile(r"\b(?:the|is|are|of|and|to|with|not|all|on|at|for|from|was|has|no|yes)\b", re.I)
LITERAL = re.compile(r"""(?<![\w⟪‖])[rfb]?("[^"\n]*"|'[^'\n]*')""")


def english_in_code(text: str) -> list:
    """(line, literal) for every string literal of a code cell outside ⟪tr‖en⟫ that reads as English
    (a printed sentence; not a command line or an option); a line ending in '# same in both languages'
    is allowed."""
    bare = BILINGUAL.sub(lambda m: "\n" * m.group(0).count("\n"), text)  # line numbers kept
    found = []
    for number, line in enumerate(bare.splitlines(), 1):
        if line.rstrip().endswith("# same in both languages") or line.lstrip().startswith("#"):
            continue
        for m in LITERAL.finditer(line):
            body = m.group(1)[1:-1]
            if body.lstrip().startswith(("-", "ddp-tutorial ", "python ", "torchrun ", "srun ", "sbatch ")):
                continue
            if ENGLISH_WORD.search(body) and len(re.findall(r"[A-Za-z]{2,}", body)) >= 3:
                found.append((number, m.group(1)))
    return found


def english_in_cells() -> list:
    problems = []
    for path in sorted((ROOT / "notebooks" / "src").glob("*.cells")):
        for kind, start, text in cell_blocks(path):
            if kind.startswith("code") or kind.startswith("exercise"):
                problems += [f"{path.relative_to(ROOT)}:{start + n}: {lit[:60]} is English in the Turkish notebook "
                             f"too: write ⟪\"Türkçe\"‖\"English\"⟫" for n, lit in english_in_code(text)]
    return problems


def page_pairs() -> list:
    """(English page, Turkish page) for every docs page with a .tr.md twin (either may be missing)."""
    pages = {p for p in (ROOT / "docs").rglob("*.md")}
    english = {p for p in pages if not p.name.endswith(".tr.md")}
    turkish = {p for p in pages if p.name.endswith(".tr.md")}
    pairs = {(p, p.with_name(p.name[:-3] + ".tr.md")) for p in english
             if p.with_name(p.name[:-3] + ".tr.md") in turkish}
    pairs |= {(p.with_name(p.name[:-6] + ".md"), p) for p in turkish}
    return sorted(pairs)


def units() -> dict:
    """{file (relative): [(unit id, English text)]} for every English text that has a Turkish twin."""
    found = {}
    for path in sorted((ROOT / "notebooks" / "src").glob("*.cells")):
        rel = str(path.relative_to(ROOT))
        items = [(f"md block at line {line} ('=== md tr'): {en.splitlines()[0][:60] if en else ''}", en)
                 for line, _tr, en in md_pairs(path)]
        for kind, line, text in cell_blocks(path):
            if not kind.startswith("md"):
                items += [(f"⟪…‖{m.group(2)[:50]}⟫ in the code block at line {line}", m.group(2))
                          for m in BILINGUAL.finditer(text)]
        found[rel] = items
    # ⟪tr‖en⟫ comments outside the notebooks: the exercises' solutions and the sbatch templates
    outside = [*sorted((ROOT / "ddp_tutorial" / "exercises").glob("*.py")), *sorted((ROOT / "slurm").glob("*.sbatch"))]
    for path in outside:
        text = path.read_text(encoding="utf-8")
        items = [(f"⟪…‖{m.group(2)[:50]}⟫ at line {text.count(chr(10), 0, m.start()) + 1}", m.group(2))
                 for m in BILINGUAL.finditer(text)]
        if items:
            found[str(path.relative_to(ROOT))] = items
    for english, turkish in page_pairs():
        if english.exists() and turkish.exists():
            found[str(english.relative_to(ROOT))] = [
                (f"section {head or '(before the first heading)'} — twin in {turkish.relative_to(ROOT)}", body)
                for head, body in sections(english.read_text(encoding="utf-8"))]
    _tr_half, en_half = readme_halves()
    found["README.md"] = [(f"English half, section {head} — twin in the Turkish half", body)
                          for head, body in sections(en_half)]
    found["README.md"].append(("preamble, the **Workshop:** paragraph — twin: the **Atölye:** paragraph",
                               preamble((ROOT / "README.md").read_text(encoding="utf-8"))))
    for rel in (rel for rel in INTERLEAVED if (ROOT / rel).is_file()):
        found[rel] = [(f"section {head or '(before the first heading)'} — its Turkish is in the same section", body)
                      for head, body in sections((ROOT / rel).read_text(encoding="utf-8"))]
    from ddp_tutorial import i18n
    found["ddp_tutorial/messages/en.toml"] = [(f"[{key}] — twin in tr.toml", value)
                                              for key, value in sorted(i18n.messages("en").items())]
    return found


def current() -> dict:
    return {rel: {sha(text): label[:90] for label, text in items} for rel, items in units().items()}


def stale(lock: dict | None = None) -> list:
    """'file: unit — what to do' for every English text whose hash is not in the lock."""
    if lock is None:
        try:
            lock = json.loads(LOCK.read_text(encoding="utf-8")) if LOCK.exists() else {}
        except ValueError as error:  # N03: a damaged lock is named (git checkout translations.lock.json restores it)
            raise ValueError(f"{LOCK.name}: {error}; restore it (git checkout {LOCK.name})") from None
    return [f"{rel}: {label[:90]} — the English is new or changed since its Turkish was confirmed: "
            f"update the Turkish twin, then run `python scripts/translations.py confirm`"
            for rel, items in units().items() for label, text in items if sha(text) not in lock.get(rel, {})]


def problems() -> list:
    """Everything ``check`` reports: stale Turkish, a lost twin page, a tr.toml copy of the English, English
    printed by a notebook's code outside ⟪tr‖en⟫."""
    from ddp_tutorial import i18n
    return [*stale(), *missing_twins(), *untranslated(i18n.messages("en"), i18n.messages("tr")),
            *english_in_cells()]


def confirm() -> None:
    LOCK.write_text(json.dumps(current(), ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def main(argv: list) -> int:
    try:
        return _main(argv)
    except ValueError as error:  # a malformed notebook source: one line, file:line: what to fix
        print(f"{error} (nothing written)", file=sys.stderr)
        return 2


def _main(argv: list) -> int:
    command = argv[0] if argv else "check"
    if command == "confirm":
        confirm()
        print(f"wrote {LOCK.relative_to(ROOT)}")
        return 0
    if command == "check":
        found = problems()
        print("\n".join(found) if found else "every Turkish text is confirmed against its English")
        return 1 if found else 0
    print("usage: python scripts/translations.py check|confirm", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
