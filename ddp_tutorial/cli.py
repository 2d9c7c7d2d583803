"""The ``ddp-tutorial`` command.

    ddp-tutorial data prepare --dataset fashion-mnist --root DIR [--from DIR]
    ddp-tutorial train --dataset fashion-mnist --root DIR --nproc-per-node 2 --epochs 2 --json out.json
    ddp-tutorial slurm render|submit|status|wait|cancel|logs ...
    ddp-tutorial env          # what this process would be told: rank, world size, master, backend
    ddp-tutorial check-script train.py   # the lines to change to run anywhere, and the launch that fits
    ddp-tutorial site-check --reservation NAME   # the day-before check at the site (ok / what to do)
    ddp-tutorial site show|plan --site truba --attendees 30   # the site's rules with sources; the day's arithmetic

It answers at once: only the chosen subcommand's module is imported, and ``--help``, ``train
--help``, ``data check`` and ``slurm render`` never import torch. Help texts and argparse's own
words ("usage:", "invalid int value") are in the user's language (``DDP_TUTORIAL_LANG=tr``).
Errors a user can fix print one clear line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Dict, Optional, Sequence, Tuple

from . import __version__, collector, exits
from .i18n import TutorialError, metavar, t
from .threads import prefer_passive_openmp

from .argtext import ARGPARSE_WORDS, argparse_in_user_language  # noqa: F401 (re-exported)


# --------------------------------------------------------------------------------------
# The subcommands: each is added (and its module imported) only when it is chosen.
# --------------------------------------------------------------------------------------

def _train(args) -> int:
    prefer_passive_openmp()  # on a busy machine; before torch is imported, the training processes inherit it
    from .config import config_from_args
    from .spawn import launch
    return launch(config_from_args(args), args.nproc_per_node, 1, 0)


def _env(args) -> int:
    from .whoami import resolve_environment
    from . import gpu
    print(gpu.report())  # torch, its CUDA, the driver, each GPU, and whether they fit (both languages)
    print(json.dumps(resolve_environment().as_dict(), indent=2))
    return 0


def _add_train(sub) -> None:
    from .config import add_launch_arguments, add_train_arguments
    parser = sub.add_parser("train", help=t("cli.train"), description=t("cli.train"))
    add_launch_arguments(parser, nodes=False)
    add_train_arguments(parser)
    parser.set_defaults(func=_train)


def _add_env(sub) -> None:
    sub.add_parser("env", help=t("cli.env"), description=t("cli.env")).set_defaults(func=_env)


def _add_data(sub) -> None:
    from .staging import add_cli
    add_cli(sub)


def _check_script(args) -> int:
    import shlex
    from pathlib import Path
    from .script_check import describe, exit_code, read_script
    from .script_trial import run
    report = read_script(args.file)
    if args.run:
        try:
            script_args = shlex.split(args.script_args)
        except ValueError as error:
            raise TutorialError("script.bad_args", value=args.script_args, why=error) from None
        report.trial = run(Path(args.file), script_args, args.run_seconds)
    print(describe(report))
    return exit_code(report)


def _run_seconds(text: str) -> float:
    """``--run-seconds``: a finite number of seconds greater than 0."""
    import math
    from .i18n import decimal_number
    value = decimal_number(text)  # "0,5": a message that says to write a dot
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(t("script.bad_seconds", value=text))
    return value


def _add_check_script(sub) -> None:
    from .script_trial import RUN_SECONDS
    parser = sub.add_parser("check-script", help=t("cli.check_script"), description=t("cli.check_script"),
                            epilog=t("cli.check_script_exits"))
    parser.add_argument("file", metavar=metavar("FILE"), help=t("cli.check_script_file"))
    parser.add_argument("--run", action="store_true", help=t("cli.check_script_run"))
    parser.add_argument("--script-args", default="", metavar=metavar("ARGS"), help=t("cli.check_script_args"))
    parser.add_argument("--run-seconds", type=_run_seconds, default=RUN_SECONDS, metavar="S",
                        help=t("cli.check_script_seconds", default=RUN_SECONDS))
    parser.set_defaults(func=_check_script)


def _add_slurm(sub) -> None:
    from .slurm.cli import add_cli  # the one late import of the SLURM side (no torch there either)
    add_cli(sub)


def _add_site_check(sub) -> None:
    from .site_check import add_cli
    add_cli(sub)


def _add_site(sub) -> None:
    from .sites.cli import add_cli
    add_cli(sub)


# name → (adds the full parser, the catalogue key of its one-line help)
COMMANDS: Dict[str, Tuple[Callable, str]] = {
    "train": (_add_train, "cli.train"),
    "env": (_add_env, "cli.env"),
    "data": (_add_data, "data.cli.data"),
    "slurm": (_add_slurm, "cli.slurm"),
    "check-script": (_add_check_script, "cli.check_script"),
    "site-check": (_add_site_check, "site.cli_help"),
    "site": (_add_site, "site_show.cli_help"),
}


def chosen_command(argv: Sequence[str]) -> Optional[str]:
    """The subcommand ``argv`` names (its first word not starting with ``-``), if any."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The ``ddp-tutorial`` parser; with ``only``, every other subcommand is a one-line stub, so
    choosing one imports nothing the others need. Call it inside :func:`argparse_in_user_language`
    for argparse's own words in the user's language."""
    parser = argparse.ArgumentParser(prog="ddp-tutorial", description=t("cli.description"))
    parser.add_argument("--version", action="version", version=f"ddp-tutorial {__version__}",
                        help=t("cli.version"))
    sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    for name, (add, help_key) in COMMANDS.items():
        if only is None or name == only:
            add(sub)
        else:
            sub.add_parser(name, help=t(help_key))
    return parser


def _stdout_to_devnull() -> None:
    """After stdout's reader has left: what is still buffered goes nowhere, without an error at exit."""
    import os
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = chosen_command(argv)
    if command in ("slurm", "check-script"):  # `--script-args "--epochs=1"`: the value glued to its option
        from .slurm.cli import glued
        argv = glued(argv)
    with argparse_in_user_language():
        parser = build_parser(only=command if command in COMMANDS else "")
        args = parser.parse_args(argv)
    collector.resume()  # the command's own imports and run with the cycle collector on (collector.py)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a reader that left (`… | head -1`) shows here, not in the interpreter's last flush
        return code
    except TutorialError as error:
        print(f"{t('error.prefix')}: {error}", file=sys.stderr, flush=True)
        return error.exit_code
    except OSError as error:  # a path the user gave that cannot be used: say which and why, no traceback
        if isinstance(error, BrokenPipeError) and error.filename is None:
            _stdout_to_devnull()  # stdout's reader left (`| head -1`): it has what it wanted; quiet, like --help
            return exits.OK
        path = error.filename2 or error.filename or "?"
        print(f"{t('error.prefix')}: {t('cli.os_error', path=path, why=error.strerror or error)}",
              file=sys.stderr, flush=True)
        return exits.USER_ERROR
    except KeyboardInterrupt:
        return exits.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
