"""Guards that keep the two languages current (issue 28).

1. every Turkish text is confirmed against the English it translates (``translations.lock.json``,
   ``scripts/translations.py``): an edited English block flags exactly its Turkish twin;
2. markdown structure parity per tr/en pair (the .cells md blocks, docs/**/*.tr.md pages and their English
   twins, README.md's two halves): headings, list items, tables, code fences, link targets;
3. every code comment in a .cells code cell is bilingual (⟪tr‖en⟫) or language-neutral;
4. messages: the same format fields, conversions and specs in en.toml and tr.toml for every key.
Each test collects every failure and reports them all at once.
"""

import io
import re
import runpy
import string
import tokenize
from pathlib import Path

import placeholders  # tests/helpers: the style sheet's placeholder table
import pytest

from ddp_tutorial import i18n

ROOT = Path(__file__).resolve().parent.parent
T = runpy.run_path(str(ROOT / "scripts" / "translations.py"))
SOURCES = sorted((ROOT / "notebooks" / "src").glob("*.cells"))
BILINGUAL = T["BILINGUAL"]


def report(problems):
    assert not problems, f"{len(problems)} problem(s):\n  " + "\n  ".join(problems)


# 1 ── freshness ──────────────────────────────────────────────────────────────────────────────

def test_every_turkish_text_is_confirmed_against_its_english():
    """Fails for every English text changed or added since its Turkish twin was confirmed. Update the
    Turkish, then `python notebooks/build.py --confirm-translations`."""
    assert T["LOCK"].exists(), "translations.lock.json is missing: run python notebooks/build.py --confirm-translations"
    report(T["stale"]())


def test_an_edited_english_block_flags_exactly_its_twin():
    lock = T["current"]()
    assert T["stale"](lock) == []
    rel = "notebooks/src/" + SOURCES[0].name
    dropped = next(iter(lock[rel]))  # as if the first English block had been edited since
    label = lock[rel].pop(dropped)
    flagged = T["stale"](lock)
    assert len(flagged) == 1 and flagged[0].startswith(f"{rel}: {label}") and "confirm" in flagged[0]


def test_solution_and_sbatch_comments_are_guarded_too():
    """The ⟪tr‖en⟫ comments of the exercises' solutions and of the sbatch templates are units of the
    lock: an edited English half flags its Turkish one (it did not before: only .cells, docs, en.toml)."""
    lock = T["current"]()
    for rel in ("ddp_tutorial/exercises/cluster.py", "slurm/torchrun.sbatch"):
        assert lock.get(rel), f"no ⟪tr‖en⟫ comment of {rel} is guarded"
        dropped = next(iter(lock[rel]))
        label = lock[rel].pop(dropped)
        flagged = T["stale"](lock)
        assert len(flagged) == 1 and flagged[0].startswith(f"{rel}: {label}"), flagged
        lock[rel][dropped] = label


# 2 and 5 ── markdown structure parity ─────────────────────────────────────────────────────────

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _target(url):
    url = url.split("#", 1)[0]
    url = re.sub(r"\.tr\.md$", ".md", url)
    return re.sub(r"(^|/)tr(/|$)", r"\1en\2", url)  # notebooks/tr/… ↔ notebooks/en/…, workshop/tr/…


def _code(line):
    """A fenced code line without its comment (comments may differ by language), its placeholders in
    English (a Turkish page writes KULLANICI where its twin writes USER: docs/style.tr.md)."""
    line = re.sub(r"(^|/)tr(/|\s|$)", r"\1en\2", BILINGUAL.sub(r"\2", line))  # workshop/tr ↔ workshop/en
    line = placeholders.to_english(line)
    return re.sub(r"(^|\s)(#|//).*$", "", line).rstrip()


def structure(text):
    """What must match between a Turkish text and its English twin."""
    s = {"headings": [], "list items": 0, "tables": [], "code fences": [], "links": []}
    fence, code, table = None, [], []
    for line in text.splitlines() + [""]:
        m = T["FENCE"].match(line)
        if fence is not None:
            if m and line.strip().startswith(fence):
                if code[0] == "text":  # program output: printed in the page's language, so its lines are counted
                    code = ["text", f"{sum(1 for c in code[1:] if c)} lines"]
                s["code fences"].append("\n".join(c for c in code if c))
                fence, code = None, []
            else:
                code.append(_code(line))
            continue
        if m:
            fence, code = m.group(1), [line.strip()[3:].strip()]  # the info string (language) counts
            continue
        if line.lstrip().startswith("|"):
            table.append(line)
            continue
        if table:
            s["tables"].append(f"{len(table)} rows × {table[0].strip().strip('|').count('|') + 1} columns")
            table = []
        heading = T["HEADING"].match(line)
        if heading:
            s["headings"].append(len(heading.group(1)))
        elif re.match(r"^\s*([-*+]|\d+[.)])\s+\S", line):
            s["list items"] += 1
        s["links"] += [_target(u) for u in LINK.findall(line)]
    s["links"] = sorted(set(s["links"]) - {""})
    return s


