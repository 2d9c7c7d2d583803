"""``ddp-tutorial slurm render|submit|status|wait|cancel|logs|result`` — the command line.

:func:`add_cli` adds the ``slurm`` subcommand to the ``ddp-tutorial`` parser (``ddp_tutorial.cli``
imports it only for ``ddp-tutorial slurm …``; nothing here imports torch).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import fields, replace
from typing import List, Optional, Sequence


from .. import atomic
from ..config import add_job_arguments, job_options_of
from ..i18n import TutorialError, decimal_number, metavar, t, whole_number
from .jobs import (JobInfo, cancel, job_info, log_dirs, own_script_outcome, read_log, read_result,
                   reservation_note, submit, test_only, wait)
from .rules import PATH
from .render import render
from .spec import PROFILE_VARIABLE, PROFILES, JobSpec, bad_value, plain_text, workshop_profile

MIN_POLL_SECONDS = 1.0  # every poll is an RPC to slurmctld: `--poll 0` made 200–300 of them a second


def _waiting(args) -> dict:
    """``--poll`` and ``--timeout`` of ``wait`` / ``submit --wait``, checked (never a traceback, never a
    busy loop against the controller)."""
    if not math.isfinite(args.poll) or args.poll < MIN_POLL_SECONDS:
        raise TutorialError("slurm_limits.bad_poll", value=f"{args.poll:g}", minimum=f"{MIN_POLL_SECONDS:g}")
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        raise TutorialError("slurm_limits.bad_timeout", value=f"{args.timeout:g}")  # as typed, not "0,0"
    return dict(timeout=args.timeout, poll=args.poll)


def _spec_from_args(args: argparse.Namespace) -> JobSpec:
    env = []
    for item in args.env or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise bad_value("--env", item, "slurm.rule.env_name")
        env.append((key, value))
    train_args = list(args.train_args or [])
    if train_args and train_args[0] == "--":
        train_args = train_args[1:]
    run_dir = args.run_dir
    workdir = args.workdir
    if args.workdir is not None:  # the job starts there (#SBATCH --chdir): its log folder is there too
        absolute = _absolute(args.workdir)
        if absolute is not None:  # absolute, so that sbatch run from another folder starts it there too
            workdir = from_here("--workdir", args.workdir, absolute)
        if absolute is not None and (run_dir is None or not os.path.isabs(run_dir)):
            run_dir = os.path.join(workdir, run_dir if run_dir is not None else JobSpec().run_dir)
    elif run_dir is not None and not os.path.isabs(run_dir):
        run_dir = from_here("--run-dir", run_dir, os.path.abspath(run_dir))  # the job may start elsewhere
    script = args.script
    if script is not None:
        plain_text("--script", script)
        script = own_script_path(script, args.workdir)
    given = {f.name: getattr(args, f.name, None) for f in fields(JobSpec) if f.metadata.get("flag")}
    given.update(workdir=workdir, run_dir=run_dir, modules=tuple(args.modules or ()), env=tuple(env),
                 script=script, requeue=True if args.requeue else None, train_args=tuple(train_args),
                 **job_options_of(args))
    spec = JobSpec.from_profile(args.profile or workshop_profile(), **given)
    if script is not None and spec.template in ("per-gpu", "torchrun"):  # the seed's: refused by validate()
        spec = check_convention(spec, getattr(args, "script_convention", "auto") or "auto")
    return spec


def from_here(option: str, given: str, path: str) -> str:
    """``path``, made absolute from a relative ``given``: where only this folder's path has what a job script
    cannot take (a space, ``ş``), say so and what to do, not only that the absolute path is invalid."""
    if not PATH.fullmatch(path) and PATH.fullmatch(given):
        raise TutorialError("slurm.run_dir_unsafe", option=option, given=given, path=path,
                            allowed=t("slurm.allowed.path"))
    return path


def _absolute(path: str) -> Optional[str]:
    """``path`` (``~`` expanded) made absolute from here; None for a value no file system takes (a NUL …):
    :func:`~.spec.validate` then refuses it with its rule."""
    try:
        return os.path.abspath(os.path.expanduser(path))
    except (TypeError, ValueError, KeyError, OSError):
        return None


def own_script_path(script: str, workdir: Optional[str]) -> str:
    """``--script`` made absolute, so that it means the same at render time and in the job (which starts
    in ``--workdir``): a relative path is taken from here, else from the workdir."""
    here = _absolute(script)
    if here is not None and os.path.isfile(here):
        return here
    folder = _absolute(workdir) if workdir is not None else None
    if folder is not None and not os.path.isabs(script):
        there = os.path.join(folder, script)
        if os.path.isfile(there):
            return there
        raise TutorialError("slurm.no_user_script_workdir", path=script, workdir=workdir)
    raise TutorialError("slurm.no_user_script", path=script)


def check_convention(spec: JobSpec, convention: str = "auto") -> JobSpec:
    """Does the template fit how the script learns its rank (read from its source,
    :mod:`ddp_tutorial.script_check`)? A launch that would hang is refused now, naming the one that fits;
    a script that reads no launcher variable gets a warning. Returns ``spec``; for a script that reads
    ``SLURM_GPUS_ON_NODE`` with ``[]`` on CPU nodes (per-gpu), with ``DDP_TUTORIAL_GPUS_ON_NODE`` added to its
    ``--env``, which each task exports as ``SLURM_GPUS_ON_NODE`` (slurmstepd unsets that one in a task without
    GPUs, the job's own export too): ``--env SLURM_GPUS_ON_NODE=N`` when given, else the processes per node,
    said in one line."""
    from ..script_check import read_script, reads_gpus_on_node, template_problem, template_warning
    report = read_script(spec.script)
    if convention != "auto":  # the user knows better than the reading: take their word for it
        report.spawns = convention == "per-node"
        report.slurm_names = ["SLURM_PROCID"] if convention == "slurm" else []
        report.torchrun_names = ["RANK"] if convention == "torchrun" else []
    problem = template_problem(report, spec.template, spec.processes_per_node)
    if problem:
        raise TutorialError("slurm.script_convention", text=problem)
    if spec.per_node and report.convention != "per-node":  # one task with all the node's GPUs, used by one process
        raise TutorialError("slurm.per_node_form_needs_spawn", path=spec.script, gpus=spec.gpus_per_node)
    counted = next((f for f in report.findings if f.kind == "device_count_count"), None)
    if counted is not None and spec.gpus_per_node == 0:  # mp.spawn(nprocs=0): exit 0, nothing trained
        raise TutorialError("slurm.device_count_on_cpu", path=spec.script, line=counted.line, code=counted.code)
    warning = template_warning(report)
    if warning:
        print(f"{t('slurm.script_warning')}: {warning}", file=sys.stderr)
    if spec.template == "per-gpu" and spec.gpus_per_node == 0 and reads_gpus_on_node(report):
        given = dict(spec.env).get("SLURM_GPUS_ON_NODE")
        if given is None:
            print(t("script.gpus_on_node_job", path=spec.script, n=spec.processes_per_node), file=sys.stderr)
        value = str(spec.processes_per_node) if given is None else given
        spec = replace(spec, env=(*spec.env, ("DDP_TUTORIAL_GPUS_ON_NODE", value)))
    return spec


def glued(argv: Sequence[str], options: Sequence[str] = ("--script-args",)) -> List[str]:
    """``--script-args VALUE`` → ``--script-args=VALUE``: argparse takes a separate value that starts with
    a dash (``"--epochs=1"``, ``"--dry-run"``) for an option of its own and stops with "expected one
    argument"; glued to its option, any value is the option's. Nothing after ``--`` is touched."""
    out: List[str] = []
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            out += words[i:]
            break
        if word in options and i + 1 < len(words):
            out.append(f"{word}={words[i + 1]}")
            i += 2
            continue
        out.append(word)
        i += 1
    return out


def make_log_dirs(text: str) -> None:
    """The folders of the job's ``#SBATCH --output`` (SLURM does not create them; a job whose log folder is
    missing dies at launch without a log), for a plain ``sbatch`` too. Where they cannot be made here (a
    path of the cluster, rendered elsewhere), ``slurm submit`` makes them."""
    for folder in log_dirs(text):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass


def _cmd_render(args) -> int:
    if args.output is not None and not args.output.strip():  # -o "": not a file name (S17)
        raise TutorialError("slurm.empty_output")
    text = render(_spec_from_args(args))
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:  # atomic's rule: a regular file is replaced atomically, /dev/stdout or a pipe written through
        atomic.check_writable(args.output)  # creates missing folders; a directory or a disk is refused
        try:
            written = atomic.write_text(args.output, text, mode=0o777)
        except OSError as error:  # a full disk: write() and fsync() name no file; the message names it
            if error.filename is not None:
                raise
            raise OSError(error.errno, error.strerror or str(error), args.output) from None
        print(t("slurm.written", path=written), file=sys.stderr)
    make_log_dirs(text)  # with or without --workdir (then the run dir is under it, absolute)
    return 0


def _cmd_submit(args) -> int:
    if args.test_only:
        print(test_only(args.script, sbatch_args=args.sbatch_arg or ()))
        return 0
    waiting = _waiting(args) if args.wait else {}  # checked before anything is submitted
    job_id = submit(args.script, sbatch_args=args.sbatch_arg or ())
    print(job_id if args.parsable else t("slurm.submitted", job_id=job_id))
    if args.wait:
        return _finish(wait(job_id, on_change=_print_info, **waiting))
    return 0


def _print_info(info: JobInfo) -> None:
    print(info.describe() + reservation_note(info), flush=True)


def _finish(info: JobInfo) -> int:
    return 0 if info.succeeded else 1


def _cmd_status(args) -> int:
    info = job_info(args.job_id)
    if args.json:
        print(json.dumps({k: v for k, v in info.__dict__.items() if k != "fields"}, indent=2))
    else:
        print(info.describe() + reservation_note(info))
    return 0 if info.state != "UNKNOWN" else 1


def _cmd_wait(args) -> int:
    return _finish(wait(args.job_id, on_change=_print_info, **_waiting(args)))


def _cmd_cancel(args) -> int:
    cancel(args.job_id, signal=args.signal, batch=args.batch)
    return 0


def _cmd_logs(args) -> int:
    if args.tail is not None and args.tail < 1:  # `--tail -2` printed all but the first 2 lines
        raise TutorialError("slurm_limits.bad_tail", value=args.tail)
    sys.stdout.write(read_log(args.job_id, run_dir=args.run_dir, tail=args.tail))
    return 0


def _cmd_result(args) -> int:
    try:
        result = read_result(args.job_id, run_dir=args.run_dir)
    except TutorialError as error:
        outcome = own_script_outcome(args.job_id, run_dir=args.run_dir)
        if outcome is None:
            raise error from None
        print(json.dumps(outcome, indent=2, sort_keys=True))
        if outcome["exit_code"] is None:
            print(t("slurm.own_script_unknown", job_id=outcome["job_id"], state=outcome["state"]), file=sys.stderr)
            return 1
        print(t("slurm.own_script_finished", job_id=outcome["job_id"], code=outcome["exit_code"],
                source=outcome["source"]), file=sys.stderr)
        if "failed_rank" in outcome:
            print(t("slurm.own_script_rank_failed", rank=outcome["failed_rank"], code=outcome["exit_code"],
                    srun_code=outcome["srun_exit_code"]), file=sys.stderr)
        return 0 if outcome["exit_code"] == 0 else 1
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


def _profile_choices() -> Optional[List[str]]:
    """The session's site profiles for ``--profile``; None when ``$DDP_TUTORIAL_SITE`` names no table (the
    command then says so in one line, when it reads the profiles)."""
    try:
        return list(PROFILES)
    except TutorialError:
        return None


def add_render_arguments(p: argparse.ArgumentParser) -> None:
    """``slurm render``'s options: one per field of :class:`JobSpec` with a ``flag`` in its table (the
    help's ``{default}`` from the table; every default here is ``None``: the profile's or the spec's
    applies), the training options from :class:`~ddp_tutorial.config.TrainConfig`'s table, and the profile."""
    p.add_argument("--profile", choices=_profile_choices(), default=None,
                   help=t("slurm.cli.profile", variable=PROFILE_VARIABLE))
    for f in fields(JobSpec):
        flag = f.metadata.get("flag")
        if flag:
            help_text = t(f.metadata["help"], default=f.default) if f.metadata.get("help") else None
            cli = dict(f.metadata["cli"])
            if "metavar" in cli:  # PATH, SECONDS, NAME=VALUE: YOL, SANİYE, AD=DEĞER in Turkish
                cli["metavar"] = metavar(cli["metavar"])
            p.add_argument(flag, dest=f.name, default=None, help=help_text, **cli)
    add_job_arguments(p)  # --dataset, --root, --epochs, … from config.py's table (job=True)
    p.add_argument("--script-convention", choices=["auto", "torchrun", "slurm", "per-node"], default="auto",
                   help=t("slurm.cli.script_convention"))
    p.add_argument("train_args", nargs="*", help=t("slurm.cli.train_args"))


def add_cli(subparsers) -> argparse.ArgumentParser:
    """Add ``slurm render|submit|status|wait|cancel|logs|result`` to the ``ddp-tutorial`` command."""
    slurm = subparsers.add_parser("slurm", help=t("slurm.cli.slurm"))
    sub = slurm.add_subparsers(dest="slurm_command", required=True,
                             metavar="{render,submit,status,wait,cancel,logs,result}")

    p = sub.add_parser("render", help=t("slurm.cli.render"))
    add_render_arguments(p)
    p.add_argument("-o", "--output", default=None, help=t("slurm.cli.output"))
    p.set_defaults(func=_cmd_render)

    p = sub.add_parser("submit", help=t("slurm.cli.submit"))
    p.add_argument("script")
    p.add_argument("--sbatch-arg", action="append",
                   help=t("slurm.cli.sbatch_arg"))
    p.add_argument("--parsable", action="store_true", help=t("slurm.cli.parsable"))
    p.add_argument("--test-only", action="store_true", help=t("slurm.cli.test_only"))
    p.add_argument("--wait", action="store_true", help=t("slurm.cli.then_wait"))
    p.add_argument("--timeout", type=decimal_number, default=None)
    p.add_argument("--poll", type=decimal_number, default=2.0)
    p.set_defaults(func=_cmd_submit)

    p = sub.add_parser("status", help=t("slurm.cli.status"))
    p.add_argument("job_id")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser("wait", help=t("slurm.cli.wait"))
    p.add_argument("job_id")
    p.add_argument("--timeout", type=decimal_number, default=None, help=t("slurm.cli.timeout"))
    p.add_argument("--poll", type=decimal_number, default=2.0, help=t("slurm.cli.poll"))
    p.set_defaults(func=_cmd_wait)

    p = sub.add_parser("cancel", help=t("slurm.cli.cancel"))
    p.add_argument("job_id")
    p.add_argument("--signal", default=None, help=t("slurm.cli.signal"))
    p.add_argument("--batch", action="store_true", help=t("slurm.cli.batch"))
    p.set_defaults(func=_cmd_cancel)

    p = sub.add_parser("logs", help=t("slurm.cli.logs"))
    p.add_argument("job_id")
    p.add_argument("--run-dir", default=None, help=t("slurm.cli.logs_run_dir"))
    p.add_argument("--tail", type=whole_number, default=None, help=t("slurm.cli.tail"))
    p.set_defaults(func=_cmd_logs)

    p = sub.add_parser("result", help=t("slurm.cli.result"))
    p.add_argument("job_id")
    p.add_argument("--run-dir", default=None)
    p.set_defaults(func=_cmd_result)
    return slurm
