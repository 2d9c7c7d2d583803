"""``ddp-tutorial site show|plan``: a site's table with its sources, and the workshop day computed from it.

    ddp-tutorial site show --site truba            # every value with the guide's file:line
    ddp-tutorial site plan --site truba --attendees 30 [--pairs]

``--site`` defaults to ``$DDP_TUTORIAL_SITE``, else ``truba``; it is a shipped site's name or a TOML file.
No torch import: this runs on a login node.
"""

from __future__ import annotations

import argparse
from typing import List, Optional

from ..day_plan import ACCOUNT_KEYS
from ..i18n import TutorialError, language, t, whole_number
from . import SITE_VARIABLE, Site, current, load, names

#: The partition fields ``site show`` prints, in this order, with their labels' catalogue keys.
FIELD_KEYS = {"nodes": "site_show.field.nodes", "cores_per_node": "site_show.field.cores_per_node",
              "gpus_per_node": "site_show.field.gpus_per_node", "gpu": "site_show.field.gpu",
              "memory_gb": "site_show.field.memory_gb", "mem_per_core_mb": "site_show.field.mem_per_core_mb",
              "max_time": "site_show.field.max_time", "min_cores": "site_show.field.min_cores",
              "min_gpus": "site_show.field.min_gpus", "cores_per_gpu": "site_show.field.cores_per_gpu",
              "gpu_only": "site_show.field.gpu_only", "constraints": "site_show.field.constraints"}


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
    """The table as a reader checks it: each value, then the guide's ``path:line``; what the guide does
    not state, named as such."""
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
    width = max(len(t(key, lang)) for key in FIELD_KEYS.values())
    for p in site.partitions.values():
        lines += ["", t("site_show.partition", lang, name=p.name)]
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
    return "\n".join(lines)


def _show(args) -> int:
    print(format_table(_site(args.site)))
    return 0


def _plan(args) -> int:
    from ..day_plan import format_plan, plan
    if args.attendees < 1:
        raise TutorialError("site_show.bad_attendees", value=args.attendees)
    print(format_plan(plan(_site(args.site), args.attendees, pairs=args.pairs)))
    return 0


def add_cli(subparsers) -> argparse.ArgumentParser:
    """``ddp-tutorial site show|plan`` (cli.py calls this)."""
    parser = subparsers.add_parser("site", help=t("site_show.cli_help"), description=t("site_show.cli_help"))
    sub = parser.add_subparsers(dest="site_command", required=True, metavar="{show,plan}")
    show = sub.add_parser("show", help=t("site_show.cli_show"), description=t("site_show.cli_show"))
    show.add_argument("--site", help=t("site_show.cli_site"))
    show.set_defaults(func=_show)
    plan = sub.add_parser("plan", help=t("site_show.cli_plan"), description=t("site_show.cli_plan"))
    plan.add_argument("--site", help=t("site_show.cli_site"))
    plan.add_argument("--attendees", type=whole_number, default=30, help=t("site_show.cli_attendees"))
    plan.add_argument("--pairs", action="store_true", help=t("site_show.cli_pairs"))
    plan.set_defaults(func=_plan)
    return parser


__all__: List[str] = ["add_cli", "format_table"]
