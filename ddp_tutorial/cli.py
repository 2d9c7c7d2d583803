"""Step 12 — the ``ddp-tutorial`` command.

    ddp-tutorial data prepare --dataset fashion-mnist --root DIR [--from DIR]
    ddp-tutorial train --dataset fashion-mnist --root DIR --nproc-per-node 2 --epochs 2 --json out.json
    ddp-tutorial slurm render|submit|status|wait|cancel|logs ...
    ddp-tutorial env          # what this process would be told: rank, world size, master, backend

Errors a user can fix print one clear line (Turkish with ``DDP_TUTORIAL_LANG=tr``) and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import __version__
from .config import add_train_arguments, config_from_args
from .i18n import TutorialError, t
from .spawn import add_launch_arguments, launch


def _train(args) -> int:
    return launch(config_from_args(args), args.nproc_per_node, 1, 0)


def _env(args) -> int:
    from .distributed import resolve_environment
    print(json.dumps(resolve_environment().as_dict(), indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ddp-tutorial",
                                     description="PyTorch DDP workshop bundle / PyTorch DDP atölye paketi")
    parser.add_argument("--version", action="version", version=f"ddp-tutorial {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train on this machine with N processes")
    add_launch_arguments(train, nodes=False)
    add_train_arguments(train)
    train.set_defaults(func=_train)

    env = sub.add_parser("env", help="print the resolved distributed environment")
    env.set_defaults(func=_env)

    from . import data
    data.add_cli(sub)
    try:
        from . import slurm
    except ImportError:  # pragma: no cover - slurm.py is part of the package
        slurm = None
    if slurm is not None and hasattr(slurm, "add_cli"):
        slurm.add_cli(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except TutorialError as error:
        print(f"{t('error.prefix')}: {error}", file=sys.stderr, flush=True)
        return error.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
