"""The Turkish and English notebooks are the same notebook in two languages.

Both are generated from one source per notebook (``notebooks/src/NN_name.cells``, see
``notebooks/build.py``); these tests check the generated files themselves: same names, identical
code cells, every markdown cell present in both and translated, kernel and language named in the
metadata, and outputs stored from a real execution.
"""

import io
import re
import tokenize
from pathlib import Path

import nbformat
import pytest
from notebook_modules import load  # noqa: E402 (tests/helpers: notebooks/*.py by path)

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = sorted(p.name for p in (NOTEBOOKS / "en").glob("*.ipynb"))
TURKISH_LETTERS = re.compile(r"[çğıöşüÇĞİÖŞÜ]")


def code_tokens(source: str) -> list:
    """The code of a cell as tokens, with comments dropped and every string literal (f-strings'
    text parts too) replaced by one placeholder: what must be identical in both languages."""
    lines = ["pass" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()]
    kept = []
    for tok in tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL):
            continue
        if tok.type == tokenize.STRING or tok.type == getattr(tokenize, "FSTRING_MIDDLE", None):
            if not kept or kept[-1] != "<str>":  # "a" "b" (implicit concatenation) is one string
                kept.append("<str>")
        else:
            kept.append(tok.string)
    return kept


def read(lang, name):
    return nbformat.read(NOTEBOOKS / lang / name, as_version=4)


def test_every_notebook_exists_in_both_languages():
    turkish = sorted(p.name for p in (NOTEBOOKS / "tr").glob("*.ipynb"))
    assert turkish == NAMES
    assert len(NAMES) >= 7
    assert all(re.match(r"^\d\d_[a-z0-9_]+\.ipynb$", name) for name in NAMES), NAMES
    numbers = [int(name[:2]) for name in NAMES]
    assert numbers == list(range(len(NAMES)))  # 00, 01, … without gaps


@pytest.mark.parametrize("name", NAMES)
def test_code_is_identical_and_markdown_translated(name):
    tr, en = read("tr", name), read("en", name)
    assert [c.cell_type for c in tr.cells] == [c.cell_type for c in en.cells]
    for i, (a, b) in enumerate(zip(tr.cells, en.cells)):
        if a.cell_type == "code":
            assert code_tokens(a.source) == code_tokens(b.source), (
                f"{name} cell {i}: the code differs between tr and en (only comments and strings may)")
        else:
            assert a.source.strip() and b.source.strip(), f"{name} cell {i}: empty markdown"
            assert a.source != b.source, f"{name} cell {i}: markdown is not translated"
            assert TURKISH_LETTERS.search(a.source), f"{name} cell {i}: the Turkish cell has no Turkish letter"
    assert any(c.cell_type == "markdown" for c in tr.cells)


@pytest.mark.parametrize("name", NAMES)
def test_metadata_names_kernel_and_language(name):
    for lang in ("tr", "en"):
        meta = read(lang, name).metadata
        assert meta.kernelspec.name == "python3" and meta.kernelspec.language == "python"
        assert meta.language == lang and meta.ddp_tutorial.language == lang
        assert meta.ddp_tutorial.source == f"notebooks/src/{Path(name).stem}.cells"


@pytest.mark.parametrize("name", NAMES)
def test_notebooks_match_their_source(name):
    """Nobody edited one language's .ipynb by hand: rebuilding from the source gives the same cells."""
    build = load("build")
    source = NOTEBOOKS / "src" / f"{Path(name).stem}.cells"
    for lang in ("tr", "en"):
        fresh = build.build(source, lang)
        stored = read(lang, name)
        assert [(c.cell_type, c.source) for c in fresh.cells] == [(c.cell_type, c.source) for c in stored.cells], \
            f"{lang}/{name} differs from {source.name}: run python notebooks/build.py --execute {name[:2]}"


@pytest.mark.parametrize("name", NAMES)
def test_outputs_come_from_a_real_run(name):
    for lang in ("tr", "en"):
        nb = read(lang, name)
        code = [c for c in nb.cells if c.cell_type == "code"]
        if not code:
            continue
        assert nb.metadata.ddp_tutorial.executed_with.dataset in ("mnist", "fashion-mnist")
        counts = [c.execution_count for c in code]
        assert None not in counts and counts == sorted(counts), f"{lang}/{name}: not executed in order"
        assert not [c for c in code if c.outputs and any(o.output_type == "error" for o in c.outputs)
                    and "raises-exception" not in c.metadata.get("tags", [])], f"{lang}/{name}: an unexpected error"