def _first_difference(x, y):
    pairs = list(zip(x.splitlines() + ["<end>"], y.splitlines() + ["<end>"]))
    return next(f"{p!r} ≠ en {q!r}" for p, q in pairs if p != q)


def differences(tr, en):
    a, b = structure(tr), structure(en)
    out = []
    for key in a:
        if a[key] != b[key]:
            if key == "code fences":
                detail = next((f"fence {i + 1}: tr {_first_difference(x, y)}" for i, (x, y) in
                               enumerate(zip(a[key], b[key])) if x != y), f"tr {len(a[key])} ≠ en {len(b[key])}")
            elif key == "links":
                only_tr, only_en = sorted(set(a[key]) - set(b[key])), sorted(set(b[key]) - set(a[key]))
                detail = f"only in tr {only_tr}, only in en {only_en}"
            else:
                detail = f"tr {a[key]} ≠ en {b[key]}"
            out.append(f"{key}: {detail}")
    return out


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_markdown_blocks_have_the_structure_of_their_twin(source):
    report([f"{source.name} md block at line {line}: {d}"
            for line, tr, en in T["md_pairs"](source) for d in differences(tr, en)])


PAGES = T["page_pairs"]()


@pytest.mark.parametrize("pair", PAGES, ids=lambda p: str(p[1].relative_to(ROOT)))
def test_every_turkish_page_has_its_english_twin_with_the_same_structure(pair):
    english, turkish = pair
    assert english.exists() and turkish.exists(), (
        f"{turkish.relative_to(ROOT)} and {english.relative_to(ROOT)}: one is missing")
    report([f"{turkish.relative_to(ROOT)}: {d}" for d in
            differences(turkish.read_text(encoding="utf-8"), english.read_text(encoding="utf-8"))])


def test_readme_halves_have_the_same_structure():
    tr, en = T["readme_halves"]()
    assert tr and en, "README.md must have a '## Türkçe' and a '## English' half"
    report([f"README.md halves: {d}" for d in differences(tr, en)])


def test_every_docs_page_pair_is_checked():
    assert len(PAGES) >= 4 and any(p[1].parent.name == "instructor" for p in PAGES)


# 3 ── code comments ───────────────────────────────────────────────────────────────────────────

PRAGMA = re.compile(r"noqa(:\s*[A-Z0-9, ]+)?|NBVAL_\w+|type:\s*ignore(\[[\w, -]+\])?|pragma:?\s*no cover|fmt:\s*\w+")
CODELIKE = re.compile(r"`[^`]*`|\b\w*\d\w*\b|\b\w+(\.\w+|\(\)?|_\w+|=\S*)+|--?[\w-]+|\b[A-Z][A-Z0-9_]+\b"
                      r"|[\d.,:%×/+-]+\w*")
WORD = re.compile(r"[^\W\d_]{2,}")


def comments(code):
    lines = ["pass" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines()]
    tokens = tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline)
    return [(tok.start[0], tok.string) for tok in tokens if tok.type == tokenize.COMMENT]


def neutral(comment):
    rest = CODELIKE.sub(" ", PRAGMA.sub(" ", comment.lstrip("#")))
    return not WORD.search(rest)


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_code_comments_are_bilingual_or_language_neutral(source):
    problems = []
    for kind, start, text in T["cell_blocks"](source):
        if kind.startswith("md"):
            continue
        tr = comments(BILINGUAL.sub(r"\1", text))
        en = comments(BILINGUAL.sub(r"\2", text))
        for (line, a), (_, b) in zip(tr, en):
            if a == b and not neutral(a):
                problems.append(f"{source.name}:{start + line}: {a[:80]!r} is in one language: "
                                "write # ⟪Türkçe‖English⟫")
    report(problems)


def test_the_structure_sees_links_lists_tables_and_fences():
    text = "# A\n\n- x [a](docs/truba.md#b)\n1. y\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```bash\nls  # list\n```\n"
    s = structure(text)
    assert s == {"headings": [1], "list items": 2, "tables": ["3 rows × 2 columns"],
                 "code fences": ["bash\nls"], "links": ["docs/truba.md"]}
    assert differences(text.replace("truba.md", "truba.tr.md").replace("# list", "# liste"), text) == []
    assert differences(text.replace("- x", "x"), text) == ["list items: tr 1 ≠ en 2"]


def test_the_comment_rule_tells_neutral_from_worded():
    assert neutral("# noqa: E402") and neutral("# NBVAL_IGNORE_OUTPUT") and neutral("# 60_000 / 2")
    assert not neutral("# the gradient") and not neutral("# gradyan")


