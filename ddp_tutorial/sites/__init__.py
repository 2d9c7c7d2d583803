"""A site's written rules as data: one TOML file per site (``truba.toml``), every value with its source.

The file says what the centre's own guide says: login nodes and what may run there, per-user core caps,
storage rules, and per partition its nodes, cores, GPUs, memory, time limit, minimum cores and GPUs per
job, cores per GPU. A field the guide does not state is listed in ``silent`` and has no value. The
``[day]`` table is the class's layout for a day at that site, chosen to fit the rules.

Everything that must obey a site reads it from here: ``slurm render`` (a job beyond a partition's
limits is refused in the table's words), ``site-check`` (its probe jobs are shaped like a job the
partition accepts), ``scripts/lab.sh`` (no JupyterLab on a login node), the OnDemand files, the
rule-enforcing SLURM lab of the tests and the day plan.

No torch import: this runs on a login node.
"""

from __future__ import annotations

import fnmatch
import functools
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import tomllib

#: The variable naming the site: a name (``truba``: ``ddp_tutorial/sites/truba.toml``) or a TOML file's path.
SITE_VARIABLE = "DDP_TUTORIAL_SITE"
PARTITION_FIELDS = ("nodes", "cores_per_node", "gpus_per_node", "gpu", "memory_gb", "max_time", "min_cores",
                    "min_gpus", "cores_per_gpu", "gpu_only", "constraints")


@dataclass(frozen=True)
class Source:
    """Where the guide says it: ``path`` under the guide's ``base`` folder, ``line``, and the web address."""

    path: str
    line: int
    url: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Partition:
    """One partition as the guide describes it (``None``: the guide does not say; see ``silent``)."""

    name: str
    nodes: Optional[int] = None
    cores_per_node: Optional[int] = None
    gpus_per_node: Optional[int] = None
    gpu: Optional[str] = None
    memory_gb: Optional[int] = None
    max_time: Optional[str] = None
    min_cores: Optional[int] = None
    min_gpus: Optional[int] = None
    cores_per_gpu: Optional[int] = None
    gpu_only: bool = False
    constraints: Tuple[str, ...] = ()
    sources: Dict[str, str] = field(default_factory=dict)
    silent: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Site:
    """A site's table (:func:`load`); ``raw`` is the whole TOML document."""

    name: str
    title: str
    partitions: Dict[str, Partition]
    raw: dict

    @property
    def login_patterns(self) -> Tuple[str, ...]:
        login = self.raw.get("login", {})
        return tuple(login.get("patterns", ())) + tuple(login.get("hosts", ()))

    def is_login_host(self, hostname: str) -> bool:
        """Is ``hostname`` (short or full: ``arf-ui1.yonetim``) one of the site's login nodes?"""
        short = hostname.split(".")[0]
        return any(fnmatch.fnmatchcase(short, p) for p in self.login_patterns)

    def section(self, name: str) -> dict:
        return dict(self.raw.get(name, {}))

    def source(self, spec: str) -> Source:
        """``spec`` is ``"path:line"`` as written in the table → its :class:`Source` with the guide's URL."""
        path, _, line = spec.rpartition(":")
        guide = self.raw.get("guide", {})
        url = guide.get("url", "").format(commit=guide.get("commit", ""), path=path, line=line)
        return Source(path, int(line), url)


def _partition(name: str, table: dict) -> Partition:
    values = {k: table[k] for k in PARTITION_FIELDS if k in table}
    if "constraints" in values:
        values["constraints"] = tuple(values["constraints"])
    return Partition(name=name, sources=dict(table.get("sources", {})), silent=tuple(table.get("silent", ())),
                     **values)


def load_file(path: os.PathLike | str) -> Site:
    """The site table in the TOML file ``path``."""
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    return _site(raw)


def _site(raw: dict) -> Site:
    site = raw.get("site", {})
    partitions = {name: _partition(name, table) for name, table in raw.get("partitions", {}).items()}
    return Site(name=site.get("name", "?"), title=site.get("title", site.get("name", "?")), partitions=partitions,
                raw=raw)


def names() -> List[str]:
    """The sites shipped with the package (``truba`` …)."""
    return sorted(p.name[:-5] for p in resources.files(__name__).iterdir() if p.name.endswith(".toml"))


@functools.lru_cache(maxsize=None)
def load(name: str = "truba") -> Site:
    """A shipped site's table by name, or the table in a TOML file when ``name`` is a path."""
    if name.endswith(".toml") or os.sep in name:
        return load_file(Path(name))
    with resources.files(__name__).joinpath(f"{name}.toml").open("rb") as f:
        return _site(tomllib.load(f))


def current(environ=None) -> Optional[Site]:
    """The site named by ``$DDP_TUTORIAL_SITE`` (a name or a file), else ``None`` (also for ``none``,
    setup.sh's way to say "no site")."""
    env = os.environ if environ is None else environ
    name = env.get(SITE_VARIABLE, "").strip()
    return load(name) if name and name.lower() != "none" else None
