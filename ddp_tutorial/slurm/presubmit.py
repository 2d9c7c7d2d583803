"""Before a job is submitted: what it asks for, where it goes, and whether SLURM would take it.

:func:`preview` says in the user's language what a :class:`~.spec.JobSpec` will ask for — partition,
account, reservation (each with where it comes from: the job script, or sbatch's own variable
``SBATCH_PARTITION`` / ``SBATCH_ACCOUNT`` / ``SBATCH_RESERVATION``, which wins over the script), nodes,
GPUs and cores. :func:`check_accepted` asks ``sbatch --test-only`` (nothing is queued) and turns a refusal
into a message that names what to change. Notebook 05 calls both before it submits.

    spec = JobSpec.from_profile(workshop_profile(), nodes=2, gpus_per_node=1)
    print(preview(spec))
    script = write_script(render(spec), "job.sh")
    print(check_accepted(script, spec))   # raises a clear TutorialError if SLURM would refuse it
    job = submit(script)

No torch import.
"""

from __future__ import annotations

import os
import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..i18n import TutorialError, t
from .jobs import test_only
from .spec import JobSpec, profiles

#: What sbatch reads from the environment for the three fields (sbatch's rule: command line, then these,
#: then the script's #SBATCH lines).
SBATCH_VARIABLES = {"partition": "SBATCH_PARTITION", "account": "SBATCH_ACCOUNT", "reservation": "SBATCH_RESERVATION"}
#: How the preview names each field, and what sbatch does when it is not given at all.
LABELS = {"partition": ("slurm.preview.partition", "slurm.preview.default_partition"),
          "account": ("slurm.preview.account", "slurm.preview.default_account"),
          "reservation": ("slurm.preview.reservation", "slurm.preview.default_reservation")}

#: SLURM's words for a refusal (``sbatch: error: …``) → what to change; the first match wins.
REFUSALS: Tuple[Tuple[str, str], ...] = (
    (r"reservation", "slurm.refused.reservation"),
    (r"invalid partition|partition .*(not|in)valid|access denied.*partition|partition.*access denied",
     "slurm.refused.partition"),
    (r"account|association", "slurm.refused.account"),
    (r"node configuration is not available|requested node config|more processors than|gres|cpu count",
     "slurm.refused.shape"),
)


def sbatch_values(spec: JobSpec, environ: Optional[Mapping[str, str]] = None) -> Dict[str, Tuple[Optional[str], str]]:
    """``{field: (value sbatch will use or None, where it comes from)}`` for partition, account,
    reservation; the source is ``"variable"`` (sbatch's ``SBATCH_…``, which wins), ``"script"`` or
    ``"default"`` (nothing given: the cluster's default partition, your default account, no reservation)."""
    env = os.environ if environ is None else environ
    out = {}
    for name, variable in SBATCH_VARIABLES.items():
        from_env = env.get(variable, "").strip()
        if from_env:
            out[name] = (from_env, "variable")
        elif getattr(spec, name) is not None:
            out[name] = (getattr(spec, name), "script")
        else:
            out[name] = (None, "default")
    return out


def preview(spec: JobSpec, environ: Optional[Mapping[str, str]] = None, profile: Optional[str] = None) -> str:
    """What the job will ask for, in the user's language: one line each for partition, account and
    reservation (with their source), a note where an ``SBATCH_…`` variable wins over the script's line,
    and the shape (nodes, processes, GPUs, cores, time)."""
    values = sbatch_values(spec, environ)
    lines: List[str] = [t("slurm.preview.title")]
    known = profiles(environ)
    if profile is not None and profile in known:
        lines.append("  " + t("slurm.preview.profile", name=profile, description=known[profile].description))
    for name, (value, source) in values.items():
        if source == "variable":
            where = t("slurm.preview.from_variable", name=SBATCH_VARIABLES[name])
        elif source == "script":
            where = t("slurm.preview.from_script")
        else:
            where = t(LABELS[name][1])
        lines.append(f"  {t(LABELS[name][0]) + ':':<22} {value or '—'}  ({where})")
        if source == "variable" and getattr(spec, name) not in (None, value):
            lines.append("    " + t("slurm.preview.overridden", name=SBATCH_VARIABLES[name], value=value,
                                    option=name, script=getattr(spec, name)))
    lines.append("  " + t("slurm.preview.shape", nodes=spec.nodes, processes=spec.processes_per_node,
                          world=spec.world_size, gpus=spec.gpus_per_node, cores=cores_per_node(spec),
                          per_process=spec.cpus_per_process, time=spec.time))
    return "\n".join(lines)


def cores_per_node(spec: JobSpec) -> int:
    """The cores the job asks for on each node (its tasks' cores together)."""
    return spec.cpus_per_task * spec.tasks_per_node


def refusal(detail: str, spec: JobSpec, environ: Optional[Mapping[str, str]] = None) -> TutorialError:
    """SLURM's refusal ``detail`` as a message that names what to change."""
    values = {name: value or "—" for name, (value, _) in sbatch_values(spec, environ).items()}
    for pattern, key in REFUSALS:
        if re.search(pattern, detail, re.I):
            return TutorialError(key, detail=detail, gpus=spec.gpus_per_node, cores=cores_per_node(spec), **values)
    return TutorialError("slurm.refused.other", detail=detail)


def check_accepted(script: os.PathLike | str, spec: JobSpec, sbatch_args: Sequence[str] = (),
                   env: Optional[Mapping[str, str]] = None) -> str:
    """``sbatch --test-only`` on ``script``: SLURM's answer (``Job … to start at … on nodes …``) as a
    line in the user's language; a refusal raises :func:`refusal`'s message. Nothing is queued."""
    try:
        answer = test_only(script, sbatch_args=sbatch_args, env=env)
    except TutorialError as error:
        if error.key != "slurm.command_failed":
            raise
        raise refusal(str(error.fields.get("detail", "")).removeprefix("sbatch: error: "), spec, env) from None
    return t("slurm.accepted", answer=answer)
