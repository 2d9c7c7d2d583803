"""Build the Turkish and English notebooks from one source each, and run them.

Every notebook has one source, ``notebooks/src/NN_name.cells``: its code cells are written
once, so ``notebooks/tr/NN_name.ipynb`` and ``notebooks/en/NN_name.ipynb`` have identical code
by construction; each markdown cell is written twice, once per language. The format::

    === md tr
    Türkçe metin …
    === md en
    English text …
    === code
    print("the same code in both notebooks")
    === code raises-exception
    raise RuntimeError("a cell that is meant to fail (nbval and nbclient expect the error)")
    === exercise steps_per_epoch
    print("optional: code shown between the task and the attendee's cell")

A markdown cell does not write a number that comes from a stored result, a count or a tolerance in
code: it writes ``⟦name⟧`` and the build fills in ``notebooks/quoted.py``'s value, written the way the
notebook's language writes numbers (``⟦spin.idle⟧`` → ``47.016`` in Turkish, ``47,016`` in English).

(a ``=== md tr`` block must be followed at once by its ``=== md en`` block; nothing may stand
before the first ``===`` line; the file is UTF-8, named ``NN_name.cells``, and not empty). A source
that breaks a rule is refused with one line, ``notebooks/src/NN_name.cells:LINE: what to fix``,
and nothing is written.

``=== exercise NAME`` stands for the cells every checked exercise has, built from
:mod:`ddp_tutorial.exercises`: the task (markdown: the ``title`` and ``task`` messages of ``[ex.NAME]``
in each language), the lines below the block line as a code cell (only if there are any), the attendee's
cell (``# EXERCISE NAME`` and the placeholder, :meth:`Exercise.placeholder`) and the check cell
(``ex.NAME.check()``).

Code is written once, but its comments and the text it prints are in the notebook's language:
``⟪Türkçe‖English⟫`` anywhere in a code cell becomes the Turkish part in ``tr/`` and the English
part in ``en/``, e.g. ``print(⟪"Hazır"‖"Ready"⟫)`` or ``x = 1  # ⟪bir‖one⟫``. Only comments and
string literals may differ: the parity test (tests/test_notebooks_parity.py) compares the two
languages' code token by token with comments and strings set aside.

    python notebooks/build.py                   # rewrite both languages from the sources
    python notebooks/build.py --execute         # … and run them, storing real outputs
    python notebooks/build.py --execute 04      # only the notebooks whose name starts with 04
    python notebooks/build.py --execute --stale # only those whose stored outputs show an old message
    python notebooks/build.py --solutions       # instructors: notebooks/solutions/{tr,en}, exercises solved
    python notebooks/build.py --confirm-translations   # after updating Turkish texts: re-lock their English

Every Turkish text records the sha256 of the English it translates in ``translations.lock.json``
(``scripts/translations.py``); ``tests/test_translation_guards.py`` fails, naming the block, when an
English text changed or is new. Update its Turkish twin, then regenerate the lock with one command:
``python notebooks/build.py --confirm-translations`` (same as ``python scripts/translations.py confirm``).

Without ``--execute`` a code cell whose code did not change keeps the outputs stored with it
(so a markdown fix needs no new run); a changed code cell loses them until the next ``--execute``.
``--execute`` runs each notebook in its own folder with the environment it is given, e.g.
``DDP_TUTORIAL_DATASET=fashion-mnist DDP_TUTORIAL_ROOT=/path/to/staged/data``, so the stored
outputs come from a real run; the data set is recorded in the notebook's metadata.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ddp_tutorial.i18n import BILINGUAL  # ⟪Türkçe‖English⟫: one text per language

if TYPE_CHECKING:  # nbformat is imported where a notebook is made or read (1.2 s: its JSON schema validators),
    import nbformat  # so that a malformed source is said at once

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "src"
LANGUAGES = ("tr", "en")
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def sibling(name: str):
    """The module ``notebooks/<name>.py`` beside this file (loaded by path: this file runs as a script,
    and the tests load it by path too)."""
    key = f"notebook_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, Path(__file__).resolve().parent / f"{name}.py")
        sys.modules[key] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[key])
    return sys.modules[key]


class SourceError(ValueError):
    """A notebook source the build refuses (its message names the file and what to fix)."""


CHECK_CELL = ("from ddp_tutorial import exercises as ex\n\n"
              "ex.{0}.check()\n# ex.{0}.hint()  ·  ex.{0}.hint(2)  ·  ex.{0}.solution()")



KINDS = ("md tr", "md en", "code", "code raises-exception", "exercise NAME")
SOURCE_NAME = re.compile(r"^\d\d_[a-z0-9_]+\.cells$")  # also the notebooks' names and their cells' ids


def shown(path: Path) -> str:
    """The path as a maintainer types it: relative to the checkout when it is inside it."""
    try:
        return str(path.resolve().relative_to(HERE.parent))
    except ValueError:
        return str(path)


def read_source(path: Path) -> str:
    """The text of a source file; a clear error when it is not UTF-8 text."""
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):  # N01: some editors write one; it would read as text before the first block
        raise SourceError(f"{shown(path)}:1: the file starts with a byte-order mark (BOM); save it as UTF-8 "
                          f"without BOM")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise SourceError(f"{shown(path)}:{line}: not UTF-8 text (byte 0x{data[error.start]:02x}); "
                          f"save the file as UTF-8") from None


def unbalanced(text: str) -> int | None:
    """The 0-based line of ``text`` holding a ``⟪``, ``‖`` or ``⟫`` outside a complete ``⟪tr‖en⟫``."""
    rest = BILINGUAL.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    stray = re.search("[⟪⟫‖]", rest)
    return None if stray is None else rest.count("\n", 0, stray.start())


def parse(path: Path) -> list:
    """The cells of a source file: ("code", text), ("code raises-exception", text),
    ("md", {"tr": text, "en": text}) or ("exercise", (name, text)). A malformed source raises
    :class:`SourceError` with one line: ``file:line: what is wrong and what to do``."""
    where = shown(path)
    if not SOURCE_NAME.match(path.name):
        raise SourceError(f"{where}: the name {path.name!r} cannot name a notebook: use NN_name.cells "
                          f"(two digits, '_', then lower-case letters, digits or '_', e.g. 10_my_topic.cells)")
    cells, kind, start, lines = [], None, 0, []

    def flush():
        if kind is None:
            return
        raw = "\n".join(lines)
        text = raw.strip("\n")
        if kind.startswith(("code", "exercise ")) and (bad := unbalanced(raw)) is not None:
            raise SourceError(f"{where}:{start + 1 + bad}: an unbalanced ⟪…‖…⟫ (write ⟪Türkçe‖English⟫ "
                              f"with one ‖ and both brackets, in the same cell)")
        if kind in ("code", "code raises-exception"):
            cells.append((kind, text))
        elif kind.startswith("exercise "):
            cells.append(("exercise", (exercise(path, kind[len("exercise "):].strip(), start).name, text)))
        elif kind.startswith("md ") and (names := sibling("quoted").unknown(text)):
            raise SourceError(f"{where}:{start}: ⟦{names[0]}⟧ names no number of notebooks/quoted.py "
                              f"(use a name of its QUOTES, or add the number there with its source)")
        elif kind == "md tr":
            cells.append(("md", {"tr": text, "line": start}))
        else:  # md en: completes the Turkish cell just before it
            if not cells or cells[-1][0] != "md" or "en" in cells[-1][1]:
                raise SourceError(f"{where}:{start}: '=== md en' must follow a '=== md tr' block "
                                  f"(write the Turkish text first, then its English)")
            cells[-1][1]["en"] = text

    for number, line in enumerate(read_source(path).splitlines(), 1):
        if line.startswith("=== "):
            flush()
            kind, start, lines = line[4:].strip(), number, []
            if kind not in KINDS[:4] and not (kind.startswith("exercise ") and kind[9:].strip()):
                raise SourceError(f"{where}:{number}: {line.strip()!r} is not a cell kind "
                                  f"(use {', '.join(KINDS)})")
        elif kind is None and line.strip():
            raise SourceError(f"{where}:{number}: text before the first '=== ' line would be lost: "
                              f"{line.strip()[:60]!r}; start the file with a block line such as '=== md tr'")
        else:
            lines.append(line)
    flush()
    for cell_kind, content in cells:
        if cell_kind == "md" and "en" not in content:
            raise SourceError(f"{where}:{content['line']}: this '=== md tr' block has no '=== md en' block "
                              f"after it (every Turkish text is followed by its English)")
    if not cells:
        raise SourceError(f"{where}: no cells (the file is empty or holds only blank lines); "
                          f"a source needs at least one '=== ' block, e.g. '=== md tr'")
    return [(k, {"tr": c["tr"], "en": c["en"]}) if k == "md" else (k, c) for k, c in cells]


def exercise(path: Path, name: str, line: int | None = None):
    """The exercise ``name`` of :mod:`ddp_tutorial.exercises` (a clear error when there is none)."""
    from ddp_tutorial import exercises
    if name not in exercises.BY_NAME:
        raise SourceError(f"{shown(path)}{'' if line is None else f':{line}'}: '=== exercise {name}': "
                          f"ddp_tutorial.exercises has no such exercise (it has {', '.join(exercises.BY_NAME)})")
    return exercises.get(name)


def localize(code: str, lang: str) -> str:
    """The code of a cell in one language: ``⟪tr‖en⟫`` → its ``lang`` part (the package's
    :func:`ddp_tutorial.i18n.localize_code`, which the exercises' solutions use too)."""
    from ddp_tutorial.i18n import localize_code
    try:
        return localize_code(code, lang)
    except ValueError as error:
        raise SourceError(str(error)) from None


def build(path: Path, lang: str) -> nbformat.NotebookNode:
    import nbformat
    nb = nbformat.v4.new_notebook()
    for kind, content in parse(path):
        if kind == "exercise":
            name, shown_first = content
            checked = exercise(path, name)
            nb.cells.append(nbformat.v4.new_markdown_cell(checked.task(lang)))
            if shown_first:
                nb.cells.append(nbformat.v4.new_code_cell(localize(shown_first, lang)))
            nb.cells.append(nbformat.v4.new_code_cell(checked.placeholder(lang)))
            nb.cells.append(nbformat.v4.new_code_cell(CHECK_CELL.format(name)))
        elif kind.startswith("code"):
            cell = nbformat.v4.new_code_cell(localize(content, lang))
            if kind == "code raises-exception":  # the tag both nbval and nbclient understand
                cell.metadata["tags"] = ["raises-exception"]
            nb.cells.append(cell)
        else:  # the ⟦name⟧ numbers filled in from their sources
            try:
                text = sibling("quoted").fill(content[lang], lang)
            except sibling("quoted").QuoteError as error:
                raise SourceError(f"{shown(path)}: {error}") from None
            nb.cells.append(nbformat.v4.new_markdown_cell(text))
    for i, cell in enumerate(nb.cells):  # stable ids: diffs stay small when the notebooks are rebuilt
        cell["id"] = f"{path.stem[:2]}-{i:02d}-{cell.cell_type[:4]}"
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata["language"] = lang
    nb.metadata["ddp_tutorial"] = {"source": f"notebooks/src/{path.name}", "language": lang}
    return nb


def fill_solutions(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The instructors' copy: every exercise cell (first line ``# EXERCISE name``) holds the solution
    of :mod:`ddp_tutorial.exercises` instead of the placeholder, so every ``check()`` passes."""
    from ddp_tutorial import exercises
    for cell in nb.cells:
        first = cell.source.split("\n", 1)[0] if cell.cell_type == "code" else ""
        if first.startswith("# EXERCISE "):
            name = first[len("# EXERCISE "):].strip()
            cell.source = f"# EXERCISE {name} (solution)\n" + exercises.get(name).solution_code(nb.metadata["language"])
    nb.metadata["ddp_tutorial"]["solutions"] = True
    return nb


def keep_outputs(nb: nbformat.NotebookNode, target: Path) -> None:
    """Copy the stored outputs of ``target`` into ``nb`` for the code cells whose code is unchanged."""
    if not target.exists():
        return
    import nbformat
    old = nbformat.read(target, as_version=4)
    old_code = [c for c in old.cells if c.cell_type == "code"]
    new_code = [c for c in nb.cells if c.cell_type == "code"]
    unchanged = len(old_code) == len(new_code) and all(a.source == b.source for a, b in zip(old_code, new_code))
    for before, after in zip(old_code, new_code):
        if before.source == after.source:  # what the run stored with it: outputs, count, timings
            after.outputs, after.execution_count = before.outputs, before.execution_count
            if "execution" in before.metadata:
                after.metadata["execution"] = before.metadata["execution"]
    executed = old.metadata.get("ddp_tutorial", {}).get("executed_with")
    if unchanged and executed:  # the whole notebook still shows one real run
        nb.metadata["ddp_tutorial"]["executed_with"] = executed
        nb.metadata["language_info"] = old.metadata.get("language_info", nb.metadata["language_info"])


MAX_LINE = 100  # code lines longer than this are clipped in JupyterLab beside the file browser
# An absolute path of some machine in a stored output (the author's checkout, home, temporary folders).
MACHINE_PATH = re.compile(r"(?<![\w.~$<>/-])/(?:tmp|work|root|home|Users|private|var/folders|scratch)/[^\s\"'`)\]]*")


def long_lines(nb: nbformat.NotebookNode, name: str) -> list:
    """``name cell N line M: K characters`` for every code line longer than MAX_LINE."""
    return [f"{name} cell {i} line {j}: {len(line)} characters (at most {MAX_LINE})"
            for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
            for j, line in enumerate(cell.source.splitlines(), 1) if len(line) > MAX_LINE]


def _output_texts(output):
    """(container, key) for each text field of an output that can show a path."""
    if "text" in output:
        yield output, "text"
    for key in ("text/plain", "text/html", "text/markdown", "text/latex"):
        if key in output.get("data", {}):
            yield output["data"], key
    if "traceback" in output:
        for i in range(len(output["traceback"])):
            yield output["traceback"], i
    if "evalue" in output:
        yield output, "evalue"


def scrub_paths(nb: nbformat.NotebookNode) -> None:
    """Stored outputs show no machine's paths: the data root as ``$DDP_TUTORIAL_ROOT``, the checkout
    as paths relative to it, the home folder as ``~``, a temporary folder as ``…``."""
    root = os.environ.get("DDP_TUTORIAL_ROOT")
    rules = [(re.escape(str(Path(root).resolve())) + r"(?=[/\s\"']|$)", "$DDP_TUTORIAL_ROOT")] if root else []
    rules += [(r"((?:data root|veri kökü): )/\S+", r"\1$DDP_TUTORIAL_ROOT"),  # runs before notebook.setup hid it
              (re.escape(str(HERE.parent)) + "/", ""), (re.escape(str(HERE.parent)) + r"\b", "."),
              (re.escape(str(Path.home())) + "/", "~/"), (r"/tmp/[^/\s\"']+/", "…/")]
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            for container, key in list(_output_texts(output)):
                value = container[key]
                joined = "".join(value) if isinstance(value, list) else value
                for pattern, repl in rules:
                    joined = re.sub(pattern, repl, joined)
                container[key] = joined


def machine_paths(nb: nbformat.NotebookNode, name: str) -> list:
    """``name cell N: /a/path`` for every absolute machine path left in a stored output."""
    found = []
    for i, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            for container, key in _output_texts(output):
                value = container[key]
                text = "".join(value) if isinstance(value, list) else value
                found += [f"{name} cell {i}: {m.group(0)[:80]}" for m in MACHINE_PATH.finditer(text)]
    return found


def execute(nb: nbformat.NotebookNode, folder: Path, timeout: int) -> None:
    from nbclient import NotebookClient
    os.environ["DDP_TUTORIAL_UNWATCHED"] = "1"  # the kernel's cells have no front end (ddp_tutorial.ipp.progress)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(folder)}})
    client.execute()
    nb.metadata["ddp_tutorial"]["executed_with"] = {
        "dataset": os.environ.get("DDP_TUTORIAL_DATASET", "mnist"),
        "date": time.strftime("%Y-%m-%d"),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("only", nargs="*", help="build only notebooks whose name starts with these")
    parser.add_argument("--execute", action="store_true", help="run the notebooks and store their outputs")
    parser.add_argument("--languages", nargs="+", default=list(LANGUAGES), choices=LANGUAGES)
    parser.add_argument("--stale", action="store_true",
                        help="only the notebooks (and languages) whose stored outputs show a message the "
                             "catalogue no longer prints (notebooks/freshness.py); each is named first")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    parser.add_argument("--solutions", action="store_true",
                        help="write the instructors' copies, exercises solved, to notebooks/solutions/{tr,en} "
                             "(git-ignored; never mixed with the attendees' notebooks)")
    parser.add_argument("--slurmlab", action="store_true",
                        help="run the notebooks on the login node of the test suite's two-node SLURM "
                             "cluster (tests/helpers/slurmlab.py; root), so that 05 really submits its jobs")
    parser.add_argument("--confirm-translations", action="store_true",
                        help="record the current English texts as translated (translations.lock.json); "
                             "run it after the Turkish twins were updated")
    args = parser.parse_args(argv)
    if args.confirm_translations:
        import runpy
        try:  # the sources are read through this file's parse, loaded again: catch by the base class
            runpy.run_path(str(HERE.parent / "scripts" / "translations.py"))["confirm"]()
        except ValueError as error:
            print(f"{error} (nothing written)", file=sys.stderr)
            return 2
        print("wrote translations.lock.json")
        return 0
    try:
        return _main(args, parser, argv)
    except SourceError as error:
        print(f"{error} (nothing written)", file=sys.stderr)
        return 2


def _main(args, parser, argv) -> int:
    if args.slurmlab:
        sys.path.insert(0, str(HERE.parent / "tests" / "helpers"))
        import subprocess

        from slurmlab import SlurmLab
        with SlurmLab() as lab:
            # The kernels run on the lab's login node (its hub namespace, which the nodes reach):
            # PATH with the lab's wrappers first, SLURM_CONF, and the GPUs of the lab are stand-ins.
            env = dict(lab.env, DDP_TUTORIAL_SLURM_GPUS=os.environ.get("DDP_TUTORIAL_SLURM_GPUS", "0"))
            rest = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--slurmlab"]
            return subprocess.run(lab.login_command([sys.executable, str(Path(__file__).resolve()), *rest]),
                                  env=env).returncode
    return _build(args, parser)


def stale_pairs(only, execute: bool) -> set:
    """For ``--stale``: the (notebook, language) pairs whose stored outputs show an old message,
    each named on stdout with its first stale line; an empty set when there are none."""
    freshness = sibling("freshness")
    stale = freshness.stale_notebooks(HERE, tuple(only))
    for (stem, lang), lines in stale.items():
        print(f"stale: {lang}/{stem}.ipynb ({len(lines)} line(s); {lines[0][:100]})")
    if not stale:
        print("no stored output shows an old message: nothing to do")
    elif not execute:
        print(f"only rebuilt; to store new outputs re-execute them: {freshness.rerun_command(stale)}")
    return set(stale)


def _build(args, parser) -> int:
    sources = sorted(p for p in SOURCES.glob("*.cells") if not args.only or p.name.startswith(tuple(args.only)))
    if not sources:
        parser.error("no matching source in notebooks/src")
    pairs = stale_pairs(args.only, args.execute) if args.stale else None  # None: every notebook in every language
    if pairs is not None:
        sources = [path for path in sources if any(stem == path.stem for stem, _ in pairs)]
        if not sources:
            return 0
    for path in sources:  # every source read first: a malformed one is said before anything is built
        parse(path)
    too_long = [line for path in sources for lang in args.languages
                for line in long_lines(build(path, lang), f"{lang}/{path.stem}")]
    if too_long and args.execute:  # checked before anything is run
        print("code lines too long (fix them in notebooks/src):\n  " + "\n  ".join(too_long), file=sys.stderr)
        return 1
    for path in sources:
        for lang in args.languages:
            if pairs is not None and (path.stem, lang) not in pairs:
                continue
            folder = HERE / "solutions" / lang if args.solutions else HERE / lang
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / f"{path.stem}.ipynb"
            nb = fill_solutions(build(path, lang)) if args.solutions else build(path, lang)
            if args.execute:
                began = time.monotonic()
                execute(nb, folder, args.timeout)
                print(f"ran {target.relative_to(HERE.parent)} in {time.monotonic() - began:.0f} s", flush=True)
            else:
                keep_outputs(nb, target)
            scrub_paths(nb)
            paths = machine_paths(nb, target.name)
            if paths:  # stored outputs must not show this machine's paths
                print(f"{target.relative_to(HERE.parent)} not written: machine paths in its outputs:\n  "
                      + "\n  ".join(paths), file=sys.stderr)
                return 1
            import nbformat
            nbformat.validate(nb)
            nbformat.write(nb, target)
            print(f"wrote {target.relative_to(HERE.parent)}")
    warn_stale_turkish()
    if too_long:  # the notebooks are written (the parity test keeps passing), but the build fails
        print("code lines too long (fix them in notebooks/src):\n  " + "\n  ".join(too_long), file=sys.stderr)
        return 1
    return 0


def warn_stale_turkish() -> None:
    """After a build: name every Turkish text that is stale or missing (scripts/translations.py check),
    on stderr; the build itself goes on (the guard test fails on them)."""
    import runpy

    script = HERE.parent / "scripts" / "translations.py"
    found = runpy.run_path(str(script))["problems"]() if script.is_file() else []
    if found:
        print(f"warning: {len(found)} Turkish text(s) to update (python scripts/translations.py check):\n  "
              + "\n  ".join(found[:20]) + ("\n  …" if len(found) > 20 else ""), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
