"""The settings of one training run, and the command-line options that set them.

Every launcher — ``ddp-tutorial train``, ``python -m ddp_tutorial.spawn``,
``torchrun -m ddp_tutorial.train``, the ipyparallel engines of the notebooks — builds the
same :class:`TrainConfig`, so a run means the same thing however it was started.
The defaults are the seed tutorial's: MNIST, batch 128 per process, Adam with lr 0.001,
2 epochs, a 4-layer MLP with 128 hidden features.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Optional

from . import validate
from .datasets import NAMES as DATASETS  # noqa: F401  (re-exported: the data-set names)
from .datasets import default_dataset
from .i18n import TutorialError


def _default_root() -> str:
    from .datasets import default_root
    return str(default_root())


@dataclass
class TrainConfig:
    dataset: str = field(default_factory=default_dataset)
    root: str = field(default_factory=_default_root)
    epochs: int = 2
    batch_size: int = 128           # per process, as in the seed
    lr: float = 1e-3
    scale_lr: str = "none"          # none | linear (lr × world size) | sqrt (lr × √world size)
    warmup_steps: int = 0           # lr rises linearly to its value over the first N steps
    seed: int = 0
    num_layers: int = 4
    hidden: int = 128
    backend: str = "auto"           # auto | gloo | nccl
    device: str = "auto"            # auto | cpu | cuda
    timeout: float = 300.0          # seconds to form the process group / finish a collective
    threads: Optional[int] = None   # intra-op threads per process (default: ddp_tutorial.threads)
    checkpoint_dir: Optional[str] = None
    resume: bool = False
    json: Optional[str] = None      # write the result here (global rank 0)
    train_subset: Optional[int] = None  # use only the first N training images (quick runs)
    evaluate: bool = True           # rank-0 test accuracy at the end
    progress: Optional[bool] = None # tqdm bar on rank 0 (default: when the terminal is interactive)
    quiet: bool = False             # no per-rank lines (benchmarks)

    def validate(self) -> "TrainConfig":
        """Check every option (rules shared with the SLURM job spec: :mod:`ddp_tutorial.validate`)."""
        if isinstance(self.scale_lr, bool):  # older callers: scale_lr=True meant the linear rule
            self.scale_lr = "linear" if self.scale_lr else "none"
        for name in ("dataset", "epochs", "batch_size", "lr", "seed", "num_layers", "hidden", "timeout",
                     "backend", "device", "scale_lr", "warmup_steps"):
            validate.check(name, getattr(self, name))
        for name in ("threads", "train_subset"):
            if getattr(self, name) is not None:
                validate.check(name, getattr(self, name))
        if self.resume and not self.checkpoint_dir:
            raise TutorialError("train.need_checkpoint_dir")
        return self

    def validated(self) -> "TrainConfig":
        """A checked copy (the caller's object is left as it was)."""
        return replace(self).validate()

    def as_dict(self) -> dict:
        return asdict(self)


def add_train_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The training options, shared by every launcher's command line (help in the user's language;
    no torch import, so ``ddp-tutorial train --help`` answers at once)."""
    from .i18n import t
    d = TrainConfig.__dataclass_fields__
    g = parser.add_argument_group(t("cli.group_training"))
    g.add_argument("--dataset", default=None, help=t("cli.dataset"))
    g.add_argument("--root", default=None, help=t("cli.root"))
    g.add_argument("--epochs", type=int, default=d["epochs"].default, help=t("cli.epochs"))
    g.add_argument("--batch-size", type=int, default=d["batch_size"].default, help=t("cli.batch_size"))
    g.add_argument("--lr", type=float, default=d["lr"].default, help=t("cli.lr"))
    g.add_argument("--scale-lr", nargs="?", const="linear", default="none", choices=("none", "linear", "sqrt"),
                   help=t("cli.scale_lr"))
    g.add_argument("--warmup-steps", type=int, default=d["warmup_steps"].default, help=t("cli.warmup_steps"))
    g.add_argument("--seed", type=int, default=d["seed"].default, help=t("cli.seed"))
    g.add_argument("--num-layers", type=int, default=d["num_layers"].default, help=t("cli.num_layers"))
    g.add_argument("--hidden", type=int, default=d["hidden"].default, help=t("cli.hidden"))
    g.add_argument("--backend", default="auto", help=t("cli.backend"))
    g.add_argument("--device", default="auto", help=t("cli.device"))
    g.add_argument("--timeout", type=float, default=d["timeout"].default, help=t("cli.timeout"))
    g.add_argument("--threads", type=int, default=None, help=t("cli.threads"))
    g.add_argument("--checkpoint-dir", default=None, help=t("cli.checkpoint_dir"))
    g.add_argument("--resume", action="store_true", help=t("cli.resume"))
    g.add_argument("--json", default=None, help=t("cli.json"))
    g.add_argument("--train-subset", type=int, default=None, help=t("cli.train_subset"))
    g.add_argument("--no-eval", dest="evaluate", action="store_false", help=t("cli.no_eval"))
    g.add_argument("--progress", dest="progress", action="store_true", default=None, help=t("cli.progress"))
    g.add_argument("--no-progress", dest="progress", action="store_false", help=t("cli.no_progress"))
    g.add_argument("--quiet", action="store_true", help=t("cli.quiet"))
    return parser


def add_launch_arguments(parser: argparse.ArgumentParser, nodes: bool = True) -> None:
    """How many processes, on how many nodes (torch-free, like :func:`add_train_arguments`)."""
    from .i18n import t
    g = parser.add_argument_group(t("cli.group_launch"))
    g.add_argument("--nproc-per-node", type=int, default=None, help=t("cli.nproc_per_node"))
    if nodes:
        g.add_argument("--nnodes", type=int, default=None, help=t("cli.nnodes"))
        g.add_argument("--node-rank", type=int, default=None, help=t("cli.node_rank"))


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    names = {f.name for f in fields(TrainConfig)}
    values = {k: v for k, v in vars(args).items() if k in names and v is not None}
    return TrainConfig(**values).validate()
