"""The settings of one training run, and the command-line options that set them.

Every launcher — ``ddp-tutorial train``, ``python -m ddp_tutorial.spawn``,
``torchrun -m ddp_tutorial.train``, the ipyparallel engines of the notebooks — builds the
same :class:`TrainConfig`, so a run means the same thing however it was started.
The defaults are the seed tutorial's: MNIST, batch 128 per process, Adam with lr 0.001,
2 epochs, a 4-layer MLP with 128 hidden features.

Each option is defined once, as a field of :class:`TrainConfig` made by :func:`option`: its
default, the catalogue key of its ``--help`` line, its rule (:mod:`ddp_tutorial.validate`),
whether a SLURM job passes it on (``job``), whether the JSON result records it as given
(``result``) and what a resumed run must keep of it (``keep``). The command line
(:func:`add_train_arguments`), the checks (:meth:`TrainConfig.validate`, :data:`TRAIN_RULES`), the
choices, the job spec's training fields (:data:`JOB_OPTIONS`), the result's defaults and the
checkpoint's rules (:data:`KEPT_ALWAYS`, :data:`KEPT_MID_EPOCH`) are derived from that table.
Adding an option: one ``option(...)`` line here, one help line in each catalogue
(``messages/en.toml``, ``tr.toml``).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Dict, Optional, Tuple

from . import validate
from .datasets import NAMES as DATASETS
from .datasets import default_dataset
from .i18n import TutorialError, decimal_number, whole_number
from .validate import Choice, Int, NonEmptyPath, Number

CHECKPOINT_NAME = "checkpoint.pt"   # the file in --checkpoint-dir (ddp_tutorial.checkpoint writes it)

#: Seconds a process waits for the others — to form the process group, or inside one collective — before it
#: gives up with a clear message: the package's one default for it (``--timeout``, ``ipp.run(pg_timeout=…)``,
#: the exercise checks). Why 300: every process of a run starts at the same time (one launcher, one srun, one
#: set of engines), so the others normally arrive within seconds; the margin covers a peer that is still
#: importing torch from a cold shared file system or writing a checkpoint, and 5 minutes is still short
#: against torch's own defaults (30 minutes for gloo, 10 for NCCL), so a rank left out of a collective is
#: reported within minutes. A call with its own wall-clock bound (``ipp.run(timeout=…)``, an exercise
#: check) ends at that bound if it comes first.
RENDEZVOUS_TIMEOUT = 300.0


def _default_root() -> str:
    from .datasets import default_root
    return str(default_root())


def option(default=MISSING, *, help: Optional[str] = None, rule=None, factory=MISSING, job: bool = False,
           result: bool = False, keep: Optional[str] = None, cli: Optional[dict] = None, flags: Tuple = ()):
    """One training option (a dataclass field) and everything derived from it.

    ``help``: the catalogue key of its ``--help`` line. ``rule``: the values allowed
    (:mod:`ddp_tutorial.validate`; ``None`` where every value is fine). ``job``: a SLURM job spec
    passes it on to the training (:data:`JOB_OPTIONS`). ``result``: the JSON result records it as
    given. ``keep``: a run resumed from a checkpoint must keep its value ``"always"`` (it decides the
    data order or the optimisation: another value would silently be another run) or only when the
    checkpoint was taken inside an epoch (``"mid-epoch"``: it splits the epoch among the ranks).
    ``cli``: extra ``add_argument`` keywords; ``flags``: ``(flag, keywords, help key)`` for an
    option set by other flags than ``--name`` (``--no-eval``)."""
    metadata = dict(help=help, rule=rule, job=job, result=result, keep=keep, cli=cli or {}, flags=flags)
    if factory is not MISSING:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class TrainConfig:
    dataset: str = option(factory=default_dataset, help="cli.dataset", rule=Choice(DATASETS), job=True,
                          result=True, keep="always")
    root: str = option(factory=_default_root, help="cli.root", rule=NonEmptyPath(), job=True)
    epochs: int = option(2, help="cli.epochs", rule=Int(0, 100_000), job=True)
    batch_size: int = option(128, help="cli.batch_size", rule=Int(1, 1 << 20), job=True,  # per process
                             result=True, keep="mid-epoch")
    lr: float = option(1e-3, help="cli.lr", rule=Number(0.0, 10.0), job=True)
    # adam (the seed's) | sgd (with momentum 0.9: what the linear scaling rule was derived for)
    optimizer: str = option("adam", help="cli.optimizer", rule=Choice(("adam", "sgd")), result=True,
                            keep="always")
    # none | linear (lr × world size) | sqrt (lr × √world size); a bare --scale-lr is linear
    scale_lr: str = option("none", help="cli.scale_lr", rule=Choice(("none", "linear", "sqrt")), result=True,
                           cli=dict(nargs="?", const="linear"))
    # lr rises linearly to its value over the first N steps
    warmup_steps: int = option(0, help="cli.warmup_steps", rule=Int(0, 10_000_000), result=True)
    # DistributedSampler seeds each epoch with seed + epoch
    seed: int = option(0, help="cli.seed", rule=Int(0, 2**63 - 1 - 100_000), job=True, result=True,
                       keep="always")
    num_layers: int = option(4, help="cli.num_layers", rule=Int(2, 64))  # an input and an output layer at least
    hidden: int = option(128, help="cli.hidden", rule=Int(1, 1 << 16))
    backend: str = option("auto", help="cli.backend", rule=Choice(("auto", "gloo", "nccl")))
    device: str = option("auto", help="cli.device", rule=Choice(("auto", "cpu", "cuda")))
    # seconds to form the process group / finish a collective (RENDEZVOUS_TIMEOUT; > 1 s: less is no network)
    timeout: float = option(RENDEZVOUS_TIMEOUT, help="cli.timeout", rule=Number(1.0, 7 * 24 * 3600.0))
    # intra-op threads per process (default: ddp_tutorial.threads)
    threads: Optional[int] = option(None, help="cli.threads", rule=Int(1, 1024))
    checkpoint_dir: Optional[str] = option(None, help="cli.checkpoint_dir", rule=NonEmptyPath())
    resume: bool = option(False, help="cli.resume")
    json: Optional[str] = option(None, help="cli.json", rule=NonEmptyPath())  # global rank 0 writes it
    # use only the first N training images (quick runs)
    train_subset: Optional[int] = option(None, help="cli.train_subset", rule=Int(1, 10**9), keep="always")
    evaluate: bool = option(True, flags=(("--no-eval", dict(action="store_false"), "cli.no_eval"),))
    # tqdm bar on rank 0 (default: when the terminal is interactive)
    progress: Optional[bool] = option(None, flags=(
        ("--progress", dict(action="store_true", default=None), "cli.progress"),
        ("--no-progress", dict(action="store_false"), "cli.no_progress")))
    quiet: bool = option(False, help="cli.quiet")  # no per-rank lines (benchmarks)

    def validate(self) -> "TrainConfig":
        """Check every option by its rule, then the bounds across options; ``~`` in paths is expanded."""
        for f in fields(self):
            rule, value = f.metadata["rule"], getattr(self, f.name)
            if rule is None or (value is None and f.default is None):  # an optional option left out
                continue
            validate.check(f.name, value, rule)
            if isinstance(rule, NonEmptyPath):
                setattr(self, f.name, rule.expand(value))
        validate.check_model_size(self.num_layers, self.hidden)
        if self.resume and not self.checkpoint_dir:
            raise TutorialError("train.need_checkpoint_dir")
        if self.json and self.checkpoint_dir and _same_path(self.json, Path(self.checkpoint_dir) / CHECKPOINT_NAME):
            raise TutorialError("config.json_is_checkpoint", json=self.json,
                                checkpoint=str(Path(self.checkpoint_dir) / CHECKPOINT_NAME))
        return self

    def validated(self) -> "TrainConfig":
        """A checked copy (the caller's object is left as it was)."""
        return replace(self).validate()

    def as_dict(self) -> dict:
        return asdict(self)

    def recorded(self) -> dict:
        """The options the JSON result records as given (``result=True`` in the table)."""
        return {name: getattr(self, name) for name in RESULT_OPTIONS}


def _same_path(a, b) -> bool:
    def real(path) -> str:
        try:
            return str(Path(path).resolve())
        except (OSError, RuntimeError):  # a symlink loop: compare the absolute paths
            return os.path.abspath(path)
    return real(a) == real(b)


#: Option name → its rule (the SLURM job spec checks its training fields with these too).
TRAIN_RULES: Dict[str, object] = {f.name: f.metadata["rule"] for f in fields(TrainConfig) if f.metadata["rule"]}
#: The options a SLURM job spec passes on to its training processes (fields of JobSpec too).
JOB_OPTIONS: Tuple[str, ...] = tuple(f.name for f in fields(TrainConfig) if f.metadata["job"])
#: The options the JSON result records as given (the run records lr, backend, device, threads as resolved).
RESULT_OPTIONS: Tuple[str, ...] = tuple(f.name for f in fields(TrainConfig) if f.metadata["result"])
#: The options a resumed run must keep: always, or only when it resumes inside an epoch (checkpoint.py checks).
KEPT_ALWAYS: Tuple[str, ...] = tuple(f.name for f in fields(TrainConfig) if f.metadata["keep"] == "always")
KEPT_MID_EPOCH: Tuple[str, ...] = tuple(f.name for f in fields(TrainConfig) if f.metadata["keep"] == "mid-epoch")


def default_of(name: str):
    """Option ``name``'s default, as the table gives it."""
    return TrainConfig.__dataclass_fields__[name].default


def _argparse_keywords(f) -> dict:
    """``add_argument`` keywords for field ``f``: its type, default and choices from the table."""
    kind = str(f.type).removeprefix("Optional[").removesuffix("]")
    default = None if f.default is MISSING else f.default
    if kind == "bool":
        return dict(action="store_true")
    # decimal_number: 0,001 → "write a dot" in the user's language
    keywords = dict(default=default, type={"int": whole_number, "float": decimal_number}.get(kind, str))
    rule = f.metadata["rule"]
    if isinstance(rule, Choice):  # shown in --help; a bad value gets the rule's message, like every option
        keywords["metavar"] = "{" + ",".join(rule.choices) + "}"
    return keywords


def help_text(f) -> str:
    """Field ``f``'s help line in the user's language, its ``{default}`` taken from the table (never
    written by hand in the catalogue)."""
    from .i18n import t
    return t(f.metadata["help"], **({} if f.default is MISSING else {"default": f.default}))


def add_train_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The training options, shared by every launcher's command line (help in the user's language;
    no torch import, so ``ddp-tutorial train --help`` answers at once)."""
    from .i18n import t
    g = parser.add_argument_group(t("cli.group_training"))
    for f in fields(TrainConfig):
        for flag, keywords, help_key in f.metadata["flags"]:
            g.add_argument(flag, dest=f.name, help=t(help_key), **keywords)
        if not f.metadata["flags"]:
            g.add_argument(validate.option_name(f.name), dest=f.name, help=help_text(f),
                           **{**_argparse_keywords(f), **f.metadata["cli"]})
    return parser


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """The training options a job script passes on (``job=True`` in the table), for ``slurm render``:
    no default here (the job spec's own applies), the type and help from the table."""
    for f in fields(TrainConfig):
        if f.name in JOB_OPTIONS:
            keywords = {**_argparse_keywords(f), "default": None}
            parser.add_argument(validate.option_name(f.name), dest=f.name, help=help_text(f), **keywords)


def job_options_of(args: argparse.Namespace) -> dict:
    """The ``job=True`` options from a parsed command line, for ``JobSpec(**…)``."""
    return {name: getattr(args, name) for name in JOB_OPTIONS}


def add_launch_arguments(parser: argparse.ArgumentParser, nodes: bool = True) -> None:
    """How many processes, on how many nodes (torch-free, like :func:`add_train_arguments`)."""
    from .i18n import t
    g = parser.add_argument_group(t("cli.group_launch"))
    g.add_argument("--nproc-per-node", type=whole_number, default=None, help=t("cli.nproc_per_node"))
    if nodes:
        g.add_argument("--nnodes", type=whole_number, default=None, help=t("cli.nnodes"))
        g.add_argument("--node-rank", type=whole_number, default=None, help=t("cli.node_rank"))


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The checked :class:`TrainConfig` that ``args`` describe; with the launch options, the number of
    processes is checked first (this machine must be able to start them)."""
    if getattr(args, "nproc_per_node", None) is not None:
        validate.check_processes(args.nproc_per_node)
    names = {f.name for f in fields(TrainConfig)}
    values = {k: v for k, v in vars(args).items() if k in names and v is not None}
    return TrainConfig(**values).validate()
