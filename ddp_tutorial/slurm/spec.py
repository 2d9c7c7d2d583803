"""What a SLURM job asks for: site profiles, the job spec, and the check of every value.

Every value is checked here before :mod:`.render` writes it into a script:

* values that end up on ``#SBATCH`` lines (names, times, paths, module names) must match a
  strict pattern as a whole (``fullmatch``: a trailing newline is not "the end");
* values used in shell commands are quoted once by the renderer; here they may contain
  anything except control characters (newlines, tabs, escape …) and the templates' own
  ``{{placeholders}}``;
* the training options a job passes on (data set, root, epochs, batch size, lr, seed: those marked
  ``job=True`` in :class:`~ddp_tutorial.config.TrainConfig`'s table, :data:`~ddp_tutorial.config.JOB_OPTIONS`)
  are fields of :class:`JobSpec` made from that table, and follow the rules
  :class:`~ddp_tutorial.config.TrainConfig` uses, so a value is refused in the same words wherever it is given.

No torch import: this runs on a login node.
"""

from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Dict, List, Optional, Tuple, Union

from ..config import JOB_OPTIONS, TRAIN_RULES, TrainConfig, add_train_arguments, config_from_args
from ..i18n import TutorialError, t
from ..validate import option_name

TEMPLATES = {
    "seed": "seed.sbatch",          # one task per node → ddp_tutorial.spawn → one process per GPU
    "per-gpu": "per-gpu.sbatch",    # one SLURM task per GPU → ddp_tutorial.train (or your script)
    "torchrun": "torchrun.sbatch",  # one torchrun per node, c10d rendezvous → ddp_tutorial.train (or your script)
}
#: The templates that can run the user's own script (``script=``): the seed's layout needs ddp_tutorial.spawn.
SCRIPT_TEMPLATES = ("per-gpu", "torchrun")


@dataclass(frozen=True)
class Profile:
    """What a partition's nodes offer: GPUs per node and the CPU cores that go with each GPU. (Which torch
    build the site's GPUs need is :data:`ddp_tutorial.gpu.SITES`' to say: one table of builds.)"""

    name: str
    partition: Optional[str]
    gpus_per_node: int
    cpus_per_gpu: int
    description: str
    gpu: Optional[str] = None            # GPU model and compute capability
    checked: bool = False                # False: taken from the site's documentation, not from nvidia-smi


PROFILES: Dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("generic", None, 0, 1, "any cluster; CPU-only unless --gpus-per-node is given"),
        Profile("barbun-cuda", "barbun-cuda", 2, 20, "TRUBA barbun-cuda: 2× NVIDIA P100, 20 cores per GPU",
                gpu="P100, sm_60"),
        Profile("akya-cuda", "akya-cuda", 4, 10, "TRUBA akya-cuda: 4× NVIDIA V100, 10 cores per GPU",
                gpu="V100, sm_70"),
        Profile("palamut-cuda", "palamut-cuda", 8, 16, "TRUBA palamut-cuda: 8× NVIDIA A100, 16 cores per GPU",
                gpu="A100, sm_80"),
        Profile("kolyoz-cuda", "kolyoz-cuda", 4, 16, "TRUBA kolyoz-cuda: 4× NVIDIA H100/H200, 16 cores per GPU",
                gpu="H100/H200, sm_90"),
    )
}


#: The training options a job passes on, one keyword field each (``None``: the training's default),
#: made from :class:`~ddp_tutorial.config.TrainConfig`'s table (``job=True``): dataset, root, epochs,
#: batch_size, lr, seed.
TrainingOptions = make_dataclass(
    "TrainingOptions", [(f.name, f"Optional[{f.type}]", field(default=None, kw_only=True))
                        for f in fields(TrainConfig) if f.name in JOB_OPTIONS])


