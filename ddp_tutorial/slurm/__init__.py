"""SLURM: write an sbatch script from a template, submit it, watch it.

Split the way submitit splits it: building the job script, then submitting and watching the job.

===================  ============================================================================================
:mod:`.spec`         site profiles, :class:`JobSpec`, the check of every value
:mod:`.render`       the job script: a template from ``slurm/`` with its gaps filled in one pass
:mod:`.jobs`         submit, state, wait, cancel, logs, results (``sbatch``, ``scontrol``, ``sacct``)
:mod:`.presubmit`    before submitting: what the job asks for and where it goes; ``sbatch --test-only``
:mod:`.rules`        the kinds of value a job spec field may hold, each with its check
:mod:`.class_shape`  the class's one job shape (05, 05's engines, 08) from the ``DDP_TUTORIAL_SLURM_*`` variables
:mod:`.cli`          ``ddp-tutorial slurm render|submit|status|wait|cancel|logs|result``
===================  ============================================================================================

Three layouts (see ``slurm/README.md``):

========== =========================================================================
``seed``     one task per node; ``python -m ddp_tutorial.spawn`` starts one process
             per GPU on its node (the seed tutorial's scheme)
``per-gpu``  one SLURM task per GPU; ``srun`` starts every training process itself
``torchrun`` one ``torchrun`` per node, meeting through a c10d rendezvous
========== =========================================================================

``per-gpu`` and ``torchrun`` also run your own DDP script (``JobSpec(script=…)``, ``--script``).

    spec = JobSpec.from_profile(workshop_profile(), nodes=2, account="myaccount", reservation="ddp")
    print(preview(spec))                 # partition, account, reservation, nodes, GPUs, cores
    script = write_script(render(spec), "job.sh")
    print(check_accepted(script, spec))  # sbatch --test-only: a refusal says what to change
    job = submit(script)
    info = wait(job)
    print(info.state, read_result(job))

No torch import anywhere here: a login node renders and submits without it.
"""

from .class_shape import class_job, class_preview, class_run_dir
from .cli import add_cli, add_render_arguments
from .jobs import (TERMINAL, JobInfo, cancel, checkpoint_dir, job_info, log_path, parse_scontrol, read_log,
                   read_result, result_path, run_command, submit, test_only, wait)
from .render import (ENGINES_TEMPLATE, TEMPLATE_DIR, engines_script, render, render_engines, template_text,
                     write_script)
from .presubmit import check_accepted, preview
from .spec import (PROFILE_VARIABLE, PROFILES, SCRIPT_TEMPLATES, TEMPLATES, JobSpec, Profile, day_profile, job_id_of,
                   validate, workshop_profile)

__all__ = [
    "ENGINES_TEMPLATE", "PROFILE_VARIABLE", "PROFILES", "SCRIPT_TEMPLATES", "TEMPLATES", "TEMPLATE_DIR", "TERMINAL",
    "JobInfo", "JobSpec", "Profile", "add_cli", "add_render_arguments", "cancel", "check_accepted", "class_job",
    "class_preview", "class_run_dir", "day_profile", "engines_script",
    "checkpoint_dir", "job_id_of", "job_info", "log_path", "parse_scontrol", "preview", "read_log", "read_result",
    "render", "render_engines", "result_path", "run_command", "submit", "template_text", "test_only", "validate",
    "wait", "workshop_profile", "write_script",
]
