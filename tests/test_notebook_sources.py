"""A malformed notebook source is refused with one line, ``file:line: what to fix``, and nothing is
written (issue 25, N01a–e): ``notebooks/build.py`` runs in a subprocess on a copy of itself in a
temporary checkout, so its ``src/`` and output folders are the temporary ones."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GOOD = "=== md tr\nMetin.\n=== md en\nText.\n=== code\nprint(⟪'bir'‖'one'⟫)\n"

CASES = {
    "md en first": ("20_bad.cells", "=== md en\nEnglish first.\n", ":1: '=== md en' must follow a '=== md tr'"),
    "unknown kind": ("20_bad.cells", GOOD + "\n=== markdown\nx\n",
                     ":8: '=== markdown' is not a cell kind (use md tr, md en, code,"),
    "unbalanced": ("20_bad.cells", GOOD + "=== code\nx = 1\nprint(⟪'yarım'‖'half')\n", ":9: an unbalanced ⟪…‖…⟫"),
    "lone md tr at the end": ("20_bad.cells", GOOD + "=== md tr\nYalnız.\n",
                              ":7: this '=== md tr' block has no '=== md en' block"),
    "text before the first block": ("20_bad.cells", "Giriş\n" + GOOD, ":1: text before the first '=== ' line"),
    "not UTF-8": ("20_bad.cells", GOOD.encode() + b"# \xff\xfe\n",
                  ":7: not UTF-8 text (byte 0xff); save the file as UTF-8"),
    "empty": ("20_bad.cells", "", ": no cells (the file is empty"),
    "blank only": ("20_bad.cells", "\n  \n", ": no cells (the file is empty"),
    "bad name": ("9 bad.cells", GOOD, ": the name '9 bad.cells' cannot name a notebook: use NN_name.cells"),
    "byte-order mark": ("20_bad.cells", b"\xef\xbb\xbf" + GOOD.encode(),  # round 4, N01: was "text before …"
                        ":1: the file starts with a byte-order mark (BOM)"),
}


def checkout(tmp_path: Path, name: str, content) -> Path:
    """A throw-away checkout: notebooks/build.py (with the modules it loads beside it), a good source
    and the one under test."""
    notebooks = tmp_path / "notebooks"
    (notebooks / "src").mkdir(parents=True)
    for module in ("build.py", "quoted.py", "freshness.py"):
        shutil.copy(ROOT / "notebooks" / module, notebooks / module)
    (notebooks / "src" / "10_good.cells").write_text(GOOD, encoding="utf-8")
    bad = notebooks / "src" / name
    bad.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return notebooks


@pytest.mark.parametrize("case", list(CASES))
def test_a_malformed_source_is_one_line_and_nothing_is_written(tmp_path, case):
    name, content, expected = CASES[case]
    notebooks = checkout(tmp_path, name, content)
    done = subprocess.run([sys.executable, str(notebooks / "build.py")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done
    assert done.stderr.strip() == done.stderr.strip().splitlines()[0], done.stderr  # one line, no traceback
    assert done.stderr.startswith(f"notebooks/src/{name}{expected}"), done.stderr
    assert done.stderr.strip().endswith("(nothing written)")
    assert not (notebooks / "tr").exists() and not (notebooks / "en").exists()


def test_the_good_source_alone_builds(tmp_path):
    """The throw-away checkout itself is sound: without the bad file both notebooks are written."""
    notebooks = checkout(tmp_path, "11_also_good.cells", GOOD)
    done = subprocess.run([sys.executable, str(notebooks / "build.py")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (notebooks / "tr").iterdir()) == ["10_good.ipynb", "11_also_good.ipynb"]


def test_the_translation_lock_reads_sources_through_the_same_parser(tmp_path):
    """scripts/translations.py refuses a malformed source with build.py's own line, not a traceback."""
    notebooks = checkout(tmp_path, "20_bad.cells", GOOD.encode() + b"\xff\n")
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "translations.py", tmp_path / "scripts" / "translations.py")
    done = subprocess.run([sys.executable, str(tmp_path / "scripts" / "translations.py"), "check"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done
    assert done.stderr.startswith("notebooks/src/20_bad.cells:7: not UTF-8 text"), done.stderr
    assert not (notebooks / "tr").exists()


def translations_checkout(tmp_path: Path) -> Path:
    """A throw-away checkout for scripts/translations.py: a good source, the script and the package."""
    checkout(tmp_path, "11_also_good.cells", GOOD)
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "translations.py", tmp_path / "scripts" / "translations.py")
    shutil.copytree(ROOT / "ddp_tutorial", tmp_path / "ddp_tutorial", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    return tmp_path / "scripts" / "translations.py"


def test_a_damaged_lock_or_catalogue_is_named_by_translations_py(tmp_path):
    """N03/N04 (round 4): a truncated translations.lock.json or a broken messages/en.toml gave the parser's
    message without the file's name."""
    script = translations_checkout(tmp_path)
    (tmp_path / "translations.lock.json").write_text((ROOT / "translations.lock.json").read_text()[:1000])
    done = subprocess.run([sys.executable, str(script), "check"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("translations.lock.json: "), done.stderr
    assert "Traceback" not in done.stderr
    (tmp_path / "translations.lock.json").unlink()
    catalogue = tmp_path / "ddp_tutorial" / "messages" / "en.toml"
    catalogue.write_text(catalogue.read_text(encoding="utf-8") + "\n[broken\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(script), "check"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("ddp_tutorial/messages/en.toml: "), done.stderr
    assert "Traceback" not in done.stderr
