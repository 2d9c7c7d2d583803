"""Stored notebook outputs come from the current code.

A line of a stored output that carries a piece of one of the package's messages must be that
message as the current catalogue writes it (``notebooks/freshness.py``): when a message is
reworded (or its numbers are written the Turkish way), a notebook that still shows the old wording
fails here, named with its language, until it is re-executed; ``python notebooks/build.py --execute
--stale`` re-executes just the stale ones. Stored tracebacks must not show the package's own frames
(their line numbers go stale with every edit, and an attendee needs their cell, not ours).
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from ddp_tutorial import i18n
from notebook_modules import load  # noqa: E402 (tests/helpers: notebooks/*.py by path)

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = sorted(p.name for p in (NOTEBOOKS / "en").glob("*.ipynb"))


fresh = load("freshness")
stale_lines, ANSI = fresh.stale_lines, fresh.ANSI


@pytest.mark.parametrize("lang", ["tr", "en"])
@pytest.mark.parametrize("name", NAMES)
def test_stored_outputs_say_what_the_catalogue_says_now(name, lang):
    stale = fresh.stale_cells(NOTEBOOKS / lang / name, lang)
    assert not stale, (f"{lang}/{name} shows messages the current code no longer prints; re-execute the "
                       f"stale notebooks: {fresh.rerun_command([(name[:-6], lang)])}\n" + "\n".join(stale[:10]))


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


SOURCE = ('=== md tr\nBir satır.\n=== md en\nOne line.\n=== code\nfrom ddp_tutorial import i18n\n\n'
          'print(i18n.t("train.accuracy", lang=⟪"tr"‖"en"⟫, n=10000, acc=85.24))\n')


def test_a_changed_message_names_the_stale_notebook_and_only_it_is_re_executed(tmp_path, monkeypatch, capsys):
    """A copy of the notebooks folder with two notebooks in two languages, stored with outputs of the
    current catalogue, except tr/50, which shows yesterday's wording of a message: ``--stale`` names
    tr/50 alone, and ``--execute --stale`` re-executes tr/50 alone, after which nothing is stale."""
    build = load("build")
    folder = tmp_path / "notebooks"
    (folder / "src").mkdir(parents=True)
    for name in ("50_fresh", "51_other"):
        (folder / "src" / f"{name}.cells").write_text(SOURCE, encoding="utf-8")
    monkeypatch.setattr(build, "HERE", folder)
    monkeypatch.setattr(build, "SOURCES", folder / "src")
    monkeypatch.setenv("DDP_TUTORIAL_UNWATCHED", "1")  # what execute() sets, undone after the test
    assert build.main([]) == 0
    for lang in ("tr", "en"):
        for name in ("50_fresh", "51_other"):
            path = folder / lang / f"{name}.ipynb"
            nb = nbformat.read(path, as_version=4)
            text = i18n.t("train.accuracy", lang=lang, n=10000, acc=85.24)
            if (lang, name) == ("tr", "50_fresh"):
                text = "10000 test görüntüsünde ağın doğruluğu: 85.24 %"  # the wording before the Turkish numbers
            nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text=text + "\n")]
            nbformat.write(nb, path)
    untouched = {p: p.read_bytes() for p in folder.glob("*/*.ipynb")}
    assert set(fresh.stale_notebooks(folder)) == {("50_fresh", "tr")}
    capsys.readouterr()

    assert build.main(["--stale"]) == 0  # names it; without --execute nothing is run
    said = capsys.readouterr().out
    assert "stale: tr/50_fresh.ipynb" in said and "51_other" not in said and "en/" not in said, said
    assert "re-execute them: python notebooks/build.py --execute --stale" in said, said

    assert build.main(["--execute", "--stale"]) == 0
    said = capsys.readouterr().out
    assert "ran notebooks/tr/50_fresh.ipynb" in said and said.count("ran ") == 1, said
    assert fresh.stale_notebooks(folder) == {}
    changed = [p.relative_to(folder).as_posix() for p, data in untouched.items() if p.read_bytes() != data]
    assert changed == ["tr/50_fresh.ipynb"], changed
    assert build.main(["--stale"]) == 0 and "nothing to do" in capsys.readouterr().out


def test_the_rerun_command_names_the_lab_when_05_is_stale():
    assert fresh.rerun_command([("04_ddp_training", "tr")]) == "python notebooks/build.py --execute --stale"
    assert fresh.rerun_command([("05_cluster_slurm", "en"), ("04_ddp_training", "tr")]) == (
        "python notebooks/build.py --execute --stale --slurmlab")
