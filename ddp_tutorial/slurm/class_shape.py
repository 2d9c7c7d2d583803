"""The class's one job shape: notebook 05's job, 05 §4's engines and 08's capstone job all come from here.

The instructor sets the class's SLURM settings once, as ``DDP_TUTORIAL_*`` variables (never ``SBATCH_*``:
those would redirect every later ``sbatch`` of the day, the JupyterLab sessions included):

==================================  ==========================================================================
``DDP_TUTORIAL_SLURM_PROFILE``      the site profile: partition, GPUs and cores per node (:func:`.workshop_profile`)
``DDP_TUTORIAL_SLURM_GPUS``         GPUs per node of the class's jobs (at most the profile's; 0: the CPU form)
``DDP_TUTORIAL_SLURM_ACCOUNT``      the account the jobs are charged to (``#SBATCH --account``)
``DDP_TUTORIAL_SLURM_RESERVATION``  the class's reservation (``#SBATCH --reservation``)
==================================  ==========================================================================

They become ``#SBATCH`` lines of the job script, so sbatch's own ``SBATCH_ACCOUNT``/``SBATCH_RESERVATION``/
``SBATCH_PARTITION`` still win over them (sbatch's rule), and :func:`class_preview` says so.

Logs, results and checkpoints go where the site's table says job outputs belong (``[storage] outputs``, e.g.
``/scratch/$USER``), in ``ddp-runs`` there, when a site's rules apply to the job's profile
(:func:`ddp_tutorial.sites.site_for`) and that folder exists or can be made; else in ``runs`` (relative to the
folder the job is submitted from), as before. :func:`class_preview` says which.

    job = class_job("seed", nodes=2, time="00:30:00", python=sys.executable, epochs=2)
    print(class_preview(job))

No torch import: this runs on a login node.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from .. import sites
from ..i18n import TutorialError, t
from .presubmit import preview
from .spec import JobSpec, profiles, workshop_profile

GPUS_VARIABLE = "DDP_TUTORIAL_SLURM_GPUS"
ACCOUNT_VARIABLE = "DDP_TUTORIAL_SLURM_ACCOUNT"
RESERVATION_VARIABLE = "DDP_TUTORIAL_SLURM_RESERVATION"
#: The seed tutorial's GPUs per node: the class's default where the profile's nodes have that many.
SEED_GPUS = 3
#: The folder under the site's outputs folder that the class's jobs write into.
RUNS_FOLDER = "ddp-runs"
#: Where logs go when no site's outputs folder can be used (relative to the submit folder, as before).
DEFAULT_RUN_DIR = "runs"


@dataclass(frozen=True)
class Outputs:
    """Where the class's jobs write their logs, results and checkpoints, and why there.

    ``path``: ``<site outputs>/ddp-runs`` when usable, else ``None`` (the jobs keep ``runs``);
    ``site_folder``: the site's outputs folder as the table gives it (``/scratch/$USER``) with its source,
    ``None`` when no site table applies."""

    path: Optional[Path]
    site_folder: Optional[str] = None
    source: str = ""
    site: str = ""


def _environ(environ: Optional[Mapping[str, str]]) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def _expand(folder: str, environ: Mapping[str, str]) -> Path:
    """``/scratch/$USER`` → this user's folder (``$USER`` from the environment, else the login name)."""
    user = environ.get("USER") or getpass.getuser()
    return Path(os.path.expanduser(folder.replace("${USER}", user).replace("$USER", user)))


def _usable(path: Path) -> bool:
    """``path`` is a folder this user may write into, or can be made inside one."""
    if path.is_dir():
        return os.access(path, os.W_OK | os.X_OK)
    parent = path.parent
    return not path.exists() and parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)


