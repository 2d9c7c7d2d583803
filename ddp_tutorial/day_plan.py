"""The workshop day at a site, from its table (``ddp-tutorial site plan --site truba --attendees 30``).

:func:`plan` computes, from the site table's ``[day]`` (the class's layout), its partitions and its
per-user core caps (:mod:`ddp_tutorial.sites`):

* the JupyterLab sessions: partition, cores, length and windows, each checked against the partition's
  rules (:meth:`~ddp_tutorial.sites.Site.check_job`), and the cores they hold at once. They are **not**
  in the GPU reservation (P3);
* notebook 05's reservation (T5-6): for everyone at once and for pairs, on each partition of
  ``[day] reservation_partitions``: whole nodes needed, their share of the partition, GPU-hours over the
  reservation window, and whether the partition has that many nodes;
* per account type (T5-9): the session's cores plus 05's job's cores against the cap.

:func:`format_plan` writes it in the user's language (Turkish numbers: 52,5 and %62). No torch import.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

from .i18n import number, percent, t
from .sites import Site, Violation
from .slurm.rules import time_limit_seconds

#: Account types in the order the plan shows them, each with the ``[caps]`` key of its cap.
ACCOUNT_TYPES = ("undergraduate", "masters", "phd")


def _minutes(clock: str) -> int:
    hours, _, minutes = clock.partition(":")
    return int(hours) * 60 + int(minutes)


@dataclass(frozen=True)
class Reservation:
    """05's jobs for ``jobs`` (everyone, or one per pair) on ``partition``, in whole nodes."""

    partition: str
    pairs: bool
    jobs: int
    gpus: int             # GPUs all those jobs hold at once
    per_node: int         # job node-slots one node holds (by its GPUs and by its cores)
    nodes: int            # whole nodes the reservation needs
    available: int        # the partition's nodes
    node_gpus: int        # GPUs of one node
    window_hours: float

    @property
    def possible(self) -> bool:
        return self.nodes <= self.available

    @property
    def share(self) -> float:
        """The reservation's share of the partition, in %."""
        return 100.0 * self.nodes / self.available

    @property
    def gpu_hours(self) -> float:
        """Every GPU of the reserved nodes over the window (a reservation holds whole nodes)."""
        return self.nodes * self.node_gpus * self.window_hours


@dataclass(frozen=True)
class Account:
    """One account type: its cap, and the cores an attendee holds at once (session, then 05's job too)."""

    kind: str
    cap: int
    session: int
    job: int

    @property
    def at_once(self) -> int:
        return self.session + self.job

    @property
    def session_ok(self) -> bool:
        return self.session <= self.cap

    @property
    def day_ok(self) -> bool:
        return self.at_once <= self.cap


@dataclass(frozen=True)
class DayPlan:
    site: Site
    attendees: int
    pairs: bool
    day: Tuple[str, str]
    session_partition: str
    session_cores: int
    session_time: str
    sessions: Tuple[Tuple[str, str], ...]
    session_violations: Tuple[Violation, ...]
    sessions_too_long: Tuple[Tuple[str, str], ...]   # windows longer than session_time
    job_partition: str
    job_nodes: int
    job_gpus_per_node: int
    job_cores_per_node: int
    job_time: str
    job_violations: Tuple[Violation, ...]
    window: Tuple[str, str]
    reservations: Tuple[Reservation, ...]
    accounts: Tuple[Account, ...]

    @property
    def session_cores_at_once(self) -> int:
        return self.attendees * self.session_cores

    @property
    def window_hours(self) -> float:
        return (_minutes(self.window[1]) - _minutes(self.window[0])) / 60

    def chosen(self) -> Reservation:
        """The reservation this plan asks for: the job partition's, all at once or in pairs."""
        return next(r for r in self.reservations if r.partition == self.job_partition and r.pairs == self.pairs)