# 4 ── message format fields and specs ────────────────────────────────────────────────────────

def fields(text):
    return sorted((name, conversion or "", spec or "") for _, name, spec, conversion in string.Formatter().parse(text)
                  if name is not None)


def test_messages_have_the_same_format_fields_and_specs():
    en, tr = i18n.messages("en"), i18n.messages("tr")
    problems = [f"[{key}] only in {'en' if key in en else 'tr'}.toml" for key in sorted(set(en) ^ set(tr))]
    for key in sorted(set(en) & set(tr)):
        try:
            a, b = fields(en[key]), fields(tr[key])
        except ValueError as error:
            problems.append(f"[{key}]: not a valid format string: {error}")
            continue
        if a != b:
            problems.append(f"[{key}]: en {{name, conversion, spec}} {a} ≠ tr {b}")
    report(problems)


# 5 ── the five kinds of change issue 37 found unguarded ─────────────────────────────────────────

def test_the_new_guards_hold_on_this_checkout():
    """No lost twin page, no tr.toml message that is its English, no English printed by a notebook's code."""
    report([*T["missing_twins"](), *T["untranslated"](i18n.messages("en"), i18n.messages("tr")),
            *T["english_in_cells"]()])


def test_the_preamble_and_slurm_readme_are_under_the_lock():
    """(a) An edit of README's bilingual preamble, or of a sentence of slurm/README.md, is a new hash."""
    import json

    lock = json.loads(T["LOCK"].read_text(encoding="utf-8"))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert T["sha"](T["preamble"](readme)) in lock["README.md"]
    edited = readme.replace("The printed URL opens\n00_setup.", "The printed URL opens\n03_collectives.")
    assert edited != readme and T["sha"](T["preamble"](edited)) not in lock["README.md"]
    page = (ROOT / "slurm" / "README.md").read_text(encoding="utf-8")
    hashes = {T["sha"](body) for _, body in T["sections"](page)}
    assert hashes <= set(lock["slurm/README.md"])
    changed = {T["sha"](body) for _, body in T["sections"](page.replace("Every script sets", "Each script sets"))}
    assert changed - set(lock["slurm/README.md"]), "an edited slurm/README.md section went unnoticed"


def test_a_turkish_message_replaced_by_its_english_is_caught():
    """(b) tr.toml's value equal to the English is named; terms the same in both languages are not."""
    english, turkish = i18n.messages("en"), dict(i18n.messages("tr"))
    turkish["train.epoch_summary"] = english["train.epoch_summary"]
    found = T["untranslated"](english, turkish)
    assert len(found) == 1 and "[train.epoch_summary]" in found[0], found
    same = {"a": "rank", "b": "torch {version}: {build}"}
    assert not T["untranslated"](same, dict(same))


def test_an_english_print_in_a_code_cell_is_caught():
    """(c) A print of an English sentence outside ⟪tr‖en⟫ is named with its line; the bilingual form,
    a command line and a comment are not."""
    code = 'x = 1\nprint("all ranks agree:", True)\n'
    assert T["english_in_code"](code) == [(2, '"all ranks agree:"')]
    fine = ('print(⟪"tüm rank\'ler aynı:"‖"all ranks agree:"⟫, True)\nrun("--nproc-per-node")\n'
            '# the comment of the cell\nprint(⟪"iki satırlık\n bir metin"‖"a text on\n two lines for the check"⟫)\n')
    assert T["english_in_code"](fine) == []


def test_a_deleted_turkish_page_is_caught(tmp_path):
    """(d) Deleting docs/truba.tr.md (a copy of docs/) is named, not silently one pair fewer."""
    import shutil

    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    assert T["missing_twins"](tmp_path) == []
    (tmp_path / "docs" / "truba.tr.md").unlink()
    found = T["missing_twins"](tmp_path)
    assert len(found) == 1 and "docs/truba.tr.md" in found[0], found


def test_a_plain_build_warns_about_stale_turkish(tmp_path):
    """(e) `python notebooks/build.py 02` in a copy whose English md block changed warns on stderr, naming it."""
    import shutil
    import subprocess
    import sys

    for name in ("notebooks", "scripts", "ddp_tutorial", "docs", "slurm"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("README.md", "translations.lock.json"):
        shutil.copy(ROOT / name, tmp_path / name)
    source = tmp_path / "notebooks" / "src" / "02_sampler.cells"
    text = source.read_text(encoding="utf-8")
    start = text.index("=== md en\n") + len("=== md en\n")
    source.write_text(text[:start] + "An English sentence added here.\n" + text[start:], encoding="utf-8")
    done = subprocess.run([sys.executable, "notebooks/build.py", "02"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert "warning:" in done.stderr and "02_sampler.cells" in done.stderr, done.stderr
