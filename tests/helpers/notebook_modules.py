"""The modules beside the notebooks (``notebooks/build.py``, ``quoted.py``, ``freshness.py``), loaded by path as
notebooks/build.py loads its neighbours: notebooks/ is no package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def load(name: str):
    """``notebooks/<name>.py``, loaded once per test process (``sys.modules['notebook_<name>']``)."""
    key = f"notebook_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, NOTEBOOKS / f"{name}.py")
        sys.modules[key] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[key])
    return sys.modules[key]