@dataclass
class JobSpec(TrainingOptions):
    """Everything :func:`~ddp_tutorial.slurm.render` needs. Build it directly or with :meth:`from_profile`.

    Its training fields (``dataset``, ``root``, ``epochs`` … :data:`~ddp_tutorial.config.JOB_OPTIONS`)
    come from :class:`TrainingOptions`; ``train_args`` carries any other training option."""

    template: str = "seed"
    nodes: int = 2
    gpus_per_node: int = 0                 # 0: the CPU-only form (no --gres)
    nproc_per_node: Optional[int] = None   # CPU form: processes per node (GPU form: = gpus_per_node)
    cpus_per_process: int = 1              # cores for each training process (→ --cpus-per-task, threads)
    job_name: str = "ddp-tutorial"
    account: Optional[str] = None
    partition: Optional[str] = None
    qos: Optional[str] = None
    time: str = "00:30:00"
    run_dir: str = "runs"                  # logs, results and checkpoints go here
    workdir: Optional[str] = None          # --chdir: where the job starts (default: where you submit)
    # Environment set-up
    python: str = "python"                 # the interpreter after set-up (a name or a path)
    modules: Tuple[str, ...] = ()          # module load …  (preceded by module purge)
    conda: Optional[str] = None            # conda installation directory (…/miniconda3)
    conda_env: Optional[str] = None        # environment name or path to activate
    venv: Optional[str] = None             # a venv directory to activate instead
    env: Tuple[Tuple[str, str], ...] = ()  # extra exports, (NAME, value)
    # Training (the package's model): the fields of TrainingOptions, and
    train_args: Tuple[str, ...] = ()       # anything else for the training, e.g. ("--scale-lr",)
    # …or the user's own script instead (per-gpu and torchrun templates)
    script: Optional[str] = None           # path of a DDP script run on every process
    script_args: Union[str, Tuple[str, ...]] = ()  # its arguments: a tuple, or one string split like a shell
    # Preemption / time limit
    signal_seconds: Optional[int] = None   # #SBATCH --signal=B:USR1@S: warn S seconds before the limit
    requeue: bool = False                  # #SBATCH --requeue; the script requeues itself after exit 75

    @classmethod
    def from_profile(cls, profile: str = "generic", **overrides) -> "JobSpec":
        """A spec for a site profile: ``from_profile("palamut-cuda", nodes=2)`` → 8 GPUs, 16 cores each."""
        if profile not in PROFILES:
            raise TutorialError("slurm.unknown_profile", name=profile, choices=", ".join(PROFILES))
        p = PROFILES[profile]
        values = dict(partition=p.partition, gpus_per_node=p.gpus_per_node, cpus_per_process=p.cpus_per_gpu)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    # Derived numbers -------------------------------------------------------------
    @property
    def processes_per_node(self) -> int:
        return self.gpus_per_node if self.gpus_per_node > 0 else (self.nproc_per_node or 1)

    @property
    def world_size(self) -> int:
        return self.nodes * self.processes_per_node

    @property
    def tasks_per_node(self) -> int:
        """SLURM tasks per node: one per process for per-gpu, one launcher per node otherwise."""
        return self.processes_per_node if self.template == "per-gpu" else 1

    @property
    def cpus_per_task(self) -> int:
        """Cores per SLURM task: ``cpus_per_process`` for per-gpu, × processes per node for a launcher."""
        return self.cpus_per_process * (1 if self.template == "per-gpu" else self.processes_per_node)

    @property
    def training_argv(self) -> Tuple[str, ...]:
        """The training options given (``--epochs 3`` …), in the table's order."""
        argv: List[str] = []
        for name in JOB_OPTIONS:
            if getattr(self, name) is not None:
                argv += [option_name(name), str(getattr(self, name))]
        return tuple(argv)

    @property
    def script_argv(self) -> Tuple[str, ...]:
        """``script_args`` as a tuple (a string is split like a shell would, nothing expanded)."""
        if isinstance(self.script_args, str):
            try:
                return tuple(shlex.split(self.script_args))
            except ValueError as error:
                raise bad_value("script_args", self.script_args, "slurm.rule.split", detail=str(error)) from None
        return tuple(self.script_args)


# --------------------------------------------------------------------------------------
# Validation

NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
PATH = re.compile(r"[A-Za-z0-9_./+,@-]{1,4096}")
MODULE = re.compile(r"[A-Za-z0-9_./+][A-Za-z0-9_./+-]{0,255}")  # not "-f": `module load -f` is an option
TIME = re.compile(r"[0-9]{1,4}-[0-9]{1,2}(:[0-9]{1,2}){0,2}|[0-9]{1,6}(:[0-9]{1,2}){0,2}")  # ASCII digits only
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
JOB_ID = re.compile(r"[0-9]{1,12}")
SIGNAL = re.compile(r"[A-Z0-9]{1,10}")
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")   # newline, tab, escape, C1, line separators
PLACEHOLDER = re.compile(r"\{\{|\}\}")                       # the templates' own {{gaps}}


