"""The Turkish style sheet as a test (issue 49 item 2): its *Kullanmayın* column, read from
``docs/style.tr.md`` itself, is checked over every Turkish text of the bundle.

The texts: every message of ``tr.toml``; every ``docs/**/*.tr.md`` page and ``TRANSLATING.tr.md``; README's
Turkish half and its *Atölye* paragraph; the Turkish lines of the bilingual pages ``slurm/README.md``,
``notebooks/README.md``, ``benchmarks/README.md`` and ``docs/reliability.md``; the ``=== md tr`` blocks of
``notebooks/src/*.cells`` and the Turkish half of every ``⟪Türkçe‖English⟫`` (code cells, exercises, sbatch
templates, the renderer); the Turkish lines of ``scripts/*.sh`` and ``ondemand/``. A Turkish notebook's
stored outputs are read through their sources: its markdown is an ``=== md tr`` block, its printed text a
``⟪…‖…⟫`` half or a message of ``tr.toml`` (an output changes only when the notebooks are re-executed; its source
is checked at once).

What a program prints in Turkish is checked live too: the job preview and the rendered job script of the class's
job (``DDP_TUTORIAL_LANG=tr``, TRUBA's table and the generic profile) and the help of every ``ddp-tutorial``
command, for the sheet's terms and for English words (a word of ``en.toml`` that ``tr.toml`` never uses).

How the sheet's column is read, and the allowed exceptions with their reasons, are written in the sheet
(section *Denetim*), not here.
"""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHEET = ROOT / "docs" / "style.tr.md"
T = runpy.run_path(str(ROOT / "scripts" / "translations.py"))
BILINGUAL = T["BILINGUAL"]

LETTER = r"0-9A-Za-zÇĞİÖŞÜçğıöşüâîû"
VOWEL = "aeıioöuüâîû"
#: Turkish inflection, in its order: -li/-siz, plural, possessive, then a case that ends the word (dative,
#: accusative, genitive, ablative, instrumental) or the locative with -ki and the copula. *bölüm* matches
#: *bölümü, bölümlerinde, bölümüdür*; *düz* does not match *düzen*, nor *kap* match *kapalı* or *kapatır*.
DERIVED = "(?:l[ıiuü]|s[ıiuü]z)?"
PLURAL = "(?:l[ae]r)?"
POSSESSIVE = "(?:[ıiuü]?m[ıiuü]z|[ıiuü]?n[ıiuü]z|[ıiuü]m|[ıiuü]n|s?[ıiuü]|l[ae]r[ıi])?"
CASE_END = "(?:y?[ae]|n[ae]|y?[ıiuü]|n[ıiuü]|n?[ıiuü]n|n?[dt][ae]n|y?l[ae])"
COPULA = "(?:n?[dt][ae])?(?:ki)?(?:[dt][ıiuü]r|y?ken)?"
SUFFIX = f"'?{DERIVED}{PLURAL}{POSSESSIVE}(?:{CASE_END}|{COPULA})"
SOFT = {"p": "b", "ç": "c", "t": "d", "k": "ğ"}


def fold(text: str) -> str:
    """Lower case the Turkish way, one character for one (İ → i, I → ı), so positions stay."""
    folded = text.replace("İ", "i").replace("I", "ı").lower()
    return folded if len(folded) == len(text) else text.lower()


def word_pattern(word: str) -> str:
    """``word`` with any inflection; a final p/ç/t/k may soften before a vowel (*kap → kabı*)."""
    word = fold(word)
    if len(word) >= 3 and word[-1] in SOFT:
        stem = f"{re.escape(word[:-1])}(?:{word[-1]}|{SOFT[word[-1]]}(?=[{VOWEL}]))"
    else:
        stem = re.escape(word)
    return stem + SUFFIX


def phrase_pattern(phrase: str) -> re.Pattern:
    """An item of the sheet in any inflection; a compound's last word without its possessive (*not defteri* →
    *not defterleri*)."""
    words = fold(phrase).split()
    if len(words) > 1:
        words[-1] = compound_stem(words[-1])
    return bounded([word_pattern(w) for w in words])


def compound_stem(word: str) -> str:
    """A compound's last word without its possessive: *çekirdeği* → *çekirdek*, *numarası* → *numara*."""
    if "'" in word:  # the suffix is written out: JupyterLab'ı is not JupyterLab'i
        return word
    if len(word) > 5 and word[-2:] in ("sı", "si", "su", "sü"):
        word = word[:-2]
    elif len(word) > 3 and word[-1] in "ıiuü":
        word = word[:-1]
    return word[:-1] + "k" if word.endswith("ğ") else word


