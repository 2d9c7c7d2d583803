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

(a ``=== md tr`` block must be followed at once by its ``=== md en`` block).

    python notebooks/build.py                   # rewrite both languages from the sources
    python notebooks/build.py --execute         # … and run them, storing real outputs
    python notebooks/build.py --execute 04      # only the notebooks whose name starts with 04

Without ``--execute`` a code cell whose code did not change keeps the outputs stored with it
(so a markdown fix needs no new run); a changed code cell loses them until the next ``--execute``.
``--execute`` runs each notebook in its own folder with the environment it is given, e.g.
``DDP_TUTORIAL_DATASET=fashion-mnist DDP_TUTORIAL_ROOT=/path/to/staged/data``, so the stored
outputs come from a real run; the data set is recorded in the notebook's metadata.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "src"
LANGUAGES = ("tr", "en")
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def parse(path: Path) -> list:
    """The cells of a source file: ("code", text), ("code raises-exception", text) or
    ("md", {"tr": text, "en": text})."""
    cells, kind, lines = [], None, []

    def flush():
        if kind is None:
            return
        text = "\n".join(lines).strip("\n")
        if kind in ("code", "code raises-exception"):
            cells.append((kind, text))
        elif kind == "md tr":
            cells.append(("md", {"tr": text}))
        else:  # md en: completes the Turkish cell just before it
            if not cells or cells[-1][0] != "md" or "en" in cells[-1][1]:
                raise ValueError(f"{path.name}: '=== md en' must follow a '=== md tr' block")
            cells[-1][1]["en"] = text

    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("=== "):
            flush()
            kind, lines = line[4:].strip(), []
            if kind not in ("code", "code raises-exception", "md tr", "md en"):
                raise ValueError(f"{path.name}: unknown block {line!r}")
        else:
            lines.append(line)
    flush()
    unpaired = [c for c in cells if c[0] == "md" and set(c[1]) != {"tr", "en"}]
    if unpaired:
        raise ValueError(f"{path.name}: a '=== md tr' block has no '=== md en' block")
    return cells


def build(path: Path, lang: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    for kind, content in parse(path):
        if kind.startswith("code"):
            cell = nbformat.v4.new_code_cell(content)
            if kind == "code raises-exception":  # the tag both nbval and nbclient understand
                cell.metadata["tags"] = ["raises-exception"]
            nb.cells.append(cell)
        else:
            nb.cells.append(nbformat.v4.new_markdown_cell(content[lang]))
    for i, cell in enumerate(nb.cells):  # stable ids: diffs stay small when the notebooks are rebuilt
        cell["id"] = f"{path.stem[:2]}-{i:02d}-{cell.cell_type[:4]}"
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata["language"] = lang
    nb.metadata["ddp_tutorial"] = {"source": f"notebooks/src/{path.name}", "language": lang}
    return nb


def keep_outputs(nb: nbformat.NotebookNode, target: Path) -> None:
    """Copy the stored outputs of ``target`` into ``nb`` for the code cells whose code is unchanged."""
    if not target.exists():
        return
    old = nbformat.read(target, as_version=4)
    old_code = [c for c in old.cells if c.cell_type == "code"]
    new_code = [c for c in nb.cells if c.cell_type == "code"]
    unchanged = len(old_code) == len(new_code) and all(a.source == b.source for a, b in zip(old_code, new_code))
    for before, after in zip(old_code, new_code):
        if before.source == after.source:
            after.outputs, after.execution_count = before.outputs, before.execution_count
    executed = old.metadata.get("ddp_tutorial", {}).get("executed_with")
    if unchanged and executed:  # the whole notebook still shows one real run
        nb.metadata["ddp_tutorial"]["executed_with"] = executed


def execute(nb: nbformat.NotebookNode, folder: Path, timeout: int) -> None:
    from nbclient import NotebookClient
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
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    parser.add_argument("--slurmlab", action="store_true",
                        help="run the notebooks on the login node of the test suite's two-node SLURM "
                             "cluster (tests/slurmlab.py; root), so that 05 really submits its jobs")
    args = parser.parse_args(argv)
    if args.slurmlab:
        sys.path.insert(0, str(HERE.parent / "tests"))
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


def _build(args, parser) -> int:
    sources = sorted(p for p in SOURCES.glob("*.cells") if not args.only or p.name.startswith(tuple(args.only)))
    if not sources:
        parser.error("no matching source in notebooks/src")
    for path in sources:
        for lang in args.languages:
            folder = HERE / lang
            folder.mkdir(exist_ok=True)
            target = folder / f"{path.stem}.ipynb"
            nb = build(path, lang)
            if args.execute:
                began = time.monotonic()
                execute(nb, folder, args.timeout)
                print(f"ran {target.relative_to(HERE.parent)} in {time.monotonic() - began:.0f} s", flush=True)
            else:
                keep_outputs(nb, target)
            nbformat.validate(nb)
            nbformat.write(nb, target)
            print(f"wrote {target.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