def bad_value(name: str, value, rule: str, **fields) -> TutorialError:
    """The bilingual "Invalid NAME=VALUE: RULE" error."""
    return TutorialError("slurm.bad_value", name=name, value=value, rule=t(rule, **fields))


def int_in(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise bad_value(name, value, "slurm.rule.int_range", low=low, high=high)
    return value


def matching(name: str, value, pattern: re.Pattern, allowed: str) -> str:
    """``value`` if it matches ``pattern`` as a whole, else a clear error."""
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise bad_value(name, value, "slurm.rule.pattern", allowed=t(allowed))
    return value


def plain_text(name: str, value, empty: bool = False) -> str:
    """Any text that will be shell-quoted: control characters (newlines …) and ``{{`` ``}}`` are refused."""
    if not isinstance(value, str) or (value == "" and not empty):
        raise bad_value(name, value, "slurm.rule.control")
    if CONTROL.search(value):
        raise bad_value(name, value, "slurm.rule.control")
    if PLACEHOLDER.search(value):
        raise bad_value(name, value, "slurm.rule.placeholder")
    return value


def job_id_of(value) -> str:
    """A job id as text, checked: ASCII digits only (array/het suffixes are not used here)."""
    text = str(value).strip(" \t\r\n")
    if not JOB_ID.fullmatch(text):
        raise TutorialError("slurm.bad_job_id", value=value)
    return text


def _train_rule(name: str, value) -> None:
    if isinstance(value, str):
        plain_text(name, value)  # shell-quoted in the script
    rule = TRAIN_RULES[name]
    if not rule.ok(value):
        raise TutorialError("slurm.bad_value", name=name, value=value, rule=rule.describe())


def time_limit_seconds(text: str) -> int:
    """SLURM's ``--time`` in seconds (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``); 0: no limit."""
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        hours, minutes, seconds = (parts + [0, 0])[:3]
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    if len(parts) == 3:
        return (parts[0] * 60 + parts[1]) * 60 + parts[2]
    return parts[0] * 60 + (parts[1] if len(parts) == 2 else 0)


def _check_shape(spec: JobSpec) -> None:
    """The template, and how many nodes, GPUs, processes and cores."""
    if spec.template not in TEMPLATES:
        raise TutorialError("slurm.unknown_template", name=spec.template, choices=", ".join(TEMPLATES))
    int_in("nodes", spec.nodes, 1, 4096)
    int_in("gpus_per_node", spec.gpus_per_node, 0, 64)
    if spec.nproc_per_node is not None:
        int_in("nproc_per_node", spec.nproc_per_node, 1, 1024)
        if spec.gpus_per_node > 0 and spec.nproc_per_node != spec.gpus_per_node:
            raise TutorialError("slurm.gpu_cpu_conflict", gpus=spec.gpus_per_node, nproc=spec.nproc_per_node)
    int_in("cpus_per_process", spec.cpus_per_process, 1, 1024)


def _check_sbatch_lines(spec: JobSpec) -> None:
    """What goes on #SBATCH lines, which sbatch reads without a shell: strict."""
    matching("job_name", spec.job_name, NAME, "slurm.allowed.name")
    for name in ("account", "partition", "qos"):
        if getattr(spec, name) is not None:
            matching(name, getattr(spec, name), NAME, "slurm.allowed.name")
    if not isinstance(spec.time, str) or not TIME.fullmatch(spec.time):
        raise bad_value("time", spec.time, "slurm.rule.time")
    matching("run_dir", spec.run_dir, PATH, "slurm.allowed.path")
    if spec.workdir is not None:
        matching("workdir", spec.workdir, PATH, "slurm.allowed.path")


def _check_environment(spec: JobSpec) -> None:
    """Python, modules, conda or venv, exported variables: shell-quoted in the script."""
    plain_text("python", spec.python)
    for module in spec.modules:
        matching("module", module, MODULE, "slurm.allowed.module")
    for name in ("conda", "conda_env", "venv"):
        if getattr(spec, name) is not None:
            plain_text(name, getattr(spec, name))
    if (spec.conda is None) != (spec.conda_env is None):
        raise TutorialError("slurm.conda_needs_env")
    for pair in spec.env:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise bad_value("env", pair, "slurm.rule.env_name")
        key, value = pair
        if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
            raise bad_value("env", key, "slurm.rule.env_name")
        plain_text(key, value, empty=True)


def _check_what_runs(spec: JobSpec) -> None:
    """The package's training with its options, or the user's script with its arguments: not both."""
    for name in JOB_OPTIONS:
        if getattr(spec, name) is not None:
            _train_rule(name, getattr(spec, name))
    for arg in spec.train_args:
        plain_text("train_args", arg)
    if spec.script is None:
        if spec.script_args:
            raise TutorialError("slurm.script_args_without_script")
        return
    plain_text("script", spec.script)
    if spec.template not in SCRIPT_TEMPLATES:
        raise TutorialError("slurm.script_template", template=spec.template, choices=", ".join(SCRIPT_TEMPLATES))
    given = [name for name in (*JOB_OPTIONS, "train_args") if getattr(spec, name) not in (None, ())]
    if given:
        raise TutorialError("slurm.script_with_train_options", names=", ".join(given))
    if isinstance(spec.script_args, str):
        plain_text("script_args", spec.script_args, empty=True)
    for arg in spec.script_argv:
        plain_text("script_args", arg, empty=True)


def _check_preemption(spec: JobSpec) -> None:
    """SIGUSR1's warning time (inside the time limit) and requeue."""
    if spec.signal_seconds is not None:
        int_in("signal_seconds", spec.signal_seconds, 1, 65535)
        limit = time_limit_seconds(spec.time)
        if limit and spec.signal_seconds >= limit:  # SIGUSR1 at the start: checkpoint at step 0, requeue, for ever
            raise TutorialError("slurm_limits.signal_ge_time", seconds=spec.signal_seconds, time=spec.time,
                                limit=limit)
    if not isinstance(spec.requeue, bool):
        raise bad_value("requeue", spec.requeue, "slurm.rule.choice", choices="True, False")


def _check_training(spec: JobSpec) -> None:
    if spec.script is None:  # the package's training: its options are checked now, not after queueing
        check_train_args(spec)


#: The checks of :func:`validate`, in the order they run (the first bad field is the one reported).
CHECKS = (_check_shape, _check_sbatch_lines, _check_environment, _check_what_runs, _check_preemption,
          _check_training)


def validate(spec: JobSpec) -> JobSpec:
    """Check every field of ``spec``; raise a bilingual :class:`TutorialError` on the first bad one."""
    for check in CHECKS:
        check(spec)
    return spec


#: Launcher options the job script passes itself (before the options after ``--``).
LAUNCH_FLAGS = ("--nproc-per-node", "--nnodes", "--node-rank")


class _TrainParser(argparse.ArgumentParser):
    """The training's own parser (``python -m ddp_tutorial.train``), raising instead of exiting."""

    def error(self, message):
        raise TutorialError("slurm_train.bad_args", reason=message)


def _train_parser() -> argparse.ArgumentParser:
    return add_train_arguments(_TrainParser(prog="python -m ddp_tutorial.train", add_help=False))


def _set_by_job(option: str) -> TutorialError:
    if option in LAUNCH_FLAGS:
        why = t("slurm_train.why_launch")
    elif option in ("--device", "--threads"):
        why = t("slurm_train.why_device")
    else:
        why = t("slurm_train.why_files")
    return TutorialError("slurm_train.set_by_job", option=option, why=why)


def check_train_args(spec: JobSpec) -> None:
    """The training options of a job, parsed and checked as the training will (nothing is run):
    a bad value is refused in the training's own words, an option the job script sets itself
    (processes, device, threads, result, checkpoints, resume) with the reason."""
    from ..argtext import argparse_in_user_language
    for arg in spec.train_args:
        if arg.split("=", 1)[0] in LAUNCH_FLAGS:
            raise _set_by_job(arg.split("=", 1)[0])
    with argparse_in_user_language():
        parser = _train_parser()
        given, defaults = vars(parser.parse_args(list(spec.train_args))), vars(parser.parse_args([]))
        for name in ("device", "threads", "json", "checkpoint_dir", "resume"):
            if given.get(name) != defaults.get(name):
                raise _set_by_job(option_name(name))
        for name in JOB_OPTIONS:  # given to render and again after --: the later would win, silently
            if getattr(spec, name) is not None and given.get(name) != defaults.get(name):
                raise TutorialError("slurm_train.twice", option=option_name(name), first=getattr(spec, name),
                                    second=given.get(name))
        full = [*spec.training_argv, "--device", "cuda" if spec.gpus_per_node else "cpu",
                "--threads", str(spec.cpus_per_process), *spec.train_args]
        config_from_args(parser.parse_args(full))  # the cross-option rules too (model size …)
