"""A site's GPU nodes as the torch build rule needs them, read from the site tables (:mod:`ddp_tutorial.sites`).

Each GPU partition's compute capability comes from its ``gpu`` field (``"V100 16 GB, sm_70"`` → ``(7, 0)``), the
lowest driver the site documents from its ``[gpu]`` table. :data:`SITES` holds every shipped table's;
:func:`site_named` also answers the session's table (``$DDP_TUTORIAL_SITE``) and a table's file, which is what
``python -m ddp_tutorial.gpu choose --site …`` and ``site-check --site …`` are given. :mod:`ddp_tutorial.gpu`
applies the build rule to these. No torch import: ``scripts/setup.sh`` asks before torch exists.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from . import sites as site_tables

Capability = Tuple[int, int]


@dataclass(frozen=True)
class Site:
    """A centre's GPU partitions (their compute capability), the lowest driver it documents, and the module
    that gives a Python >= 3.11 on its login nodes (scripts/python_check.sh reads the first quoted
    ``python_module`` value of this file), checked on the site itself or not."""

    name: str
    driver: str
    partitions: Dict[str, Capability]
    python_module: str = ""
    python_module_verified: bool = False


#: The module that gives a Python >= 3.11 on a site's login nodes, and whether that name was checked there
#: (scripts/python_check.sh reads the first quoted ``python_module`` value of this file: it cannot import the
#: package). TRUBA: python.rst says comp/python/3.12.2, the ARF page's older module list 3.12.0, users' notes
#: 3.12.2 does not exist (login nodes: python3 3.9.18). Unchecked: `module av python` tells.
PYTHON_MODULES = {"truba": dict(python_module="comp/python/3.12.0", python_module_verified=False)}


#: NVIDIA's data-centre GPUs by the name a GRES type gives them (``site derive`` writes ``gpu = "v100"``) → their
#: compute capability (NVIDIA's CUDA GPUs list, developer.nvidia.com/cuda-gpus): a table that names only the model
#: still tells the build rule what its nodes need. A model not listed here needs ``sm_XY`` in the field.
MODEL_CAPABILITY: Dict[str, Capability] = {
    "k80": (3, 7), "p100": (6, 0), "p40": (6, 1), "v100": (7, 0), "t4": (7, 5), "a100": (8, 0), "a30": (8, 0),
    "a40": (8, 6), "a10": (8, 6), "l4": (8, 9), "l40": (8, 9), "l40s": (8, 9), "h100": (9, 0), "h200": (9, 0),
    "gh200": (9, 0), "b200": (10, 0),
}


def capability_of(gpu_text: Optional[str]) -> Optional[Capability]:
    """A site table's ``gpu`` field → its compute capability: ``sm_XY`` where the field says it
    ("V100 16 GB, sm_70" → ``(7, 0)``), else the model's (``"v100"`` → ``(7, 0)``); None when neither is known."""
    match = re.search(r"\bsm_(\d+)(\d)\b", gpu_text or "")
    if match:
        return int(match.group(1)), int(match.group(2))
    models = [MODEL_CAPABILITY[word] for word in re.findall(r"[a-z0-9]+", (gpu_text or "").lower())
              if word in MODEL_CAPABILITY]
    return min(models) if models else None  # "H100 / H200": what every node of the partition supports


def site_gpus(table: "site_tables.Site") -> Optional[Site]:
    """A site table's GPU nodes as the build rule needs them: each GPU partition's compute capability (from its
    ``gpu`` field), the lowest driver its ``[gpu]`` table documents (``""``: not stated), the Python module of
    :data:`PYTHON_MODULES`; None when no partition names its GPUs' ``sm_XY``."""
    partitions = {p.name: capability_of(p.gpu) for p in table.partitions.values() if p.gpus_per_node}
    partitions = {name: cap for name, cap in partitions.items() if cap is not None}
    if not partitions:
        return None
    return Site(table.name, str(table.section("gpu").get("driver", "")), partitions,
                **PYTHON_MODULES.get(table.name, {}))


#: The GPU nodes of every shipped site table (``ddp_tutorial/sites/*.toml``), by the site's name.
SITES: Dict[str, Site] = {name: found for name in site_tables.names()
                          if (found := site_gpus(site_tables.load(name))) is not None}


def site_named(name: str) -> Optional[Site]:
    """A site's GPU nodes by name: a shipped site, else the session's table (``$DDP_TUTORIAL_SITE``) when
    ``name`` is its name or its file, else the table in the TOML file ``name``; None when none of these."""
    if name in SITES:
        return SITES[name]
    table = site_tables.current()
    if table is not None and name in (table.name, os.environ.get(site_tables.SITE_VARIABLE, "").strip()):
        return site_gpus(table)
    if name.endswith(".toml") or os.sep in name:  # a table's file (site-check --site FILE)
        try:
            return site_gpus(site_tables.load(name))
        except (OSError, ValueError):
            return None
    return None


def known_sites() -> List[str]:
    """The names :func:`site_named` answers: the shipped sites, and the session's."""
    table = site_tables.current()
    return [*SITES, *([table.name] if table is not None and table.name not in SITES else [])]
