"""``ddp-tutorial site show|plan|derive``: a site's table with its sources, the workshop day computed from it,
and a new site's table read from its SLURM.

    ddp-tutorial site show --site truba            # every value with the guide's file:line
    ddp-tutorial site plan --site truba --attendees 30 [--pairs]
    ddp-tutorial site derive [--output FILE] [--name NAME] [--force] [--timeout SECONDS]   # on a login node

``--site`` defaults to ``$DDP_TUTORIAL_SITE``, else ``truba``; it is a shipped site's name or a TOML file.
No torch import: this runs on a login node.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import List, Optional

from ..day_plan import ACCOUNT_KEYS
from ..i18n import TutorialError, language, metavar, number, t, whole_number
from . import SITE_VARIABLE, Site, current, load, load_file, names
from .derive import TIMEOUT_S

#: The partition fields ``site show`` prints, in this order, with their labels' catalogue keys.
FIELD_KEYS = {"nodes": "site_show.field.nodes", "cores_per_node": "site_show.field.cores_per_node",
              "gpus_per_node": "site_show.field.gpus_per_node", "gpu": "site_show.field.gpu",
              "memory_gb": "site_show.field.memory_gb", "mem_per_core_mb": "site_show.field.mem_per_core_mb",
              "max_time": "site_show.field.max_time", "min_cores": "site_show.field.min_cores",
              "min_gpus": "site_show.field.min_gpus", "cores_per_gpu": "site_show.field.cores_per_gpu",
              "gpu_only": "site_show.field.gpu_only", "constraints": "site_show.field.constraints"}


#: What ``site plan`` reads from ``[day]``.
DAY_FIELDS = ("start", "end", "session_partition", "session_cores", "session_time", "sessions", "job_partition",
              "job_nodes", "job_gpus_per_node", "job_time", "reservation_window")


def _site(name: Optional[str]) -> Site:
    if not name:
        return current() or load("truba")
    try:
        return load(name)
    except (FileNotFoundError, OSError, ValueError):
        raise TutorialError("site_show.unknown_site", site=name, sites=", ".join(names()),
                            variable=SITE_VARIABLE) from None


def _value(value, lang: Optional[str]) -> str:
    if isinstance(value, bool):
        return t("answer.yes" if value else "answer.no", lang)
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def format_table(site: Site, lang: Optional[str] = None) -> str:
    """The table as a reader checks it: each value, then the guide's ``path:line`` (a derived table: the
    command and field); what the guide does not state, named as such; what is still to fill, listed."""
    if site.origin == "slurm":
        return _format_derived(site, lang)
    guide = site.section("guide")
    tr = (lang or language()) == "tr"
    login, caps, storage = site.section("login"), site.section("caps"), site.section("storage")
    lines = [t("site_show.title", lang, title=site.title, repository=guide.get("repository", "?"),
               commit=guide.get("commit", "?")[:7], date=guide.get("date", "?"), base=guide.get("base", "")), ""]
    lines.append(t("site_show.login", lang, hosts=", ".join(login.get("hosts", ())),
                   source=login.get("hosts_source", "?")))
    lines.append("  " + t("site_show.may_run", lang, text=login.get("may_run_tr" if tr else "may_run", ""),
                          source=login.get("may_run_source", "?")))
    lines.append("  " + t("site_show.consequence", lang, text=login.get("consequence_tr" if tr else "consequence", ""),
                          source=login.get("consequence_source", "?")))
    kinds = ", ".join(f"{t(key, lang)} {caps[kind]}" for kind, key in ACCOUNT_KEYS.items() if kind in caps)
    lines.append(t("site_show.caps", lang, caps=kinds, source=caps.get("source", "?")))
    lines.append(t("site_show.storage_pip", lang, where=storage.get("no_pip_on", "?"),
                   source=storage.get("no_pip_source", "?")))
    lines.append(t("site_show.storage_home", lang, mode=storage.get("home_mode", "?"),
                   source=storage.get("home_source", "?")))
    lines.append(t("site_show.storage_outputs", lang, where=storage.get("outputs", "?"),
                   source=storage.get("outputs_source", "?")))
    return "\n".join(lines + _partition_lines(site, lang))


def _format_derived(site: Site, lang: Optional[str]) -> str:
    """A table read from SLURM (``site derive``): where and when, every partition, then what is still to fill."""
    derived = site.section("derived")
    lines = [t("site_show.title_derived", lang, title=site.title, host=derived.get("host", "?"),
               date=derived.get("date", "?"), version=derived.get("slurm_version", "?"))]
    lines += _partition_lines(site, lang)
    left = site.to_fill()
    lines += ["", t("site_show.to_fill_head", lang) if left else t("site_show.to_fill_none", lang)]
    lines += [f"  [{table}] {', '.join(fields)}" for table, fields in left.items()]
    return "\n".join(lines)


def _partition_lines(site: Site, lang: Optional[str]) -> List[str]:
    lines: List[str] = []
    width = max(len(t(key, lang)) for key in FIELD_KEYS.values())
    for p in site.partitions.values():
        default = p.name == site.default_partition   # SLURM's Default=YES, in a derived table
        lines += ["", t("site_show.partition_default" if default else "site_show.partition", lang, name=p.name)]
        for name, key in FIELD_KEYS.items():
            value = getattr(p, name)
            if value is None or value == () or (name == "gpu_only" and not value and not p.gpus_per_node):
                continue
            label = t(key, lang)
            lines.append(f"  {label:<{width}}  {_value(value, lang):<24}  {p.source_of(name)}".rstrip())
        if p.silent:
            lines.append("  " + t("site_show.silent", lang,
                                  fields=", ".join(t(FIELD_KEYS[n], lang) if n in FIELD_KEYS else n
                                                   for n in p.silent)))
    return lines


def _show(args) -> int:
    print(format_table(_site(args.site)))
    return 0


def _plan(args) -> int:
    from ..day_plan import format_plan, plan
    from ..day_plan import ACCOUNT_TYPES
    if args.attendees < 1:
        raise TutorialError("site_show.bad_attendees", value=args.attendees)
    site = _site(args.site)
    day, caps = site.section("day"), site.section("caps")  # a derived table may still have them to fill
    missing = [f"[caps] {kind}" for kind in ACCOUNT_TYPES if kind not in caps]
    missing += [f"[day] {key}" for key in DAY_FIELDS if key not in day]
    if missing:
        raise TutorialError("site_show.plan_missing", site=site.name, fields=", ".join(missing))
    print(format_plan(plan(site, args.attendees, pairs=args.pairs)))
    return 0


def _derive(args) -> int:
    """Read this cluster's table from SLURM; write it to ``--output`` (atomically, never over a file without
    ``--force``) or to stdout."""
    from ..atomic import check_writable, write_text
    from .derive import SlurmUnreadable, derive
    if args.name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", args.name):
        raise TutorialError("site_derive.bad_name", name=args.name)
    if args.timeout <= 0:
        raise TutorialError("site_derive.bad_timeout", value=args.timeout)
    output = Path(args.output) if args.output else None
    if output is not None:
        if output.exists() and not args.force:  # the person may have filled it
            raise TutorialError("site_derive.exists", path=str(output))
        check_writable(output)
    started = time.monotonic()
    try:
        text = derive(name=args.name, timeout=args.timeout)
    except SlurmUnreadable as error:
        raise TutorialError(error.key, **error.fields) from None
    if output is None:
        sys.stdout.write(text)
        return 0
    write_text(output, text)
    site, seconds = load_file(output), time.monotonic() - started
    print(t("site_derive.written", path=str(output), site=site.name, partitions=len(site.partitions),
            seconds=number(seconds, decimals=1), fields=sum(len(v) for v in site.to_fill().values())))
    return 0


def add_cli(subparsers) -> argparse.ArgumentParser:
    """``ddp-tutorial site show|plan|derive`` (cli.py calls this)."""
    parser = subparsers.add_parser("site", help=t("site_show.cli_help"), description=t("site_show.cli_help"))
    sub = parser.add_subparsers(dest="site_command", required=True, metavar="{show,plan,derive}")
    show = sub.add_parser("show", help=t("site_show.cli_show"), description=t("site_show.cli_show"))
    show.add_argument("--site", help=t("site_show.cli_site"))
    show.set_defaults(func=_show)
    plan = sub.add_parser("plan", help=t("site_show.cli_plan"), description=t("site_show.cli_plan"))
    plan.add_argument("--site", help=t("site_show.cli_site"))
    plan.add_argument("--attendees", type=whole_number, default=30, help=t("site_show.cli_attendees"))
    plan.add_argument("--pairs", action="store_true", help=t("site_show.cli_pairs"))
    plan.set_defaults(func=_plan)
    derive = sub.add_parser("derive", help=t("site_derive.cli_help"), description=t("site_derive.cli_help"))
    derive.add_argument("--output", metavar=metavar("FILE"), help=t("site_derive.cli_output"))
    derive.add_argument("--name", help=t("site_derive.cli_name"))
    derive.add_argument("--force", action="store_true", help=t("site_derive.cli_force"))
    derive.add_argument("--timeout", type=float, default=TIMEOUT_S, metavar=metavar("SECONDS"),
                        help=t("site_derive.cli_timeout"))
    derive.set_defaults(func=_derive)
    return parser


__all__: List[str] = ["add_cli", "format_table"]
