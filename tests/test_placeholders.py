"""One placeholder rule in both languages (docs/style.tr.md, "Kodda yer tutucular"; review D3/D6).

A placeholder the reader replaces is written in the page's language, in code blocks too: no Turkish
page (docs, README's Turkish half, the notebooks' Turkish markdown) writes an English placeholder of
the style sheet's table, and no English one a Turkish placeholder. The structure guard
(tests/test_translation_guards.py) maps them before it compares a code block with its twin.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import placeholders
import pytest

ROOT = Path(__file__).resolve().parent.parent
T = runpy.run_path(str(ROOT / "scripts" / "translations.py"))
# The style sheet names both columns; reliability.md's rows are written by the lead from the helpers' rows.
SKIP = {"docs/style.md", "docs/style.tr.md", "docs/reliability.md"}


def texts():
    """(name, language, text) of every page and markdown block a reader sees in one language."""
    for path in sorted(ROOT.glob("docs/**/*.md")) + [ROOT / "TRANSLATING.tr.md"]:
        name = path.relative_to(ROOT).as_posix()
        if name not in SKIP:
            yield name, "tr" if name.endswith(".tr.md") else "en", path.read_text(encoding="utf-8")
    tr, en = T["readme_halves"]()
    yield "README.md (Türkçe)", "tr", tr
    yield "README.md (English)", "en", en
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    yield "README.md (Atölye)", "tr", re.search(r"^\*\*Atölye:\*\*.*?(?=\n\n)", readme, re.S | re.M).group(0)
    yield "README.md (Workshop)", "en", T["preamble"](readme)
    for source in sorted((ROOT / "notebooks" / "src").glob("*.cells")):
        for line, turkish, english in T["md_pairs"](source):
            yield f"notebooks/src/{source.name}:{line}", "tr", turkish
            yield f"notebooks/src/{source.name}:{line} (en)", "en", english


def test_both_style_sheets_give_the_same_table():
    table = placeholders.pairs()
    assert ("USER", "KULLANICI") in table and ("JOBID", "İŞNO") in table and len(table) >= 8
    english = (ROOT / "docs" / "style.md").read_text(encoding="utf-8")
    assert all(f"| `{en}` | `{tr}` |" in english for en, tr in table)


def test_no_text_uses_the_other_languages_placeholder():
    found = [f"{name}:{number}: {word}" for name, lang, text in texts()
             for number, word in placeholders.foreign(text, lang)]
    assert not found, ("placeholders of the other language (write the page's own, docs/style.tr.md "
                       "'Kodda yer tutucular'):\n  " + "\n  ".join(found))


@pytest.mark.parametrize("line, words", [
    ("ssh -N -L 8891:akya5:8891 USER@172.16.6.11", ["USER"]),  # docs/truba.tr.md before the rule
    ("cat lab-JOBID.out       # iş çalışmaya başlayınca", ["JOBID"]),  # docs/ondemand.tr.md
    ("pip install ipyparallel jupyterlab /path/to/ddp-tutorial", ["/path/to/"]),
    ("ssh -l KULLANICI 172.16.6.11", []),
    ("sbatch -o /arf/scratch/$USER/x.out; echo ${USER}", []),  # shell variables are no placeholders
    ("ENV=/arf/SINIF/ddp-env DATA=/arf/SINIF/ddp-data DDP_TUTORIAL_SLURM_ACCOUNT=HESAP", []),  # names
])
def test_the_check_sees_an_english_placeholder_on_a_turkish_page(line, words):
    assert [word for _, word in placeholders.foreign(line, "tr")] == words


def test_a_turkish_code_line_reads_as_its_english_twin():
    assert placeholders.to_english("srun --overlap --jobid İŞNO -w DÜĞÜM nvidia-smi") == \
        "srun --overlap --jobid JOBID -w NODE nvidia-smi"
    assert placeholders.to_english("pip install /yol/ddp-tutorial; ls /arf/SINIF/ddp-env") == \
        "pip install /path/to/ddp-tutorial; ls /arf/CLASS/ddp-env"