def test_bilingual_code_differs_only_in_comments_and_strings(tmp_path):
    build = load("build")
    src = tmp_path / "97_ok.cells"
    src.write_text('=== md tr\nMetin.\n=== md en\nText.\n=== code\n'
                   'n = 3  # ⟪üç‖three⟫\nprint(⟪f"{n} görüntü"‖f"{n} images"⟫)\n')
    tr, en = (build.build(src, lang).cells[1].source for lang in ("tr", "en"))
    assert tr == 'n = 3  # üç\nprint(f"{n} görüntü")' and en == 'n = 3  # three\nprint(f"{n} images")'
    assert code_tokens(tr) == code_tokens(en)
    assert code_tokens("x = 1") != code_tokens("x = 2")            # a changed number is caught
    assert code_tokens("print(a)") != code_tokens('print("a")')     # a name made a string is caught
    broken = tmp_path / "96_bad.cells"
    broken.write_text("=== code\nprint(⟪'yarım'‖'half')\n")
    with pytest.raises(ValueError, match="unbalanced"):
        build.build(broken, "tr")


def test_parser_rejects_an_untranslated_markdown_cell(tmp_path):
    build = load("build")
    bad = tmp_path / "99_bad.cells"
    bad.write_text("=== md tr\nYalnızca Türkçe.\n=== code\nprint(1)\n")
    with pytest.raises(ValueError, match="md en"):
        build.parse(bad)
    also_bad = tmp_path / "98_bad.cells"
    also_bad.write_text("=== md en\nEnglish without Turkish.\n")
    with pytest.raises(ValueError, match="md tr"):
        build.parse(also_bad)


def test_text_before_the_first_block_is_refused_not_dropped(tmp_path, capsys):
    """Issue 25, N01d: a forgotten '=== md tr' header lost the notebook's introduction without a word."""
    build = load("build")
    bad = tmp_path / "95_bad.cells"
    bad.write_text("\n# Giriş\nBu paragraf kaybolurdu.\n=== md en\n# Intro\n=== code\nprint(1)\n")
    with pytest.raises(ValueError, match=r"95_bad.cells:2: text before the first '=== ' line would be lost"):
        build.parse(bad)
    blank_first = tmp_path / "94_ok.cells"
    blank_first.write_text("\n\n=== md tr\nMetin.\n=== md en\nText.\n")  # blank lines lose nothing
    assert build.parse(blank_first) == [("md", {"tr": "Metin.", "en": "Text."})]
    build.SOURCES = tmp_path  # the command line: a clear message, nothing written
    assert build.main(["95"]) == 2
    assert "95_bad.cells:2: text before the first" in capsys.readouterr().err
    assert not (NOTEBOOKS / "en" / "95_bad.ipynb").exists()


def test_an_exercise_line_becomes_its_cells(tmp_path):
    """'=== exercise NAME': the task from the messages, the optional code shown first, the attendee's
    cell and the check cell, in each language; an unknown name is refused."""
    from ddp_tutorial import exercises
    build = load("build")
    src = tmp_path / "92_ex.cells"
    src.write_text("=== exercise steps_per_epoch\nprint(⟪'önce'‖'first'⟫)\n=== exercise lr_for\n")
    for lang in ("tr", "en"):
        cells = [(c.cell_type, c.source) for c in build.build(src, lang).cells]
        steps, lr = exercises.steps_per_epoch, exercises.lr_for
        first = "print('önce')" if lang == "tr" else "print('first')"
        assert cells == [
            ("markdown", steps.task(lang)), ("code", first), ("code", steps.placeholder(lang)),
            ("code", build.CHECK_CELL.format("steps_per_epoch")),
            ("markdown", lr.task(lang)), ("code", lr.placeholder(lang)), ("code", build.CHECK_CELL.format("lr_for"))]
    unknown = tmp_path / "91_bad.cells"
    unknown.write_text("=== exercise no_such_thing\n")
    with pytest.raises(ValueError, match="no such exercise"):
        build.parse(unknown)