def bounded(words: list) -> re.Pattern:
    """The words in a row (any space between them), not inside a longer word."""
    return re.compile(f"(?<![{LETTER}])" + r"\s+".join(words) + f"(?![{LETTER}])")


def term_pattern(term: str) -> re.Pattern:
    """A term of the Türkçe column in any inflection: its last word without the compound's possessive
    (*CPU çekirdeği* → *CPU çekirdek…*: *CPU çekirdekleri, CPU çekirdekli* are the same term)."""
    words = fold(term).split()
    words[-1] = compound_stem(words[-1])
    return bounded([word_pattern(w) for w in words])


# ── the sheet ─────────────────────────────────────────────────────────────────────────────────

def table_after(heading: str, text: str | None = None) -> list:
    """The rows (lists of cells) of the first table under the ``##`` heading that starts with ``heading``."""
    text = SHEET.read_text(encoding="utf-8") if text is None else text
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("## ") and line[3:].startswith(heading))
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("|"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not all(set(c) <= set("-: ") for c in cells):
                rows.append(cells)
        elif rows:
            break
    return rows[1:]  # without the header


@dataclass(frozen=True)
class Rule:
    item: str            # as the sheet writes it: "bölüm", "toplu iş betiği", "çekirdek" (bare)
    pattern: re.Pattern
    english: str         # the row's concept
    turkish: str         # the row's terms


def rules(text: str | None = None) -> list:
    """One rule per item of the *Kullanmayın* column: items are separated by commas; ``*`` is emphasis;
    a parenthesis is a note for the reader; ``—`` is no item; *yalın X* is the word X alone (X inside a
    term of the Türkçe column is that term)."""
    found = []
    for english, turkish, banned in table_after("Terimler", text):
        banned = re.sub(r"\([^)]*\)", "", banned).replace("*", "")
        for item in (part.strip() for part in banned.split(",")):
            item = re.sub(r"^yalın\s+", "", item)
            if item and item != "—" and item not in {rule.item for rule in found}:  # one rule per item
                found.append(Rule(item, phrase_pattern(item), english, turkish))
    return found


def allowed_terms(text: str | None = None) -> list:
    """Every term of the Türkçe column (what the sheet asks for is never a breach: *toplu işlem*)."""
    terms = []
    for _english, turkish, _banned in table_after("Terimler", text):
        plain = re.sub(r"\([^)]*\)", "", turkish).replace("*", "")
        terms += [term.strip() for term in re.split(r"[/,;:=]", plain)]
    return [term_pattern(term) for term in terms if len(term) > 1 and not term.isdigit()]


def exceptions(text: str | None = None) -> dict:
    """{item: [(pattern, reason)]} from the sheet's table of allowed uses."""
    found: dict = {}
    for item, pattern, reason in table_after("Denetimin izin verdikleri", text):
        assert reason.strip(" —"), f"the allowed use {pattern} of '{item}' has no reason in {SHEET.name}"
        found.setdefault(item.replace("*", ""), []).append(re.compile(pattern.strip("`")))
    return found


@dataclass
class Sheet:
    rules: list
    allowed: list
    exceptions: dict

    @classmethod
    def read(cls, text: str | None = None) -> "Sheet":
        return cls(rules(text), allowed_terms(text), exceptions(text))

    def breaches(self, where: str, text: str, first: int | None = None) -> list:
        """'where[:line]: «…context…»: *item* — concept → terms' for every forbidden use in ``text``, whose
        first line is line ``first`` of ``where`` (None: a message, no line numbers). A use is allowed where
        it starts inside a term of the Türkçe column or inside an allowed use of the sheet."""
        folded, found, terms = fold(text), [], None
        for rule in self.rules:
            uses = list(rule.pattern.finditer(folded))
            if not uses:
                continue
            if terms is None:  # the Türkçe column's terms, looked for once a text has a forbidden item
                terms = [m.span() for term in self.allowed for m in term.finditer(folded)]
            fine = terms + [m.span() for p in self.exceptions.get(rule.item, []) for m in p.finditer(folded)]
            for m in uses:
                if any(a <= m.start() < b for a, b in fine):
                    continue
                at = where if first is None else f"{where}:{first + text.count(chr(10), 0, m.start())}"
                context = text[max(0, m.start() - 40):m.end() + 25].replace("\n", " ")
                found.append(f"{at}: «…{context}…»: *{rule.item}* — {rule.english} → {rule.turkish}")
        return found


# ── the texts ─────────────────────────────────────────────────────────────────────────────────

#: Pages whose two languages sit side by side: read whole (the sheet's items are Turkish words).
BILINGUAL_PAGES = ("slurm/README.md", "notebooks/README.md", "benchmarks/README.md", "docs/reliability.md")


def _messages(lang: str) -> dict:
    def flat(table, prefix=""):
        for key, value in table.items():
            if isinstance(value, dict):
                yield from flat(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}", str(value)
    path = ROOT / "ddp_tutorial" / "messages" / f"{lang}.toml"
    return dict(flat(tomllib.loads(path.read_text(encoding="utf-8"))))


def _halves(rel: str, text: str, first: int = 1) -> list:
    """(where, Turkish half, its line) for every ⟪Türkçe‖English⟫ in ``text`` (whose first line is ``first``)."""
    return [(rel, m.group(1), first + text.count("\n", 0, m.start())) for m in BILINGUAL.finditer(text)]


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def turkish_texts() -> list:
    """(where, text, first line or None) for every Turkish text of the bundle (the module's docstring lists
    them); a page is one text, so a term broken over two lines is still one term."""
    found = [(f"ddp_tutorial/messages/tr.toml [{key}]", value, None) for key, value in _messages("tr").items()]
    pages = [*sorted((ROOT / "docs").rglob("*.tr.md")), ROOT / "TRANSLATING.tr.md",
             *(ROOT / rel for rel in BILINGUAL_PAGES)]
    found += [(str(page.relative_to(ROOT)), _read(page), 1) for page in pages if page != SHEET]  # the sheet
    readme = _read(ROOT / "README.md")                                  # quotes the forms it forbids
    tr_half, _en_half = T["readme_halves"]()
    preamble = readme.split("\n## Türkçe")[0]
    found += [("README.md", preamble, 1), ("README.md", tr_half, readme[:readme.index(tr_half)].count("\n") + 1)]
    for source in sorted((ROOT / "notebooks" / "src").glob("*.cells")):
        rel = str(source.relative_to(ROOT))
        for kind, start, text in T["cell_blocks"](source):
            if kind == "md tr":
                found.append((rel, text, start + 1))
            elif kind != "md en":
                found += _halves(rel, text, start + 1)
    for path in sorted((ROOT / "ddp_tutorial").rglob("*.py")):
        found += _halves(str(path.relative_to(ROOT)), _read(path))
    for path in [*sorted((ROOT / "slurm").glob("*.sbatch")), *sorted((ROOT / "ddp_tutorial" / "sites").glob("*.toml")),
                 *sorted((ROOT / "scripts").glob("*.sh")), *sorted((ROOT / "ondemand").rglob("*"))]:
        if path.is_file():
            found.append((str(path.relative_to(ROOT)), _read(path), 1))
    return found


def report(problems):
    assert not problems, f"{len(problems)} problem(s):\n  " + "\n  ".join(problems)


# ── the sheet is read, and the reading finds what it should ──────────────────────────────────────

def test_the_sheet_is_read_from_its_table():
    sheet = Sheet.read()
    items = {rule.item for rule in sheet.rules}
    assert {"bölüm", "çekirdek", "toplu iş betiği", "ebeveyn", "kapsayıcı", "düz", "aygıt"} <= items, items
    assert len(sheet.rules) >= 30 and len(sheet.allowed) >= 30
    assert sheet.exceptions and all(sheet.exceptions.values())


def test_a_row_added_to_the_sheet_is_checked(tmp_path):
    """One source: a new row of the sheet's table is a new rule (nothing copied into the test)."""
    text = SHEET.read_text(encoding="utf-8").replace(
        "| function | fonksiyon | işlev |", "| function | fonksiyon | işlev |\n| lunch | öğle yemeği | azık |")
    sheet = Sheet.read(text)
    assert list(sheet.breaches("x", "Öğlen azığınızı alın.")) and not list(Sheet.read().breaches("x", "azığınız"))


@pytest.mark.parametrize("text", [
    "düğüm başına ebeveyni", "merkezin her GPU bölümünde", "akya-cuda bölümü", "GPU başına 10 çekirdek",
    "40 çekirdekli bir düğüm", "bu toplu iş betiğine", "Jupyter'in kapsayıcı uygulaması", "ya da kapta",
    "Open OnDemand'ın kabı", "düz bir `sbatch`", "Aygıt, paketin kuralıyla seçilir", "yaklaşık 3 sn sonra",
    "SLURM_PROCID düğümün numarasıdır", "Çekirdeğin bekçisi", "Modeli DDP ile sardınız", "DDP ile sarmak",
    "JupyterLab'i açın", "karma hassasiyet", "MASTER_ADDR: ayrılan düğümlerin ilki", "not\ndefterleri",
])
def test_a_forbidden_term_is_found(text):
    assert list(Sheet.read().breaches("x", text)), text


@pytest.mark.parametrize("text", [
    "her toplu işlemde", "bir toplu işleme hiç katılmadı", "40 CPU çekirdekli bir düğüm", "CPU çekirdeklerinin",
    "Jupyter çekirdeğinizin", "CUDA çekirdek kodları", "05'in 4. bölümü", "3–6. bölümler", "bu bölümdeki",
    "blok aygıtı", "düzenli", "kapatın", "kapsamı", "yapılır", "DDP ile sarmalamak", "modeli sarmalar",
    "kuyruk (partition)", "JupyterLab'ı açın", "çift duyarlık", "toplu işlemlerin", "4 s sonra", "DK:SN biçimi",
])
def test_what_the_sheet_asks_for_is_not_a_breach(text):
    assert not list(Sheet.read().breaches("x", text)), text


# ── every Turkish text ──────────────────────────────────────────────────────────────────────────

def test_every_turkish_text_keeps_the_style_sheet():
    texts = turkish_texts()
    assert len(texts) > 1500 and any(where.startswith("notebooks/src/05") for where, _, _ in texts)
    sheet = Sheet.read()
    report([problem for where, text, first in texts for problem in sheet.breaches(where, text, first)])


# ── what programs print in Turkish ──────────────────────────────────────────────────────────────

WORD = re.compile(r"[^\W\d_]{2,}")  # a word in any alphabet: "atölye" is not "at"
CODELIKE = re.compile(r"`[^`]*`|\$\{?\w+\}?|\S*[/=]\S*|--?[\w-]+|\b\w+(?:\.\w+)+\b|\b\w*_\w*\b|\b\w*\d\w*\b"
                      r"|'[^'\n]*'|\"[^\"\n]*\"|\[[\w, -]*\]|\{[^}]*\}")


def english_vocabulary() -> set:
    """The words of en.toml that tr.toml never uses (a word both use is a name or a kept term)."""
    english = {w.lower() for text in _messages("en").values() for w in WORD.findall(text)}
    turkish = {w.lower() for text in _messages("tr").values() for w in WORD.findall(text)}
    return english - turkish - {w.lower() for w in T["SAME_WORDS"]}


def english_words(where: str, text: str, vocabulary: set) -> list:
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        words = [w for w in WORD.findall(CODELIKE.sub(" ", line)) if w.lower() in vocabulary]
        if words:
            found.append(f"{where}:{n}: {words} in «{line.strip()[:110]}»")
    return found


def _run_tr(code: str, *args: str, **env: str) -> str:
    """stdout of ``python -c code args`` with ``DDP_TUTORIAL_LANG=tr`` (and ``env``)."""
    environ = {**os.environ, "DDP_TUTORIAL_LANG": "tr", "PYTHONIOENCODING": "utf-8", **env}
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=environ, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


JOB = """
import json, sys
from ddp_tutorial import slurm
folder, profile = sys.argv[1], slurm.workshop_profile()
job = slurm.class_job("seed", time="00:30:00", job_name="ddp-seed", dataset="mnist", root=folder, epochs=2,
                      run_dir=folder, python=sys.executable)
print(json.dumps([profile, slurm.class_preview(job, profile=profile), slurm.render(job)]))
"""


def said_by(script: str) -> str:
    """What a job script says to its reader: its comments (also after ``#SBATCH`` lines) and echo texts; not
    its section headers (``# ---- GPU check / GPU denetimi ----``: bilingual by design, slurm/README.md)."""
    said = []
    for line in script.splitlines():
        if line.startswith(("#!", "# ----")):
            continue
        if line.lstrip().startswith("#") and not line.startswith("#SBATCH"):
            said.append(line)
        elif " # " in line:
            said.append(line.split(" # ", 1)[1])
    said += [m.group(1) for m in re.finditer(r'echo\s+"([^"]*)"', script)]
    return "\n".join(said)


@pytest.mark.parametrize("site, profile", [("truba", "akya-cuda"), ("none", "generic")])
def test_the_turkish_job_preview_and_script_are_turkish(tmp_path, site, profile):
    """The class's job as notebook 05 shows it (its preview, and the comments and echo texts of its script):
    no English word, no term the sheet forbids. Before issue 49 the profile line printed the site table's
    English description in every Turkish preview."""
    shown, preview, script = json.loads(_run_tr(JOB, str(tmp_path), DDP_TUTORIAL_SITE=site,
                                                DDP_TUTORIAL_SLURM_PROFILE=profile))
    assert shown == profile and f"{profile} profili" in preview and "#SBATCH" in script
    sheet, vocabulary = Sheet.read(), english_vocabulary()
    said = said_by(script)
    report([*sheet.breaches("preview", preview, 1), *sheet.breaches("script", said, 1),
            *english_words("preview", preview, vocabulary), *english_words("script", said, vocabulary)])


HELP = """
import argparse
from ddp_tutorial.argtext import argparse_in_user_language
from ddp_tutorial.cli import build_parser

def walk(parser, name):
    yield name, parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                yield from walk(child, f"{name} {sub}")

with argparse_in_user_language():
    for name, text in walk(build_parser(), "ddp-tutorial"):
        print(f"=== {name}\\n{text}")
"""


def test_every_turkish_command_help_is_turkish():
    """``DDP_TUTORIAL_LANG=tr ddp-tutorial … --help`` of every command and subcommand: no English word (a
    metavar such as PATH or SECONDS beside the Turkish help), no term the sheet forbids. A metavar that is
    the option's own name (``--epochs EPOCHS``) is code, and so are the commands' names (``submit``)."""
    out = _run_tr(HELP)
    helps = re.split(r"^=== (.+)$", out, flags=re.M)[1:]
    assert len(helps) >= 20 * 2, f"only {len(helps) // 2} helps"
    commands = {word for name in helps[::2] for word in name.split()}
    sheet, vocabulary = Sheet.read(), english_vocabulary() - commands
    turkish = capitals("tr") - capitals("en")
    problems = []
    for name, text in zip(helps[::2], helps[1::2]):
        for option, placeholder in set(METAVAR.findall(text)):
            bare = placeholder.strip('"')
            if bare != option[2:].upper().replace("-", "_") and bare not in turkish:
                problems.append(f"{name} --help: {option} {placeholder}: an English placeholder (argtext.metavar)")
        text = METAVAR.sub(lambda m: m.group(1), text)
        problems += [*sheet.breaches(f"{name} --help", text, 1), *english_words(f"{name} --help", text, vocabulary)]
    report(problems)


#: An option and its placeholder in a help text: ``--script YOL``, ``[--env AD=DEĞER]``, ``--script-args "ARGS"``.
METAVAR = re.compile(r'(--[\w-]+)[ =]("?[A-ZÇĞİÖŞÜ][A-ZÇĞİÖŞÜ_=]+"?)')


def capitals(lang: str) -> set:
    """The words in capitals of a catalogue (placeholders, names): YOL and SANİYE are Turkish, PATH is not."""
    return {w for text in _messages(lang).values() for w in re.findall(r"[A-ZÇĞİÖŞÜ][A-ZÇĞİÖŞÜ_=]+", text)}


def test_turkish_output_marks_and_counts():
    """site-check's passed line says *tamam* in Turkish (``ok`` in English, the column kept), and ``data check``
    groups its counts (*60.000*): before issue 49 both printed English *ok* and *60000* in Turkish output."""
    from ddp_tutorial.site_check import Line

    line = Line(True, "site.summary_ok", {"count": 3})
    assert line.text("tr").startswith("tamam ") and line.text("en").startswith("ok   ")
    assert Line(False, "site.summary_ok", {"count": 3}).text("tr").startswith("!!   ")
    root = Path(os.environ.get("DDP_TUTORIAL_MNIST_ROOT", ROOT / ".data"))
    if not (root / "MNIST").is_dir():
        pytest.skip(f"no MNIST under {root}")
    said = _run_tr("from ddp_tutorial.cli import main; main(['data', 'check', '--dataset', 'mnist', '--root', "
                   f"{str(root)!r}])")
    assert "60.000 eğitim / 10.000 test" in said, said
