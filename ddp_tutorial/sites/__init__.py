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
PARTITION_FIELDS = ("nodes", "cores_per_node", "gpus_per_node", "gpu", "memory_gb", "mem_per_core_mb", "max_time",
                    "min_cores", "min_gpus", "cores_per_gpu", "gpu_only", "constraints")
#: Each rule's catalogue key (written out, so grep finds every use).
RULE_KEYS = {"gpus_per_node": "site_rule.gpus_per_node", "nodes": "site_rule.nodes",
             "cores_per_gpu": "site_rule.cores_per_gpu", "cores_per_node": "site_rule.cores_per_node",
             "min_cores": "site_rule.min_cores", "gpu_only": "site_rule.gpu_only", "max_time": "site_rule.max_time"}
#: How the sources ``site derive`` writes begin (the commands of ``sites/derive.py``'s COMMANDS, then a node list
#: or partition and the field): a value with such a source is what the cluster's SLURM says.
SLURM_SOURCES = ("scontrol show config", "scontrol show partition", "scontrol show node")
#: Who states a rule (:meth:`Site.said_by`): the guide, the cluster's SLURM, or the table (a value a person filled).
SAID_KEYS = {"guide": "site_rule.said_guide", "slurm": "site_rule.said_slurm", "table": "site_rule.said_table"}


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
    mem_per_core_mb: Optional[int] = None   # DefMemPerCore: what a job without --mem gets per core
    max_time: Optional[str] = None
    min_cores: Optional[int] = None
    min_gpus: Optional[int] = None
    cores_per_gpu: Optional[int] = None
    gpu_only: bool = False
    constraints: Tuple[str, ...] = ()
    sources: Dict[str, Tuple[str, ...]] = field(default_factory=dict)  # field → its "path:line"s
    silent: Tuple[str, ...] = ()

    def source_of(self, name: str) -> str:
        """Where the guide states field ``name``: ``"path:line"`` (lines joined by ``, `` where the value
        adds several up), ``""`` when the table gives no source."""
        specs = self.sources.get(name, ())
        if not specs:
            return ""
        path = specs[0].rpartition(":")[0]
        if all(s.rpartition(":")[0] == path for s in specs):  # one file: path:42,52
            return path + ":" + ",".join(s.rpartition(":")[2] for s in specs)
        return ", ".join(specs)