def outputs(profile: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> Outputs:
    """Where ``profile``'s class jobs write (default: the workshop's profile): see :class:`Outputs`."""
    env = _environ(environ)
    profile = profile or workshop_profile(env)
    known = profiles(env).get(profile)
    site = sites.site_for(known.partition if known else None, environ=env)
    storage = site.section("storage") if site is not None else {}
    folder = storage.get("outputs")
    if not folder:
        return Outputs(None)
    path = _expand(folder, env) / RUNS_FOLDER
    return Outputs(path if _usable(path) else None, folder, storage.get("outputs_source", ""), site.name.upper())


def class_run_dir(name: str = "", default: os.PathLike | str = DEFAULT_RUN_DIR, profile: Optional[str] = None,
                  environ: Optional[Mapping[str, str]] = None) -> str:
    """The folder for one kind of class job's files (``name``, e.g. ``notebook-05``): ``<site outputs>/ddp-runs/
    name`` where the site's outputs folder is usable, else ``default/name``."""
    where = outputs(profile, environ).path
    base = Path(where) if where is not None else Path(default)
    return str(base / name) if name else str(base)


def class_gpus(profile: str, environ: Optional[Mapping[str, str]] = None) -> int:
    """GPUs per node of the class's jobs: ``$DDP_TUTORIAL_SLURM_GPUS``, else the seed's 3 (fewer where the
    profile's nodes have fewer). More than the profile's nodes have is refused."""
    env = _environ(environ)
    have = profiles(env)[profile].gpus_per_node
    text = env.get(GPUS_VARIABLE, "").strip()
    if not text:
        return min(SEED_GPUS, have)
    try:
        gpus = int(text)
    except ValueError:
        gpus = -1
    if gpus < 0:
        raise TutorialError("class_shape.bad_gpus", variable=GPUS_VARIABLE, value=text)
    if have and gpus > have:
        raise TutorialError("class_shape.too_many_gpus", variable=GPUS_VARIABLE, value=gpus, profile=profile,
                            have=have)
    return gpus


def _name(variable: str, environ: Mapping[str, str]) -> Optional[str]:
    return environ.get(variable, "").strip() or None


def class_job(template: str = "seed", *, cpu_processes: int = SEED_GPUS, profile: Optional[str] = None,
              environ: Optional[Mapping[str, str]] = None, **overrides) -> JobSpec:
    """The class's job for ``template``: the workshop's profile (partition, cores per GPU; ``profile`` names
    another), its GPUs per node (``$DDP_TUTORIAL_SLURM_GPUS``), account and reservation
    (``$DDP_TUTORIAL_SLURM_ACCOUNT``, ``$DDP_TUTORIAL_SLURM_RESERVATION``), 2 nodes, and the run folder of
    :func:`outputs`. Without GPUs the same layout runs ``cpu_processes`` CPU processes per node, one core
    each. ``overrides``: any :class:`JobSpec` field (``None`` keeps the class's value)."""
    env = _environ(environ)
    profile = profile or workshop_profile(env)
    gpus = class_gpus(profile, env)
    values = dict(template=template, nodes=2, gpus_per_node=gpus, nproc_per_node=None if gpus else cpu_processes,
                  cpus_per_process=profiles(env)[profile].cpus_per_gpu if gpus else 1,
                  account=_name(ACCOUNT_VARIABLE, env), reservation=_name(RESERVATION_VARIABLE, env))
    values.update({k: v for k, v in overrides.items() if v is not None})
    if overrides.get("run_dir") is None:
        values["run_dir"] = class_run_dir(profile=profile, environ=env)
    return JobSpec.from_profile(profile, environ=env, **values)


def engine_defaults(profile: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> dict:
    """The class shape as :func:`ddp_tutorial.ipp.start_slurm`'s defaults, in its words: GPUs per node (or
    CPU engines per node), cores per engine, account, reservation, run folder."""
    spec = class_job(profile=profile, environ=environ)
    return dict(gpus_per_node=spec.gpus_per_node, engines_per_node=spec.nproc_per_node,
                cpus_per_engine=spec.cpus_per_process, account=spec.account, reservation=spec.reservation,
                run_dir=spec.run_dir)


def outputs_line(spec: JobSpec, profile: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> str:
    """One line: where ``spec``'s logs, results and checkpoints go, and why there."""
    where = outputs(profile, environ)
    run_dir = Path(spec.run_dir)
    shown = str(run_dir if run_dir.is_absolute() else Path.cwd() / run_dir)
    if where.path is not None and (run_dir == where.path or where.path in run_dir.parents):
        return t("class_shape.outputs_site", path=shown, site=where.site, source=where.source)
    if where.site_folder is not None and where.path is None:
        return t("class_shape.outputs_unusable", path=shown, folder=str(_expand(where.site_folder, _environ(environ))),
                 site=where.site, source=where.source)
    return t("class_shape.outputs_here", path=shown)


def class_preview(spec: JobSpec, profile: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> str:
    """:func:`.preview` (partition, account, reservation with where each comes from, the shape) and where the
    job's files go."""
    profile = profile or workshop_profile(_environ(environ))
    return preview(spec, environ, profile=profile) + "\n  " + outputs_line(spec, profile, environ)
