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


def capability_of(gpu_text: Optional[str]) -> Optional[Capability]:
    """A site table's ``gpu`` field ("V100 16 GB, sm_70") → its compute capability ``(7, 0)``; None without one."""
    match = re.search(r"\bsm_(\d+)(\d)\b", gpu_text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


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
