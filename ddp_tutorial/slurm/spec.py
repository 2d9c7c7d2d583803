"""What a SLURM job asks for: site profiles, the job spec as one table, and the check of every value.

The profiles are the GPU partitions of the session's site table (:func:`ddp_tutorial.sites.session`:
``$DDP_TUTORIAL_SITE``, a shipped name or a TOML file; unset, the shipped default), plus ``generic``.

Each field of :class:`JobSpec` is defined once, by :func:`job_field`: its default, its rule
(:mod:`.rules`), its ``slurm render`` flag and the catalogue key of its ``--help`` line (whose
``{default}`` is filled from the table). :func:`validate` is a loop over that table plus the few
rules that span fields (:data:`CROSS_RULES`); ``slurm render``'s options
(:func:`~ddp_tutorial.slurm.cli.add_render_arguments`) are made from the same table.

The training options a job passes on (data set, root, epochs, batch size, lr, seed: those marked
``job=True`` in :class:`~ddp_tutorial.config.TrainConfig`'s table, :data:`~ddp_tutorial.config.JOB_OPTIONS`)
are fields of :class:`JobSpec` made from that table and follow its rules, so a value is refused in the
same words wherever it is given.

Partition, account and reservation are written as ``#SBATCH`` lines only when given. sbatch's own
variables ``SBATCH_PARTITION``, ``SBATCH_ACCOUNT``, ``SBATCH_RESERVATION`` win over those lines (sbatch's
rule: command line, then environment, then the script); :mod:`.submit` shows what sbatch will really use.

No torch import: this runs on a login node.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Dict, Iterator, List, Optional, Tuple, Union

from .. import sites
from ..config import JOB_OPTIONS, TRAIN_RULES, TrainConfig, add_train_arguments, config_from_args
from ..i18n import TutorialError, t, whole_number
from ..validate import option_name
from .rules import (MODULE, NAME, PATH, SIGNAL, Arguments, Each, EnvPairs, Flag, IntIn, OneOf,  # noqa: F401
                    Pattern, Text, Time, bad_value, job_id_of, plain_text, split_arguments, time_limit_seconds)

TEMPLATES = {
    "seed": "seed.sbatch",          # one task per node → ddp_tutorial.spawn → one process per GPU
    "per-gpu": "per-gpu.sbatch",    # one SLURM task per GPU → ddp_tutorial.train (or your script)
    "torchrun": "torchrun.sbatch",  # one torchrun per node, c10d rendezvous → ddp_tutorial.train (or your script)
}
#: The templates that can run the user's own script (``script=``): the seed's layout needs ddp_tutorial.spawn.
SCRIPT_TEMPLATES = ("per-gpu", "torchrun")


@dataclass(frozen=True)
class Profile:
    """What a partition's nodes offer: GPUs per node, the CPU cores that go with each GPU, and the cores
    of a node (``gpus_per_node × cpus_per_gpu`` never exceeds them); ``site``: the site table
    (:mod:`ddp_tutorial.sites`) it comes from. (Which torch build the site's GPUs need is
    :data:`ddp_tutorial.gpu.SITES`' to say, from the same table.)"""

    name: str
    partition: Optional[str]
    gpus_per_node: int
    cpus_per_gpu: int
    description_key: str                 # the catalogue key of its one-line description
    gpu: Optional[str] = None            # GPU model and compute capability
    cores_per_node: Optional[int] = None  # None: not known (generic)
    checked: bool = False                # False: taken from the site's documentation, not from a node
    site: Optional[str] = None           # the site table it is built from (None: generic)

    @property
    def description(self) -> str:
        """One line in the user's language: "SITE gpu-a: 4× NVIDIA V100 16 GB, 40 cores, 10 per GPU"."""
        model = (self.gpu or "").split(",")[0]
        return t(self.description_key, site=self.site.upper() if self.site else "", partition=self.partition,
                 gpus=self.gpus_per_node, model=model, cores=self.cores_per_node, per_gpu=self.cpus_per_gpu)


def site_profiles(site: "sites.Site") -> List[Profile]:
    """A profile for each GPU partition of ``site``'s table, in the table's order: its GPUs per node, GPU
    model, cores per node and cores per GPU as the guide states them (checked=False: `scontrol show
    partition` on the site tells what SLURM enforces). A partition missing one of them has no profile."""
    found = []
    for p in site.partitions.values():
        if p.gpus_per_node and p.cores_per_gpu and p.cores_per_node:
            found.append(Profile(p.name, p.name, p.gpus_per_node, p.cores_per_gpu, "slurm.profile.site", gpu=p.gpu,
                                 cores_per_node=p.cores_per_node, site=site.name))
    return found


#: The cluster's default partition, no GPUs unless asked: the profile of a job that names no partition.
GENERIC = Profile("generic", None, 0, 1, "slurm.profile.generic")


def profiles(environ=None) -> Dict[str, Profile]:
    """``generic``, then the GPU partitions of the session's site table (:func:`ddp_tutorial.sites.session`)."""
    return {p.name: p for p in (GENERIC, *site_profiles(sites.session(environ)))}


class SessionProfiles(Mapping):
    """:func:`profiles` as a read-only mapping that follows ``$DDP_TUTORIAL_SITE`` at every look-up:
    ``PROFILES["gpu-a"]``, ``list(PROFILES)``."""

    def __getitem__(self, name: str) -> Profile:
        return profiles()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(profiles())

    def __len__(self) -> int:
        return len(profiles())

    def __repr__(self) -> str:
        return f"PROFILES({', '.join(self)})"


#: The profiles of the session's site (``generic`` first), read anew from its table at each look-up.
PROFILES: Mapping = SessionProfiles()


#: The one place the workshop's profile comes from (05, ``slurm render``, ``ipp.start_slurm``).
PROFILE_VARIABLE = "DDP_TUTORIAL_SLURM_PROFILE"


def workshop_profile(environ=None) -> str:
    """The profile to use: ``$DDP_TUTORIAL_SLURM_PROFILE``; unset, the profile whose partition is
    ``$SBATCH_PARTITION`` (sbatch sends the job there, so the job must have that partition's shape), else
    ``generic`` (the cluster's default partition, no GPUs unless asked). A profile whose partition is not
    ``$SBATCH_PARTITION`` is refused: sbatch would take the variable's partition with the profile's cores."""
    env = os.environ if environ is None else environ
    name = env.get(PROFILE_VARIABLE, "").strip()
    partition = env.get("SBATCH_PARTITION", "").strip()
    known = profiles(env)
    if not name:
        return next((p.name for p in known.values() if p.partition and p.partition == partition), "generic")
    if name not in known:
        raise TutorialError("slurm.unknown_profile_variable", name=name, variable=PROFILE_VARIABLE,
                            choices=", ".join(known))
    wanted = known[name].partition
    if partition and wanted and partition != wanted:
        raise TutorialError("slurm.profile_partition_conflict", profile=name, partition=wanted, sbatch=partition,
                            variable=PROFILE_VARIABLE)
    return name


def day_profile(environ=None) -> Profile:
    """A GPU profile to show a GPU job with when the workshop's own has none (05's seed job on a CPU session):
    the profile of the day's jobs (the session site's ``[day] job_partition``), else its first GPU profile."""
    known = profiles(environ)
    wanted = sites.session(environ).section("day").get("job_partition")
    gpu = [p for p in known.values() if p.gpus_per_node]
    return known[wanted] if wanted in known and known[wanted].gpus_per_node else (gpu[0] if gpu else GENERIC)


def job_field(default=None, *, rule=None, flag: Optional[str] = None, help: Optional[str] = None,
              cli: Optional[dict] = None):
    """One field of :class:`JobSpec` and everything derived from it: ``rule`` (:mod:`.rules`; ``None``
    where a value is left out, the rule is skipped), ``flag`` (its ``slurm render`` option; ``None``: no
    option of its own), ``help`` (the catalogue key of the option's help, ``{default}`` filled from here),
    ``cli`` (further ``add_argument`` keywords)."""
    metadata = dict(rule=rule, flag=flag, help=help, cli=cli or {})
    if isinstance(default, (list, dict, set)):
        raise TypeError("a job field's default must be immutable")
    return field(default=default, metadata=metadata)


class _TrainRule:
    """A training option's rule, from :data:`~ddp_tutorial.config.TRAIN_RULES`."""

    def check(self, name: str, value) -> None:
        if isinstance(value, str):
            plain_text(name, value)  # shell-quoted in the script
        rule = TRAIN_RULES[name]
        if not rule.ok(value):
            raise TutorialError("slurm.bad_value", name=name, value=value, rule=rule.describe())


#: The training options a job passes on, one keyword field each (``None``: the training's default),
#: made from :class:`~ddp_tutorial.config.TrainConfig`'s table (``job=True``): dataset, root, epochs,
#: batch_size, lr, seed. Their flags come from that table too (:func:`~ddp_tutorial.config.add_job_arguments`).
TrainingOptions = make_dataclass(
    "TrainingOptions", [(f.name, f"Optional[{f.type}]",
                         field(default=None, kw_only=True, metadata=dict(rule=_TrainRule(), flag=None)))
                        for f in fields(TrainConfig) if f.name in JOB_OPTIONS])

_NAME, _PATH = Pattern(NAME, "slurm.allowed.name"), Pattern(PATH, "slurm.allowed.path")
_INT = dict(type=whole_number)


@dataclass
class JobSpec(TrainingOptions):
    """Everything :func:`~ddp_tutorial.slurm.render` needs. Build it directly or with :meth:`from_profile`.

    Its training fields (``dataset``, ``root``, ``epochs`` … :data:`~ddp_tutorial.config.JOB_OPTIONS`)
    come from :class:`TrainingOptions`; ``train_args`` carries any other training option."""

    template: str = job_field("seed", rule=OneOf(tuple(TEMPLATES), "slurm.unknown_template"), flag="--template",
                              help="slurm.cli.template", cli=dict(choices=list(TEMPLATES)))
    nodes: int = job_field(2, rule=IntIn(1, 4096), flag="--nodes", help="slurm.cli.nodes", cli=_INT)
    # 0: the CPU-only form (no --gres)
    gpus_per_node: int = job_field(0, rule=IntIn(0, 64), flag="--gpus-per-node", help="slurm.cli.gpus_per_node",
                                   cli=_INT)
    # CPU form: processes per node (GPU form: = gpus_per_node)
    nproc_per_node: Optional[int] = job_field(None, rule=IntIn(1, 1024), flag="--nproc-per-node",
                                              help="slurm.cli.nproc_per_node", cli=_INT)
    # cores for each training process (→ --cpus-per-task, threads)
    cpus_per_process: int = job_field(1, rule=IntIn(1, 1024), flag="--cpus-per-process",
                                      help="slurm.cli.cpus_per_process", cli=_INT)
    # the cores of one node (from the profile): what a node's tasks ask for must fit
    cores_per_node: Optional[int] = job_field(None, rule=IntIn(1, 1 << 16))
    job_name: str = job_field("ddp-tutorial", rule=_NAME, flag="--job-name", help="slurm.cli.job_name")
    partition: Optional[str] = job_field(None, rule=_NAME, flag="--partition", help="slurm.cli.partition")
    account: Optional[str] = job_field(None, rule=_NAME, flag="--account", help="slurm.cli.account")
    reservation: Optional[str] = job_field(None, rule=_NAME, flag="--reservation", help="slurm.cli.reservation")
    qos: Optional[str] = job_field(None, rule=_NAME, flag="--qos", help="slurm.cli.qos")
    time: str = job_field("00:30:00", rule=Time(), flag="--time", help="slurm.cli.time")
    # logs, results and checkpoints go here
    run_dir: str = job_field("runs", rule=_PATH, flag="--run-dir", help="slurm.cli.run_dir")
    # --chdir: where the job starts (default: where you submit)
    workdir: Optional[str] = job_field(None, rule=_PATH, flag="--workdir", help="slurm.cli.workdir")
    # Environment set-up
    python: str = job_field("python", rule=Text(), flag="--python", help="slurm.cli.python")
    # module load …  (preceded by module purge)
    modules: Tuple[str, ...] = job_field((), rule=Each(Pattern(MODULE, "slurm.allowed.module"), "module"),
                                         flag="--module", help="slurm.cli.module",
                                         cli=dict(action="append", metavar="MODULE"))
    conda: Optional[str] = job_field(None, rule=Text(), flag="--conda", help="slurm.cli.conda")  # …/miniconda3
    conda_env: Optional[str] = job_field(None, rule=Text(), flag="--conda-env", help="slurm.cli.conda_env")
    venv: Optional[str] = job_field(None, rule=Text(), flag="--venv", help="slurm.cli.venv")
    # extra exports, (NAME, value); on the command line NAME=VALUE
    env: Tuple[Tuple[str, str], ...] = job_field((), rule=EnvPairs(), flag="--env", help="slurm.cli.env",
                                                 cli=dict(action="append", metavar="NAME=VALUE"))
    # Training (the package's model): the fields of TrainingOptions, and anything else, e.g. ("--scale-lr",)
    # (on the command line: the words after --)
    train_args: Tuple[str, ...] = job_field((), rule=Each(Text(), "train_args"))
    # …or the user's own script instead (per-gpu and torchrun templates)
    script: Optional[str] = job_field(None, rule=Text(), flag="--script", help="slurm.cli.script",
                                      cli=dict(metavar="PATH"))
    # its arguments: a tuple, or one string split like a shell
    script_args: Union[str, Tuple[str, ...]] = job_field((), rule=Arguments(), flag="--script-args",
                                                         help="slurm.cli.script_args", cli=dict(metavar='"ARGS"'))
    # Preemption / time limit: #SBATCH --signal=B:USR1@S, a warning S seconds before the limit
    signal_seconds: Optional[int] = job_field(None, rule=IntIn(1, 65535), flag="--preempt-signal",
                                              help="slurm.cli.preempt_signal",
                                              cli=dict(type=whole_number, metavar="SECONDS"))
    # #SBATCH --requeue; the script requeues itself after exit 75
    requeue: bool = job_field(False, rule=Flag(), flag="--requeue", help="slurm.cli.requeue",
                              cli=dict(action="store_true"))

    @classmethod
    def from_profile(cls, profile: str = "generic", *, environ=None, **overrides) -> "JobSpec":
        """A spec for a site profile: on a partition ``gpu-a`` of 8 GPUs and 128 cores per node,
        ``from_profile("gpu-a", nodes=2)`` → 8 GPUs, 16 cores each, at most 128 cores per node. ``None`` in
        ``overrides`` means "the profile's / the default"; ``environ``: where ``$DDP_TUTORIAL_SITE`` is read."""
        known = profiles(environ)
        if profile not in known:
            raise TutorialError("slurm.unknown_profile", name=profile, choices=", ".join(known))
        p = known[profile]
        values = dict(partition=p.partition, gpus_per_node=p.gpus_per_node, cpus_per_process=p.cpus_per_gpu,
                      cores_per_node=p.cores_per_node)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    # Derived numbers -------------------------------------------------------------
    @property
    def per_node(self) -> bool:
        """The per-node-parent form: your own script under per-gpu with ``--gpus-per-node N
        --nproc-per-node 1`` gets one SLURM task per node holding all N GPUs (``--gres=gpu:N``, the cores
        of N processes) and starts its own process per GPU (``mp.spawn``, like the seed's parent)."""
        return (self.template == "per-gpu" and self.script is not None and self.gpus_per_node > 0
                and self.nproc_per_node == 1)

    @property
    def processes_per_node(self) -> int:
        """The processes SLURM starts on a node (the per-node form: 1, which starts the others itself)."""
        if self.per_node:
            return 1
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
        """Cores per SLURM task: ``cpus_per_process`` for per-gpu, × processes per node for a launcher,
        × GPUs per node for the per-node form (its task starts one process per GPU)."""
        if self.per_node:
            return self.cpus_per_process * self.gpus_per_node
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
        return split_arguments("script_args", self.script_args)


# --------------------------------------------------------------------------------------
# Validation: the table's rules, then the rules across fields


def _gpus_or_processes(spec: JobSpec) -> None:
    if (spec.gpus_per_node > 0 and spec.nproc_per_node is not None and spec.nproc_per_node != spec.gpus_per_node
            and not spec.per_node):
        raise TutorialError("slurm.gpu_cpu_conflict", gpus=spec.gpus_per_node, nproc=spec.nproc_per_node)


def _fits_the_node(spec: JobSpec) -> None:
    """A node's tasks ask for no more cores than the node has (on 40-core nodes: 3 GPUs × 16 cores = 48 > 40),
    and the job stays within its partition's written rules where a site table has them (T5-8)."""
    asked = spec.cpus_per_task * spec.tasks_per_node
    if spec.cores_per_node is not None and asked > spec.cores_per_node:
        raise TutorialError("slurm.too_many_cores", asked=asked, cores=spec.cores_per_node,
                            processes=spec.processes_per_node, per_process=spec.cpus_per_process)
    _within_the_partition(spec)


def _conda_with_env(spec: JobSpec) -> None:
    if (spec.conda is None) != (spec.conda_env is None):
        raise TutorialError("slurm.conda_needs_env")


def _training_or_script(spec: JobSpec) -> None:
    """The package's training with its options, or the user's script with its arguments: not both."""
    if spec.script is None:
        if spec.script_args:
            raise TutorialError("slurm.script_args_without_script")
        return
    if spec.template not in SCRIPT_TEMPLATES:
        raise TutorialError("slurm.script_template", template=spec.template, choices=", ".join(SCRIPT_TEMPLATES))
    given = [name for name in (*JOB_OPTIONS, "train_args") if getattr(spec, name) not in (None, ())]
    if given:
        raise TutorialError("slurm.script_with_train_options", names=", ".join(given))


#: SLURM may send ``--signal``'s warning up to this many seconds before the time it was asked for.
SIGNAL_EARLY_SECONDS = 60


def _signal_inside_the_limit(spec: JobSpec) -> None:
    """SIGUSR1's warning comes before the time limit, with SLURM's 60 s of slack (P8): with ``time <=
    signal + 60`` a run may be warned at its start, checkpoint at step 0 and requeue for ever."""
    limit = time_limit_seconds(spec.time)
    if spec.signal_seconds is not None and limit and limit <= spec.signal_seconds + SIGNAL_EARLY_SECONDS:
        minutes = -(-(spec.signal_seconds + SIGNAL_EARLY_SECONDS + 1) // 60)  # the smallest whole minutes above
        smallest = f"{minutes // 60:02d}:{minutes % 60:02d}:00"
        raise TutorialError("slurm_limits.signal_ge_time", seconds=spec.signal_seconds, time=spec.time, limit=limit,
                            early=SIGNAL_EARLY_SECONDS, smallest=smallest)


def _within_the_partition(spec: JobSpec) -> None:
    """A job the site's written rules refuse is refused here, in the table's words (T5-8): more GPUs or
    nodes than the partition has, fewer cores per GPU or per job than its minimum, no GPU on a GPU-only
    partition, a time over its limit. The first broken rule is said (:meth:`~ddp_tutorial.sites.Site.check_job`
    lists them all)."""
    site = sites.site_for(spec.partition) if spec.partition is not None else None
    if site is None:
        return
    cores = spec.cpus_per_task * spec.tasks_per_node
    broken = site.check_job(spec.partition, nodes=spec.nodes, gpus_per_node=spec.gpus_per_node,
                            cores_per_node=cores, time=spec.time)
    if broken:
        raise broken[0].error()


def _training_options(spec: JobSpec) -> None:
    if spec.script is None:  # the package's training: its options are checked now, not after queueing
        check_train_args(spec)


#: The rules that span fields, in the order :func:`validate` applies them after the table's.
CROSS_RULES = (_gpus_or_processes, _fits_the_node, _conda_with_env, _training_or_script, _signal_inside_the_limit,
               _training_options)


def validate(spec: JobSpec) -> JobSpec:
    """Check every field of ``spec`` by its rule in the table (an optional field left at ``None`` is not
    given), then :data:`CROSS_RULES`; raise a bilingual :class:`TutorialError` on the first bad value."""
    for f in fields(spec):
        value = getattr(spec, f.name)
        if f.metadata.get("rule") is not None and (value is not None or f.default is not None):
            f.metadata["rule"].check(f.name, value)
    for rule in CROSS_RULES:
        rule(spec)
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
