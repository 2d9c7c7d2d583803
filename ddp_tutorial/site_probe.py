"""What site-check's probe jobs ask SLURM for (issue 45): the class's settings, the least job the partition
accepts, and the reservation they meet.

* :func:`slurm_settings` — partition, account, reservation: the flag, else the class's own variables
  (``DDP_TUTORIAL_SLURM_*``; never ``SBATCH_*`` first, T5-12), else sbatch's;
* :func:`probe_shape` — on a partition of the site's table (:mod:`ddp_tutorial.sites`) the least job it accepts:
  a GPU partition runs only GPU jobs (T5-10);
* :func:`read_reservation`, :func:`starts_at`, :func:`starts_in`, :func:`closed_to` — a reservation that has not
  started (the day-before check), does not exist, or shuts this user out (P2).
"""

from __future__ import annotations

import os
import pwd
import re
from datetime import datetime
from typing import Dict, List, Mapping, Optional

from .i18n import TutorialError, number, t

#: Where the three settings a workshop job needs come from when no flag gives them, first set wins: the class's
#: own variables (they travel as DDP_TUTORIAL_*, never SBATCH_*, which would redirect every later sbatch:
#: T5-12), then sbatch's (an older kit's ~/.bashrc). The partition also comes from the profile's
#: (``DDP_TUTORIAL_SLURM_PROFILE``), before ``SBATCH_PARTITION``.
SLURM_VARIABLES = {"partition": ("SBATCH_PARTITION",),
                   "account": ("DDP_TUTORIAL_SLURM_ACCOUNT", "SBATCH_ACCOUNT"),
                   "reservation": ("DDP_TUTORIAL_SLURM_RESERVATION", "SBATCH_RESERVATION")}
PROBE_MINUTES = {"test": 1, "reach": 2}  # the probe jobs' --time, at most the partition's limit


def slurm_settings(given: Dict[str, Optional[str]], environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """partition/account/reservation: the flag, else the first of :data:`SLURM_VARIABLES` set (the partition:
    the profile's, before ``SBATCH_PARTITION``), else empty (the site's default)."""
    from .slurm.spec import PROFILE_VARIABLE, profiles
    env = os.environ if environ is None else environ
    profile = profiles(env).get(env.get(PROFILE_VARIABLE, "").strip())
    fallback = {"partition": (profile.partition or "") if profile else ""}
    settings = {}
    for name, variables in SLURM_VARIABLES.items():
        found = [env.get(v, "").strip() for v in variables]
        settings[name] = (given.get(name) or fallback.get(name) or next((v for v in found if v), "")).strip()
    return settings


def site_table(name: Optional[str], partition: Optional[str] = None):
    """The site's table whose rules apply (:func:`ddp_tutorial.sites.site_for`: ``name``, a ``--site`` flag, else
    ``$DDP_TUTORIAL_SITE``; none named: the shipped table that has ``partition``), None when there is none."""
    from . import sites
    try:
        return sites.site_for(partition, name=name)
    except TutorialError:  # an unknown name: the torch line says so
        return None


def probe_shape(partition, minutes: int) -> List[str]:
    """The probe jobs' size (T5-10): one task for ``minutes``; on a partition of the site's table
    (:class:`ddp_tutorial.sites.Partition`) the least job it accepts: a GPU partition (it runs only GPU jobs)
    ``--gres=gpu:N`` with its cores per GPU, at least its minimum cores, never past its time limit."""
    from .slurm.rules import time_limit_seconds
    flags = ["--ntasks=1"]
    if partition is not None:
        gpus = max(partition.min_gpus or 1, 1) if partition.gpu_only or partition.min_gpus else 0
        cores = max(partition.min_cores or 1, (partition.cores_per_gpu or 0) * gpus)
        flags += [f"--gres=gpu:{gpus}"] if gpus else []
        flags += [f"--cpus-per-task={cores}"] if cores > 1 else []
        limit = time_limit_seconds(partition.max_time) // 60 if partition.max_time else 0
        minutes = min(minutes, limit) if limit else minutes  # 0: no limit
    return [f"--time={minutes}", *flags]


def read_reservation(name: str, env: Optional[Mapping[str, str]] = None,
                     timeout: float = 60) -> Optional[Dict[str, str]]:
    """``scontrol show reservation -o NAME`` as a dict; ``{}`` when SLURM says there is no such reservation;
    None when it does not answer (the SLURM line says so)."""
    from .slurm.jobs import parse_scontrol, run_command
    try:
        proc = run_command(["scontrol", "show", "reservation", "-o", name], env=env, check=False, timeout=timeout)
    except TutorialError:
        return None
    first = (proc.stdout.strip().splitlines() or [""])[0]
    if proc.returncode == 0 and "ReservationName=" in first:
        return parse_scontrol(first)
    return {} if re.search(r"\bnot found\b", proc.stdout + proc.stderr, re.IGNORECASE) else None


def starts_at(found: Dict[str, str]) -> Optional[datetime]:
    """A reservation's StartTime when it lies ahead (the controller's local time, as scontrol writes it)."""
    try:
        start = datetime.strptime(found.get("StartTime", ""), "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    return start if start > datetime.now() else None


def starts_in(start: datetime) -> str:
    """How long until ``start``: "in 30 min" up to 89 minutes, else "in 5 h", "in 1.5 h" (the user's language)."""
    minutes = max(1, round((start - datetime.now()).total_seconds() / 60))
    if minutes < 90:
        return t("site.in_minutes", minutes=minutes)
    return t("site.in_hours", hours=_hours(minutes / 60))


def _hours(value: float) -> str:
    return number(round(value, 1), decimals=0 if float(round(value, 1)).is_integer() else 1)


def _listed(value: str) -> List[str]:
    return [] if value in ("", "(null)") else [v for v in value.split(",") if v and not v.startswith("-")]


def closed_to(found: Dict[str, str], account: str) -> Optional[str]:
    """Who the reservation shuts out, for the user running this: their name when ``Users`` lists others,
    or the account when ``Accounts`` lists others (SLURM wants both to match where both are given); None when
    it is open to them, or it cannot be told here (no account given)."""
    user = pwd.getpwuid(os.getuid()).pw_name
    users, accounts = _listed(found.get("Users", "")), _listed(found.get("Accounts", ""))
    if users and user not in users:
        return user
    if accounts and account and account not in accounts:
        return account
    return None
