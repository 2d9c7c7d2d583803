"""The package's shape, as issue 10 asks for it: a story module a newcomer can read, modules of one
concept each (≤ 450 lines), no import cycle, no message catalogue in code, no path patching in the
notebooks, ruff clean, and a docs/architecture.md that names only what exists."""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "ddp_tutorial"
MODULES = sorted(p for p in PACKAGE.rglob("*.py"))
MAX_LINES = 450


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_story_module_meets_ddp_early_and_is_short():
    lines = (PACKAGE / "train.py").read_text().splitlines()
    assert len(lines) <= 300, f"train.py has {len(lines)} lines (at most 300)"
    first = {needle: next((i for i, line in enumerate(lines, 1) if needle in line), None)
             for needle in ("init_process_group(", "DistributedDataParallel(", "set_epoch(",
                            "destroy_process_group(")}
    assert first["init_process_group("] and first["init_process_group("] <= 150, first
    assert first["DistributedDataParallel("] and first["DistributedDataParallel("] <= 150, first
    assert first["set_epoch("] and first["destroy_process_group("], first
    # what docs/architecture.md says about it is true
    english = " ".join((REPO / "docs" / "architecture.md").read_text().split())
    turkish = " ".join((REPO / "docs" / "architecture.tr.md").read_text().split())
    init, ddp = first["init_process_group("], first["DistributedDataParallel("]
    assert f"({len(lines)} lines; `init_process_group(` at line {init}, `DistributedDataParallel(` at line {ddp})" \
        in english, "docs/architecture.md states other line numbers for train.py"
    assert f"({len(lines)} satır; `init_process_group(` {init}. satırda, `DistributedDataParallel(` {ddp}. satırda)" \
        in turkish, "docs/architecture.tr.md states other line numbers for train.py"
    # the reading order the package states starts with the story module
    doc = importlib.import_module("ddp_tutorial").__doc__
    order = re.findall(r"``([a-z_]+)(?:\.py)?``", doc)
    assert order[0] == "train", f"the stated reading order starts with {order[0]}, not train.py"


def test_ddp_is_wrapped_in_exactly_one_place():
    wrapped = [f"{p.relative_to(REPO)}:{i}" for p in MODULES
               for i, line in enumerate(p.read_text().splitlines(), 1)
               if "DistributedDataParallel(" in line and not line.lstrip().startswith("#")]
    assert wrapped == ["ddp_tutorial/train.py:" + wrapped[0].split(":")[1]] and len(wrapped) == 1, wrapped


def test_no_module_is_over_450_lines():
    long = {str(p.relative_to(REPO)): n for p in MODULES if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def _imports(path: Path) -> set[str]:
    """Package modules this module imports, at any depth (a late import is still a dependency)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("ddp_tutorial")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("ddp_tutorial"):
                continue
            found.add(target)
            for alias in node.names:  # `from . import data` imports the module ddp_tutorial.data
                found.add(f"{target}.{alias.name}")
    known = {_module_name(p) for p in MODULES}
    return {m for m in found if m in known and m != name}


def test_the_package_has_no_import_cycle():
    graph = {_module_name(p): _imports(p) for p in MODULES}
    # a package's __init__ re-exporting its submodules is not a cycle of ideas: drop parent edges
    graph = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in graph.items()}
    seen, stack, cycles = set(), [], []

    def visit(m):
        if m in stack:
            cycles.append(stack[stack.index(m):] + [m])
            return
        if m in seen:
            return
        seen.add(m)
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            visit(d)
        stack.pop()

    for m in sorted(graph):
        visit(m)
    assert not cycles, "import cycles: " + "; ".join(" → ".join(c) for c in cycles)


def test_no_private_name_crosses_modules():
    crossings = []
    for p in MODULES:
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("ddp_tutorial")):
                crossings += [f"{p.relative_to(REPO)}: {a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
    assert not crossings, crossings


def test_at_most_10_catalogue_lines_in_code():
    """Messages live in ddp_tutorial/messages/*.toml: a line like `"tr": "…"` in code is a catalogue."""
    pattern = re.compile(r"""^\s*["'](tr|en)["']\s*:\s*(f?["'])""")
    lines = [f"{p.relative_to(REPO)}:{i}" for p in MODULES
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.match(line)]
    assert len(lines) <= 10, lines


def test_notebooks_import_and_never_patch_paths():
    for cells in sorted((REPO / "notebooks" / "src").glob("*.cells")):
        text = cells.read_text()
        assert "sys.path" not in text, f"{cells.name} patches sys.path"
        assert "setup_notebook" not in text, f"{cells.name}: use ddp_tutorial.notebook.setup()"


@pytest.mark.parametrize("name", ["01_model_baseline", "02_sampler"])
def test_early_notebooks_do_not_import_ipyparallel_to_set_up(name):
    text = (REPO / "notebooks" / "src" / f"{name}.cells").read_text()
    assert "import ipp" not in text and "ipp," not in text, f"{name} imports ddp_tutorial.ipp"


def test_ruff_is_clean():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is missing: pip install -e '.[test]' (it is in the test extra)"
    done = subprocess.run([ruff, "check", "--no-cache", str(REPO)], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


# -- docs/architecture.md names only what exists ---------------------------------------------------

ROW = re.compile(r"^\|[^|]*\|\s*`([^`]+)`\s*\|(.*)\|\s*$")
NAME = re.compile(r"`([A-Za-z_][A-Za-z0-9_.]*)(\([^`]*\))?`")


def _documented(name="architecture.md"):
    """(module path, names) for every table row of docs/architecture.md whose second cell is a
    module: names are the `Backticked` classes (CamelCase) and `functions()` of its third cell."""
    rows = []
    for line in (REPO / "docs" / name).read_text().splitlines():
        m = ROW.match(line)
        if not m or not m.group(1).endswith((".py", "/")):
            continue
        names = [n for n, call in NAME.findall(m.group(2)) if call or n[:1].isupper() and not n.isupper()]
        rows.append((m.group(1), names))
    return rows


def test_architecture_doc_lists_modules():
    rows = _documented()
    assert len(rows) >= 15, f"docs/architecture.md maps only {len(rows)} modules"
    documented = {path.rstrip("/") for path, _ in rows}
    for p in MODULES:
        rel = str(p.relative_to(PACKAGE))
        folder = str(p.parent.relative_to(PACKAGE))
        assert rel in documented or folder in documented or rel.replace("/__init__.py", "") in documented, (
            f"ddp_tutorial/{rel} is not in docs/architecture.md")


@pytest.mark.parametrize("path,names", _documented(), ids=[r[0] for r in _documented()])
def test_architecture_doc_names_exist(path, names):
    target = PACKAGE / path
    assert target.exists(), f"docs/architecture.md names ddp_tutorial/{path}, which does not exist"
    if target.is_dir():
        target = target / "__init__.py"
    if target.name == "__main__.py":  # importing it would run the command line
        return
    module = importlib.import_module(_module_name(target))
    for name in names:
        obj = module
        for part in name.split("."):
            assert hasattr(obj, part), f"docs/architecture.md: {path} has no {name}"
            obj = getattr(obj, part)


def test_the_turkish_architecture_doc_maps_the_same_modules_and_names():
    english, turkish = _documented("architecture.md"), _documented("architecture.tr.md")
    assert [path for path, _ in turkish] == [path for path, _ in english]
    assert [sorted(set(n)) for _, n in turkish] == [sorted(set(n)) for _, n in english]
