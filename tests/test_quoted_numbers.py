"""Numbers the text cannot lose: every figure the prose quotes comes from its source.

The notebooks' markdown writes ``⟦name⟧`` and ``notebooks/build.py`` fills in ``notebooks/quoted.py``'s
value; the docs' sentences that quote a number (``quoted.IN_TEXT``) are found here, filled in from
the same sources. A benchmark re-run, a new exercise or a changed tolerance therefore changes the
notebooks at their next build, and fails here for a docs sentence, naming it.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from notebook_modules import load  # noqa: E402 (tests/helpers: notebooks/*.py by path)

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


quoted = load("quoted")
build = load("build")


def flat(text: str) -> str:
    """Line breaks and runs of spaces read as one space (a sentence may wrap anywhere)."""
    return " ".join(text.split())


def test_numbers_are_written_the_way_each_language_writes_them():
    assert quoted.written(47016.437, "tr") == "47.016" and quoted.written(47016.437, "en") == "47,016"
    assert quoted.written(0.8171, "tr", 2) == "0,82" and quoted.written(0.8171, "en", 2) == "0.82"
    assert quoted.written(21.06, "tr", 0, "percent") == "%21" and quoted.written(21.06, "en", 0, "percent") == "21 %"
    assert quoted.written(1e-12, "tr", style="exp") == "1e-12" and quoted.written(4.87e-5, "en", style="exp") == "5e-5"


@pytest.mark.parametrize("path, lang, phrase", quoted.IN_TEXT, ids=[f"{p}:{s[:30]}" for p, _, s in quoted.IN_TEXT])
def test_every_quoted_sentence_carries_the_number_of_its_source(path, lang, phrase):
    expected = quoted.fill(phrase, lang)
    sources = "; ".join(f"{name} ← {quoted.QUOTES[name].source}" for name in quoted.MARK.findall(phrase))
    assert flat(expected) in flat((ROOT / path).read_text(encoding="utf-8")), (
        f"{path} no longer says {expected!r} ({sources}): write the number its source gives now, "
        f"or change the sentence and its line in notebooks/quoted.py IN_TEXT")


@pytest.mark.parametrize("claim", sorted(quoted.CLAIMS))
def test_what_the_prose_says_in_words_still_holds_for_the_numbers(claim):
    assert quoted.CLAIMS[claim](), f"{claim}: no longer true for the numbers of notebooks/quoted.py; reword it"


# What the review found (turkish-and-truth.md §4a): each old sentence fails the check above.
OLD = [
    ("docs/instructor/README.md", "(16 in all: 15 in 01–06, among them the 02 padding question"),  # F2
    ("docs/instructor/README.tr.md", "toplam 16 denetlenen alıştırma var (01–06'da 15, aralarında"),  # F2
    ("docs/instructor/README.md", "the weights must agree to ≤ 1e-5 (08 checks that)."),  # F3
    ("docs/instructor/README.tr.md", "ağırlıklar ≤ 1e-5 farkla aynı olmalı (08 bunu denetler)."),  # F3
    ("docs/truba.md", "05 shows palamut-cuda by default"),  # F1
]


@pytest.mark.parametrize("path, old", OLD)
def test_the_old_sentences_the_review_found_fail_the_check(path, old):
    phrases = [quoted.fill(phrase, lang) for p, lang, phrase in quoted.IN_TEXT if p == path]
    assert phrases and not any(flat(p) in flat(old) for p in phrases)
    assert flat(old) not in flat((ROOT / path).read_text(encoding="utf-8"))


def markdown(nb) -> str:
    return "\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")


def test_the_build_fills_in_06s_rates_from_the_benchmark_records_in_both_languages():
    source = NOTEBOOKS / "src" / "06_pitfalls_scaling.cells"
    tr, en = (flat(markdown(build.build(source, lang))) for lang in ("tr", "en"))
    assert "(47.016 → 17.081 örnek/s)" in tr and "(47,016 → 17,081 samples/s)" in en
    # review F5: 38.417,6 / 47.016,4 = 0,817, written 0,82 (was 0,81)
    assert "**0,82 katıdır**" in tr and "**0.82×**" in en
    # review F6: 12,9 is the loaded rate over the seed's loaded rate (38.212 / 2.954), said so
    assert "Yük altında ise paketin kuralı (38.212 örnek/s), aynı koşullarda kaynak öğreticinin yolunun " \
           "(2.954 örnek/s) **12,9 katıdır**" in tr
    assert "Under load the package's policy (38,212 samples/s) is **12.9×** the seed tutorial's pipeline" in en
    assert "0,81" not in tr and "0.81" not in en


def test_no_mark_is_left_in_any_built_notebook():
    for source in sorted((NOTEBOOKS / "src").glob("*.cells")):
        for lang in ("tr", "en"):
            text = markdown(build.build(source, lang))
            assert "⟦" not in text and "⟧" not in text, f"{lang}/{source.stem}: a ⟦…⟧ left unfilled"


def test_every_quote_is_used_somewhere():
    used = set()
    for source in (NOTEBOOKS / "src").glob("*.cells"):
        used |= set(quoted.MARK.findall(source.read_text(encoding="utf-8")))
    used |= {name for _, _, phrase in quoted.IN_TEXT for name in quoted.MARK.findall(phrase)}
    assert set(quoted.QUOTES) <= used, f"quotes nothing uses: {sorted(set(quoted.QUOTES) - used)}"


def test_an_unknown_mark_is_refused_with_its_file_and_line(tmp_path):
    bad = tmp_path / "95_quote.cells"
    bad.write_text("=== md tr\nMetin.\n=== md en\nText.\n=== md tr\nHız ⟦no.such⟧.\n=== md en\nRate ⟦no.such⟧.\n",
                   encoding="utf-8")
    with pytest.raises(build.SourceError, match=r"95_quote\.cells:5: ⟦no\.such⟧ names no number of "
                                                r"notebooks/quoted\.py"):
        build.parse(bad)


def test_a_source_that_cannot_be_read_is_one_line_naming_the_quote(tmp_path, monkeypatch, capsys):
    missing = tmp_path / "gone.json"  # a results file deleted or renamed
    monkeypatch.setitem(quoted.QUOTES, "gone.rate", quoted.Quote(str(missing), lambda: quoted.json.loads(
        missing.read_text())["rate"]))
    source = tmp_path / "src" / "96_gone.cells"
    source.parent.mkdir()
    source.write_text("=== md tr\nHız ⟦gone.rate⟧.\n=== md en\nRate ⟦gone.rate⟧.\n", encoding="utf-8")
    with pytest.raises(build.SourceError, match=r"96_gone\.cells: ⟦gone\.rate⟧ cannot be read from .*gone\.json "
                                                r"\(FileNotFoundError"):
        build.build(source, "tr")
    monkeypatch.setattr(build, "SOURCES", source.parent)
    monkeypatch.setattr(build, "HERE", tmp_path)
    assert build.main([]) == 2
    said = capsys.readouterr().err
    assert len(said.splitlines()) == 1 and "(nothing written)" in said and "Traceback" not in said, said
    assert not (tmp_path / "tr").exists()


# 04's live cell: "world 2 / world 1 within a round: median 0.57× (…)" / "… medyan 0,51 kat (…)"
LIVE = {"en": re.compile(r"world 2 / world 1 within a round: median ([\d.]+)×"),
        "tr": re.compile(r"dünya boyutu 2 / dünya boyutu 1: medyan ([\d,]+) kat")}


@pytest.mark.parametrize("lang", ["tr", "en"])
def test_04s_stored_live_median_lies_in_the_range_its_prose_quotes(lang):
    """04's prose quotes the live medians of its runs here (review F4: it quoted 0,63 and 0,89, while
    the stored runs show 0,51 and 0,57); each stored run must fall in the range it quotes now."""
    nb = nbformat.read(NOTEBOOKS / lang / "04_ddp_training.ipynb", as_version=4)
    found = [float(m.group(1).replace(",", ".")) for cell in nb.cells for out in cell.get("outputs", [])
             if out.get("output_type") == "stream" for m in LIVE[lang].finditer(out.text)]
    assert len(found) == 1, f"{lang}/04 shows no live world 2 / world 1 median (found {found})"
    low, high = quoted.LIVE_MEDIANS
    assert low <= found[0] <= high, (
        f"{lang}/04's stored live median {found[0]} is outside the {low}–{high} its prose quotes: widen "
        f"LIVE_MEDIANS in notebooks/quoted.py (the build writes it into 04) or re-execute 04")