def _reservation(site: Site, partition: str, jobs: int, pairs: bool, job_nodes: int, gpus: int,
                 window_hours: float) -> Reservation:
    p = site.partitions[partition]
    cores = gpus * (p.cores_per_gpu or 1)
    per_node = min(p.gpus_per_node // gpus, p.cores_per_node // cores)
    nodes = math.ceil(jobs * job_nodes / per_node)
    return Reservation(partition, pairs, jobs, jobs * job_nodes * gpus, per_node, nodes, p.nodes, p.gpus_per_node,
                       window_hours)


def plan(site: Site, attendees: int, pairs: bool = False) -> DayPlan:
    """The day for ``attendees`` (05's jobs one per attendee, or one per pair with ``pairs``) at ``site``."""
    day = site.section("day")
    caps = site.section("caps")
    session_partition, session_cores = day["session_partition"], int(day["session_cores"])
    session_time = day["session_time"]
    sessions = tuple((a, b) for a, b in day["sessions"])
    too_long = tuple(w for w in sessions
                     if (_minutes(w[1]) - _minutes(w[0])) * 60 > time_limit_seconds(session_time))
    session_violations = site.check_job(session_partition, nodes=1, gpus_per_node=0, cores_per_node=session_cores,
                                        time=session_time)
    job_partition, job_nodes, job_gpus = day["job_partition"], int(day["job_nodes"]), int(day["job_gpus_per_node"])
    job_cores = job_gpus * (site.partitions[job_partition].cores_per_gpu or 1)
    job_violations = site.check_job(job_partition, nodes=job_nodes, gpus_per_node=job_gpus, cores_per_node=job_cores,
                                    time=day["job_time"])
    window = tuple(day["reservation_window"])
    hours = (_minutes(window[1]) - _minutes(window[0])) / 60
    jobs = {False: attendees, True: math.ceil(attendees / 2)}
    reservations = tuple(_reservation(site, name, jobs[mode], mode, job_nodes, job_gpus, hours)
                         for name in day.get("reservation_partitions", [job_partition]) for mode in (False, True))
    accounts = tuple(Account(kind, int(caps[kind]), session_cores, job_nodes * job_cores) for kind in ACCOUNT_TYPES)
    return DayPlan(site, attendees, pairs, (day["start"], day["end"]), session_partition, session_cores,
                   session_time, sessions, tuple(session_violations), too_long, job_partition, job_nodes, job_gpus,
                   job_cores, day["job_time"], tuple(job_violations), window, reservations, accounts)


# --------------------------------------------------------------------------------------
# Writing it out

#: The rules a session's or a job's partition is said to meet, with their catalogue keys.
PLAN_RULE_KEYS = {"gpus_per_node": "site_plan.rule.gpus_per_node", "cores_per_gpu": "site_plan.rule.cores_per_gpu",
                  "min_cores": "site_plan.rule.min_cores", "max_time": "site_plan.rule.max_time"}
#: The account types of the caps table, with their catalogue keys.
ACCOUNT_KEYS = {"undergraduate": "site_plan.account.undergraduate", "masters": "site_plan.account.masters",
                "phd": "site_plan.account.phd"}


def _rules_line(site: Site, partition: str, violations, lang: Optional[str]) -> List[str]:
    """``debug: at least 1 core (…:121), at most 04:00:00 (…:84): ok``, or each broken rule."""
    if violations:
        return ["  !! " + v.text(lang) for v in violations]
    p = site.partitions[partition]
    said = [_sourced(t(key, lang, value=getattr(p, name)), p.source_of(name), lang)
            for name, key in PLAN_RULE_KEYS.items() if getattr(p, name)]
    return ["  " + t("site_plan.rules_ok", lang, partition=partition, rules=", ".join(said))]


def _sourced(text: str, source: str, lang: Optional[str]) -> str:
    """``text (source)``; ``text`` alone where the table gives no source."""
    return t("site_plan.sourced", lang, text=text, source=source) if source else text


def _title(p: DayPlan, lang: Optional[str]) -> str:
    """The plan's first line: the site, the day, and where the table came from (the guide at its commit, or
    the cluster's SLURM on a host and date for a table ``site derive`` wrote)."""
    site = p.site
    fields = dict(site=site.short_name, attendees=p.attendees, start=p.day[0], end=p.day[1])
    if site.origin == "slurm":
        derived = site.section("derived")
        return t("site_plan.title_derived", lang, host=derived.get("host", "?"), date=derived.get("date", "?"),
                 **fields)
    return t("site_plan.title", lang, commit=site.section("guide").get("commit", "?")[:7], **fields)


def _reservation_line(r: Reservation, lang: Optional[str]) -> str:
    mode = t("site_plan.pairs" if r.pairs else "site_plan.all", lang)
    if not r.possible:
        return "  !! " + t("site_plan.reservation_impossible", lang, partition=r.partition, mode=mode, jobs=r.jobs,
                           gpus=r.gpus, nodes=r.nodes, available=r.available)
    return "  " + t("site_plan.reservation", lang, partition=r.partition, mode=mode, jobs=r.jobs, gpus=r.gpus,
                    nodes=r.nodes, available=r.available, share=percent(r.share, 0, lang),
                    gpu_hours=number(r.gpu_hours, lang))


def _account_line(a: Account, lang: Optional[str]) -> str:
    kind = t(ACCOUNT_KEYS[a.kind], lang)
    if a.day_ok:
        return "  " + t("site_plan.account_ok", lang, kind=kind, cap=a.cap, session=a.session, job=a.job,
                        total=a.at_once)
    if a.session_ok:
        return "  !! " + t("site_plan.account_session_only", lang, kind=kind, cap=a.cap, session=a.session,
                           job=a.job, total=a.at_once)
    return "  !! " + t("site_plan.account_nothing", lang, kind=kind, cap=a.cap, session=a.session)


def format_plan(p: DayPlan, lang: Optional[str] = None) -> str:
    site, caps = p.site, p.site.section("caps")
    lines = [_title(p, lang), ""]
    lines.append(t("site_plan.sessions_head", lang))
    lines.append("  " + t("site_plan.sessions", lang, partition=p.session_partition, cores=p.session_cores,
                          time=p.session_time, count=len(p.sessions),
                          windows=", ".join(f"{a}–{b}" for a, b in p.sessions)))
    lines += _rules_line(site, p.session_partition, p.session_violations, lang)
    lines += ["  !! " + t("site_plan.session_too_long", lang, window=f"{a}–{b}", time=p.session_time)
              for a, b in p.sessions_too_long]
    lines.append("  " + t("site_plan.sessions_at_once", lang, attendees=p.attendees, cores=p.session_cores,
                          total=p.session_cores_at_once))
    lines.append("  " + t("site_plan.not_in_reservation", lang, partition=p.session_partition))
    lines.append("")
    lines.append(t("site_plan.jobs_head", lang))
    lines.append("  " + t("site_plan.jobs", lang, partition=p.job_partition, nodes=p.job_nodes,
                          gpus=p.job_gpus_per_node, cores=p.job_cores_per_node, time=p.job_time))
    lines += _rules_line(site, p.job_partition, p.job_violations, lang)
    lines.append("  " + t("site_plan.window", lang, start=p.window[0], end=p.window[1],
                          hours=number(p.window_hours, lang)))
    lines += [_reservation_line(r, lang) for r in p.reservations]
    chosen = p.chosen()
    lines.append("  " + t("site_plan.ask_pairs" if p.pairs else "site_plan.ask_all", lang, nodes=chosen.nodes,
                          partition=chosen.partition, share=percent(chosen.share, 0, lang), start=p.window[0],
                          end=p.window[1]))
    lines.append("")
    source, note_source = caps.get("source"), caps.get("note_source")
    lines.append(t("site_plan.accounts_head", lang, source=source) if source
                 else t("site_plan.accounts_head_unsourced", lang))
    lines += [_account_line(a, lang) for a in p.accounts]
    lines.append("  " + (t("site_plan.caps_note", lang, source=note_source) if note_source
                         else t("site_plan.caps_note_unsourced", lang)))
    return "\n".join(lines)