@dataclass(frozen=True)
class Violation:
    """One of a partition's rules that a job breaks: ``rule`` (``gpus_per_node``, ``nodes``,
    ``cores_per_gpu``, ``cores_per_node``, ``min_cores``, ``gpu_only``, ``max_time``), the table's
    ``limit``, what the job ``asked``, and the guide's ``source`` (``"path:line"``)."""

    site: str
    partition: str
    rule: str
    limit: object
    asked: object
    source: str
    origin: str = "guide"   # who says it (Site.said_by): "guide", "slurm" or "table"

    @property
    def key(self) -> str:
        """Its catalogue key (``site_rule.cores_per_gpu`` …): the rule, the table's value, the source, what to do."""
        return RULE_KEYS[self.rule]

    def fields_in(self, lang: Optional[str] = None) -> dict:
        """The message's fields, ``said`` in ``lang``."""
        return dict(partition=self.partition, limit=self.limit, asked=self.asked, site=self.site, source=self.source,
                    said=self.said(lang))

    @property
    def fields(self) -> dict:
        return self.fields_in()

    def said(self, lang: Optional[str] = None) -> str:
        """Who says the rule: "TRUBA's guide, 2-temel_bilgiler/gpu.rst:46", "LAB's SLURM, scontrol show
        partition gpu: MaxTime", "ANKARA-HPC's table, other.toml:84", or "ANKARA-HPC's table" without a source."""
        from ..i18n import t
        if not self.source:
            return t("site_rule.said_table_unsourced", lang, site=self.site)
        return t(SAID_KEYS[self.origin], lang, site=self.site, source=self.source)

    def text(self, lang: Optional[str] = None) -> str:
        """"akya-cuda: at least 10 cores per GPU (TRUBA's guide, 2-temel_bilgiler/gpu.rst:46); this job asks 4. …"."""
        from ..i18n import t
        return t(self.key, lang, **self.fields_in(lang))

    def error(self):
        """The :class:`~ddp_tutorial.i18n.TutorialError` that refuses the job in these words (in any language:
        its ``text(lang)`` says who states the rule in ``lang`` too)."""
        from ..i18n import TutorialError

        violation = self

        class RuleError(TutorialError):
            def text(self, lang: Optional[str] = None) -> str:
                return violation.text(lang)

        return RuleError(self.key, **self.fields)

    def __str__(self) -> str:
        return self.text()


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

    @property
    def short_name(self) -> str:
        """The name a message uses (``TRUBA``)."""
        return self.raw.get("site", {}).get("short", self.name.upper())

    @property
    def origin(self) -> str:
        """Where the table's values come from: ``"guide"`` (the centre's written guide, ``[guide]``) or
        ``"slurm"`` (read from the cluster by ``ddp-tutorial site derive``, ``[derived]``; each source is the
        command and field, ``"scontrol show partition gpu: MaxTime"``)."""
        return "slurm" if "derived" in self.raw and "guide" not in self.raw else "guide"

    def said_by(self, partition: Partition, name: str) -> str:
        """Who states ``partition``'s field ``name``: ``"guide"`` in a table from the guide; in a derived table
        ``"slurm"`` where its sources are ``site derive``'s own commands (``scontrol show node …: Gres``), else
        ``"table"`` (a value a person filled, with another source or none)."""
        if self.origin == "guide":
            return "guide"
        specs = partition.sources.get(name, ())
        return "slurm" if specs and all(spec.startswith(SLURM_SOURCES) for spec in specs) else "table"

    @property
    def default_partition(self) -> Optional[str]:
        """The partition marked ``default = true`` (SLURM's ``Default=YES``), else ``None``."""
        return next((name for name, table in self.raw.get("partitions", {}).items() if table.get("default")), None)

    def to_fill(self) -> Dict[str, Tuple[str, ...]]:
        """The fields a person must still fill or confirm, by table (``"login"``, ``"partitions.gpu"``, ``"day"``):
        each table's ``to_fill`` list (a derived table marks what SLURM cannot tell this way)."""
        found = {name: tuple(table["to_fill"]) for name, table in self.raw.items()
                 if isinstance(table, dict) and table.get("to_fill")}
        found.update({f"partitions.{name}": tuple(table["to_fill"])
                      for name, table in self.raw.get("partitions", {}).items() if table.get("to_fill")})
        return found

    def check_job(self, partition: str, *, nodes: int, gpus_per_node: int, cores_per_node: int,
                  time: Optional[str] = None) -> List[Violation]:
        """The rules of ``partition`` that a job of ``nodes`` × (``gpus_per_node`` GPUs, ``cores_per_node``
        cores) for ``time`` (SLURM's ``--time``; ``None``: not checked) breaks, each with the table's value
        and source; ``[]``: none (or a partition the table does not have). A rule the guide is silent on is
        not checked."""
        from ..slurm.rules import time_limit_seconds  # no import cycle at load: slurm.spec reads this module
        p = self.partitions.get(partition)
        if p is None:
            return []
        found: List[Violation] = []

        def broken(rule: str, limit, asked, field_name: Optional[str] = None) -> None:
            found.append(Violation(self.short_name, partition, rule, limit, asked, p.source_of(field_name or rule),
                                   self.said_by(p, field_name or rule)))

        if p.gpus_per_node is not None and gpus_per_node > p.gpus_per_node:
            broken("gpus_per_node", p.gpus_per_node, gpus_per_node)
        if p.nodes is not None and nodes > p.nodes:
            broken("nodes", p.nodes, nodes)
        if p.cores_per_node is not None and cores_per_node > p.cores_per_node:
            broken("cores_per_node", p.cores_per_node, cores_per_node)
        if p.gpu_only and gpus_per_node < 1:
            broken("gpu_only", p.min_gpus or 1, gpus_per_node)
        elif p.cores_per_gpu is not None and gpus_per_node > 0 and cores_per_node < p.cores_per_gpu * gpus_per_node:
            broken("cores_per_gpu", p.cores_per_gpu, cores_per_node // gpus_per_node)
        if p.min_cores is not None and nodes * cores_per_node < p.min_cores:
            broken("min_cores", p.min_cores, nodes * cores_per_node)
        if time is not None and p.max_time is not None:
            asked = time_limit_seconds(time)
            if asked == 0 or asked > time_limit_seconds(p.max_time):  # 0: no limit at all
                broken("max_time", p.max_time, time)
        return found

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
    sources = {k: (v,) if isinstance(v, str) else tuple(v) for k, v in table.get("sources", {}).items()}
    return Partition(name=name, sources=sources, silent=tuple(table.get("silent", ())), **values)


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


#: The shipped site whose table gives the profiles, the exercises' partitions and the build table when
#: ``$DDP_TUTORIAL_SITE`` names none.
DEFAULT_SITE = "truba"


def _named(name: str) -> Site:
    """The table ``name`` names (a shipped name or a TOML file); one clear line when there is none."""
    try:
        return load(name)
    except (OSError, ValueError):  # no such file or name, or not a TOML table (TOMLDecodeError is a ValueError)
        from ..i18n import TutorialError
        raise TutorialError("site_show.unknown_site", site=name, sites=", ".join(names()),
                            variable=SITE_VARIABLE) from None


def session(environ=None) -> Site:
    """The site this session works at: ``$DDP_TUTORIAL_SITE``'s table, else (unset or ``none``) the shipped
    default (:data:`DEFAULT_SITE`). Its GPU partitions are ``slurm render``'s profiles."""
    env = os.environ if environ is None else environ
    named = env.get(SITE_VARIABLE, "").strip()
    return _named(named) if named and named.lower() != "none" else load(DEFAULT_SITE)


def site_for(partition: Optional[str] = None, *, name: Optional[str] = None, environ=None) -> Optional[Site]:
    """The one answer to "which site's rules apply to this partition / this session?".

    ``name`` (a ``--site`` flag) or else ``$DDP_TUTORIAL_SITE`` names the site (``none``: no site, ``None``
    returned). A site named: its table when ``partition`` is ``None`` (the session's) or one of its
    partitions, else ``None`` (a partition the table does not know has no written rules). No site named:
    the shipped table with a GPU partition of that name (a site profile's: the default first), ``None``
    without one (a ``debug`` or ``cpu`` partition of another cluster is that cluster's SLURM's to judge)."""
    env = os.environ if environ is None else environ
    named = (name or env.get(SITE_VARIABLE, "")).strip()
    if named:
        if named.lower() == "none":
            return None
        site = _named(named)
        return site if partition is None or partition in site.partitions else None
    if not partition:
        return None
    for shipped in (DEFAULT_SITE, *names()):
        site = load(shipped)
        if partition in site.partitions and site.partitions[partition].gpus_per_node:
            return site
    return None


def current(environ=None) -> Optional[Site]:
    """The site named by ``$DDP_TUTORIAL_SITE`` (a name or a file), else ``None`` (also for ``none``,
    setup.sh's way to say "no site")."""
    env = os.environ if environ is None else environ
    name = env.get(SITE_VARIABLE, "").strip()
    return load(name) if name and name.lower() != "none" else None
