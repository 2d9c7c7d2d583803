"""The day-before check at the site (issue 34 item 7): ``ddp-tutorial site-check``.

The instructor runs it on the login node the attendees' JupyterLab submits from, with the class
environment and the workshop's SLURM settings, the day before::

    DDP_TUTORIAL_ROOT=/shared/ddp-data ddp-tutorial site-check --partition GPU_PART --account ACCT --reservation NAME

One line per check, ``ok`` or ``!!`` and what to do; exit code 0 only when every line is ok:

* **python** — this interpreter is >= 3.11 (the class environment's, when it is the one running);
* **class environment** (with ``--venv DIR`` or ``DDP_TUTORIAL_VENV``) — another user can run ``DIR/bin/python``
  (:mod:`ddp_tutorial.venv_check`);
* **torch** — the build against this node's driver and GPUs (:func:`ddp_tutorial.gpu.check`); on a login
  node without GPUs, against every GPU partition of the site (``--site``/``DDP_TUTORIAL_SITE``);
* **slurm** — ``sbatch --test-only`` accepts a job with the partition, account and reservation (flags, else
  the class's variables), shaped as the least job the partition accepts when the site's table has it; a
  reservation that has not started is read with ``scontrol show reservation`` (start, end, nodes, users and
  accounts) and the probe runs without it; one that does not exist is named (:mod:`ddp_tutorial.site_probe`);
* **data** — both data sets staged and whole in the data root (``--root``, else ``DDP_TUTORIAL_ROOT``);
* **ports** — a one-task job on a compute node connects back to a TCP port opened here, on this node's
  address towards the SLURM controller (where notebook 05's ipyparallel controller listens);
* **interface** — on that node, the sbatch templates' interface rule
  (:data:`ddp_tutorial.slurm.render.IFNAME_RULE`) names an interface, never ``lo``/127.*;
* **where** — on a login node (the site table's names) or outside any SLURM job, one line more: run site-check
  again inside a session, where the day's jobs are submitted from and its ports are opened.

Inside a job SLURM granted GPUs, a torch that sees none is a ``!!`` (:mod:`ddp_tutorial.gpu_grant`).

``--no-slurm`` leaves out the SLURM lines and the where line (e.g. when run inside a GPU job to check the build
against the node's real GPUs). No torch import until the torch line.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .i18n import Count, TutorialError, decimal_number, t

DATASETS = ("mnist", "fashion-mnist")
PROBE_RUN_SECONDS = 40  # the probe task's own run, once started: its connection back waits up to 20 s


@dataclass
class Line:
    """One check's answer: ok or not, and its text (a ``site.*`` message key, written out where the line is
    made, and its fields)."""

    ok: bool
    key: str
    fields: Dict[str, object] = field(default_factory=dict)

    def text(self, lang: Optional[str] = None) -> str:
        """The line as printed: its mark (``ok``, Turkish *tamam*, or ``!!``) in a column, then the text."""
        mark = t("site.mark_ok", lang) if self.ok else "!!"
        return f"{mark:<4} " + t(self.key, lang, **self.fields)


# ---- Python and torch


def check_python() -> Line:
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info < (3, 11):  # unreachable in practice (the package reads TOML with tomllib)
        from . import gpu, sites
        known = gpu.SITES.get(sites.session().name)
        return Line(False, "site.python_old", dict(version=version, module=known.python_module if known else "-"))
    return Line(True, "site.python_ok", dict(version=version, path=sys.prefix))


def check_venv(folder: Path, timeout: float = 60) -> Line:
    """P1: the class environment as another user runs it (:func:`ddp_tutorial.venv_check.check`)."""
    from . import venv_check
    return Line(*venv_check.check(folder, timeout))


def torch_site(name: Optional[str], site) -> Optional[str]:
    """The site whose GPU partitions the torch line checks the build against: the name as given when its table
    names its GPUs (:func:`ddp_tutorial.gpu.site_gpus`), none for a table without them (or ``none``), else the
    name as given (an unknown one: the line says so)."""
    from . import gpu
    if site is not None:
        return name if gpu.site_gpus(site) is not None else None
    return None if not name or name.lower() == "none" else name


def check_torch(site: Optional[str]) -> Line:
    from . import gpu
    from .gpu_grant import unusable
    try:
        version, cuda, arch = gpu.torch_facts()
    except ImportError as error:
        return Line(False, "site.torch_missing", dict(why=str(error)))
    build = t("gpu.build_cuda", cuda=cuda) if cuda else t("gpu.build_cpu")
    gpus, driver, _ = gpu.node_facts()
    granted = unusable(len(gpus))
    if granted:  # P5: in a job granted GPUs, "no GPU" is no login node's answer
        found = gpu.compatibility([], driver, cuda, arch, granted)
        return Line(False, "site.torch_granted", dict(torch=version, build=build, verdict=found.message()))
    if gpus:
        import torch
        verdict = gpu.compatibility([g.capability for g in gpus if g.capability], driver, cuda, arch)
        return Line(verdict.ok, "site.torch_node", dict(torch=version, build=build, verdict=verdict.message(),
                                                   visible=torch.cuda.device_count(), gpus=len(gpus)))
    if not site:
        return Line(True, "site.torch_no_gpu", dict(torch=version, build=build))
    s = gpu.site_named(site)
    if s is None:
        return Line(False, "site.unknown_site", dict(site=site, sites=", ".join(gpu.known_sites())))
    fits = gpu.choose(site).variant
    mine = gpu.VARIANTS.get(gpu.variant_of(cuda) or "")
    ok = mine is not None and all(gpu.has_kernels(c, mine.arch_list) for c in s.partitions.values()) \
        and (gpu.driver_major(s.driver) or mine.min_driver) >= mine.min_driver  # a driver not stated: not judged
    return Line(ok, "site.torch_site" if ok else "site.torch_site_bad",
                dict(torch=version, build=build, site=site, fits=fits, partitions=", ".join(s.partitions)))


# ---- SLURM: the job is accepted, a node reaches back, the interface rule


def slurm_flags(settings: Dict[str, str]) -> List[str]:
    return [f"--{name}={value}" for name, value in settings.items() if value]


def _shown(settings: Dict[str, str]) -> Dict[str, str]:
    return {name: value or "-" for name, value in settings.items()}


def check_slurm(settings: Dict[str, str], timeout: float, env: Optional[Mapping[str, str]] = None,
                shape: Sequence[str] = ("--time=1", "--ntasks=1")) -> Tuple[Line, Optional[Dict[str, str]]]:
    """``sbatch --test-only`` (:func:`ddp_tutorial.slurm.jobs.test_only`) of a job of ``shape``
    (:func:`.site_probe.probe_shape`) with these settings: nothing is queued. Returns the line and the settings
    the reach probe runs with (None: it does not run). A reservation is read first (P2: :mod:`.site_probe`): one
    that does not exist is a ``!!`` naming it; one that starts later (the day-before check; SLURM refuses it
    until then) is an ok line saying when, where and for whom, unless it shuts this user or account out;
    in both cases the probe runs without it."""
    from . import site_probe
    from .slurm.jobs import NO_ANSWER, test_only
    shown = dict(_shown(settings), shape=" ".join(shape))
    with tempfile.TemporaryDirectory(prefix="site-check-") as folder:
        script = Path(folder) / "probe.sh"
        script.write_text("#!/bin/sh\ntrue\n")

        def ask(chosen: Dict[str, str]) -> Tuple[str, Optional[TutorialError]]:
            try:
                return test_only(script, [*shape, *slurm_flags(chosen)], env=env, timeout=timeout), None
            except TutorialError as error:  # refused (sbatch's last line), or no answer in time
                return str(error.fields.get("detail", error)).removeprefix("sbatch: "), error

        def silent(answer: str, error: Optional[TutorialError]) -> bool:
            return error is not None and (error.key == "slurm.command_timeout" or bool(NO_ANSWER.search(answer)))

        found = site_probe.read_reservation(settings["reservation"], env=env, timeout=timeout) \
            if settings["reservation"] else None
        start = site_probe.starts_at(found) if found else None
        if found == {} or start:
            without = dict(settings, reservation="")
            answer, error = ask(without)
            if silent(answer, error):
                return Line(False, "site.slurm_no_answer", dict(shown, answer=answer)), None
            chosen = without if error is None else None
            if found == {}:
                return Line(False, "site.reservation_missing", dict(shown, answer=answer)), chosen
            where = dict(shown, start=found["StartTime"].replace("T", " "), until=site_probe.starts_in(start),
                         end=found.get("EndTime", "?").replace("T", " "), nodes=found.get("Nodes", "?"),
                         users=found.get("Users", "(null)"), accounts=found.get("Accounts", "(null)"), answer=answer)
            shut_out = site_probe.closed_to(found, settings["account"])
            if shut_out:
                return Line(False, "site.reservation_closed", dict(where, who=shut_out)), chosen
            if error is not None:
                return Line(False, "site.slurm_bad", dict(_shown(without), shape=shown["shape"], answer=answer)), None
            return Line(True, "site.slurm_later", where), chosen
        answer, error = ask(settings)
    if error is None:
        return Line(True, "site.slurm_ok", dict(shown, answer=answer)), settings
    if silent(answer, error):
        return Line(False, "site.slurm_no_answer", dict(shown, answer=answer)), None
    return Line(False, "site.slurm_bad", dict(shown, answer=answer)), None


def node_script(address: str, port: int, token: str) -> str:
    """What the probe task runs on a compute node: its name, the interface rule with the node as rank 0
    (as the templates run it), and a TCP connection back to ``address:port`` carrying ``token``."""
    from .slurm.render import IFNAME_RULE
    return "\n".join([
        'MASTER_ADDR=$(hostname)',
        'echo "NODE $MASTER_ADDR"',
        'echo "ADDR $(getent ahostsv4 "$MASTER_ADDR" | awk \'NR == 1 {print $1}\')"',
        f'echo "IFNAME $({IFNAME_RULE})"',
        f"if timeout 20 bash -c 'exec 3<>/dev/tcp/{address}/{port} && echo {token} >&3'; then echo CONNECTED;"
        " else echo NOT_CONNECTED; fi",
    ])


class Listener:
    """A TCP port on this node's address that records whether ``token`` arrived (one accept thread)."""

    def __init__(self, address: str):
        self.token = secrets.token_hex(8)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((address, 0))
        self.sock.listen(4)
        self.sock.settimeout(1.0)
        self.port = self.sock.getsockname()[1]
        self.reached = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.done.is_set() and not self.reached.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5.0)
                try:
                    if self.token in conn.recv(64).decode(errors="replace"):
                        self.reached.set()
                except OSError:
                    pass

    def close(self) -> None:
        self.done.set()
        self.thread.join(timeout=5)
        self.sock.close()


def _facts(stdout: str) -> Dict[str, str]:
    facts = {}
    for line in stdout.splitlines():
        key, _, value = line.partition(" ")
        facts.setdefault(key, value.strip())
    return facts


def run_probe(command: Sequence[str], timeout: float) -> Tuple[str, str, bool]:
    """Run the probe ``srun``: (its stdout, its stderr, whether it ended by itself within ``timeout`` s).
    Stopped when it does not, and on SIGTERM or Ctrl-C (:func:`main`): :func:`stop_probe`. Inside a session
    (a job) without the session's own variables: a job of its own, not a step of the session (T5-11, T5-15)."""
    from .slurm.jobs import without_session
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                env=without_session(os.environ))
        try:
            proc.wait(timeout=timeout)
            ended = True
        except subprocess.TimeoutExpired:
            ended = False
        finally:
            if proc.poll() is None:
                stop_probe(proc, err)
        out.seek(0)
        err.seek(0)
        return out.read().decode(errors="replace"), err.read().decode(errors="replace"), ended


def stop_probe(proc: subprocess.Popen, err) -> None:
    """Stop the probe ``srun`` and leave nothing in the queue: SIGTERM makes srun cancel the job it waits for
    (SIGKILL would leave it pending, to start later towards a closed port); should srun not end within
    10 s, SIGKILL and ``scancel`` of the job id it printed."""
    blocked = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, blocked)  # a second Ctrl-C does not cut the clean-up short
    try:
        proc.terminate()
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        err.seek(0)
        queued = re.search(r"\bjob (\d+) queued", err.read().decode(errors="replace"))
        if queued:
            subprocess.run(["scancel", queued.group(1)], capture_output=True, timeout=30, check=False)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)


def check_reach(settings: Dict[str, str], timeout: float,
                shape: Sequence[str] = ("--time=2", "--ntasks=1")) -> List[Line]:
    """The ports line and the interface line, from one ``srun`` task of ``shape``
    (:func:`.site_probe.probe_shape`) on a compute node. ``--immediate``: srun itself gives up (and cancels its
    job) when no node is free within ``timeout`` s."""
    from .ipp.slurm import controller_address
    address = controller_address()
    if not address:
        return [Line(False, "site.ports_no_address"), Line(False, "site.iface_unknown", dict(detail="-"))]
    listener = Listener(address)
    try:
        command = ["srun", "--nodes=1", *shape, "--job-name=site-check",
                   f"--immediate={max(1, math.ceil(timeout))}", *slurm_flags(settings),
                   "bash", "-c", node_script(address, listener.port, listener.token)]
        stdout, stderr, ended = run_probe(command, timeout + PROBE_RUN_SECONDS)
        detail = (stderr.strip().splitlines() or ["-"])[-1]
        if not ended or ("NODE" not in stdout and re.search(r"\bjob \d+ queued", stderr)):
            detail = t("site.no_start", seconds=f"{timeout:.0f}")
        listener.reached.wait(2.0 if "CONNECTED" in stdout else 0)
    finally:
        listener.close()
    facts = _facts(stdout)
    node = facts.get("NODE") or "?"
    where = dict(address=address, port=listener.port, node=node, detail=detail, seconds=f"{timeout:.0f}")
    if listener.reached.is_set():
        ports = Line(True, "site.ports_ok", where)
    else:
        ports = Line(False, "site.ports_bad" if "NODE" in facts else "site.ports_no_job", where)
    if "NODE" not in facts:
        return [ports, Line(False, "site.iface_unknown", dict(detail=detail))]
    ifname, addr = facts.get("IFNAME", ""), facts.get("ADDR", "")
    if ifname and ifname != "lo" and not addr.startswith("127."):
        return [ports, Line(True, "site.iface_ok", dict(node=node, ifname=ifname, address=addr))]
    return [ports, Line(False, "site.iface_bad", dict(node=node, address=addr or "?"))]


# ---- Where it runs


def check_where(site) -> Optional[Line]:
    """T5-11: on a login node (the site table's names) or outside any SLURM job, one line saying so and
    that the check belongs inside a session too (where 05's jobs are submitted from, between compute nodes);
    None inside a job on a compute node."""
    host = socket.gethostname()
    login = site is not None and site.is_login_host(host)
    if os.environ.get("SLURM_JOB_ID") and not login:
        return None
    what = t("site.where_login_node", site=site.title) if login else t("site.where_no_job")
    return Line(True, "site.where_login", dict(node=host, what=what))


# ---- Data


def check_data(root: Path) -> List[Line]:
    from .staging import check
    lines = []
    for dataset in DATASETS:
        try:
            n_train, n_test = check(dataset, root)
        except TutorialError as error:  # one line: what is wrong, and the first command that fixes it
            text = str(error).splitlines()
            fix = next((x.strip() for x in text[1:] if "ddp-tutorial data" in x), "")
            why = text[0] + (f" → {fix}" if fix else "")
            lines.append(Line(False, "site.data_bad", dict(dataset=dataset, why=why)))
        else:
            sizes = dict(train=Count(n_train), test=Count(n_test))
            lines.append(Line(True, "site.data_ok", dict(dataset=dataset, root=root, **sizes)))
    return lines


# ---- The command


def run_checks(args: argparse.Namespace) -> List[Line]:
    """Every check in order, each line printed as soon as it is known."""
    from .datasets import default_root
    lines: List[Line] = []

    def say(found: Sequence[Line]) -> None:
        for line in found:
            print(line.text(), flush=True)
            lines.append(line)

    from .site_probe import PROBE_MINUTES, probe_shape, site_table, slurm_settings
    name = args.site or os.environ.get("DDP_TUTORIAL_SITE") or None
    site = site_table(name)
    say([check_python()])
    venv = args.venv or os.environ.get("DDP_TUTORIAL_VENV")
    if venv:
        say([check_venv(Path(venv).expanduser().absolute(), args.timeout)])
    say([check_torch(torch_site(name, site))])
    say(check_data((Path(args.root) if args.root else default_root()).expanduser().absolute()))
    if not args.no_slurm:
        if shutil.which("sbatch") is None or shutil.which("srun") is None:
            say([Line(False, "site.slurm_missing")])
        else:
            settings = slurm_settings(dict(partition=args.partition, account=args.account,
                                           reservation=args.reservation))
            rules = site_table(name, settings["partition"] or None)  # the partition's site, named or shipped
            partition = rules.partitions.get(settings["partition"]) if rules else None
            accepted, chosen = check_slurm(settings, args.timeout,
                                           shape=probe_shape(partition, PROBE_MINUTES["test"]))
            say([accepted])
            if chosen is not None:
                say(check_reach(chosen, args.timeout, shape=probe_shape(partition, PROBE_MINUTES["reach"])))
            else:
                say([Line(False, "site.reach_no_answer" if accepted.key == "site.slurm_no_answer"
                          else "site.reach_skipped")])
            where = check_where(site)
            say([where] if where else [])
    return lines


def seconds(text: str) -> float:
    """``--timeout``: a finite number of seconds greater than 0 (nan, inf, 1e400, 0 and -1 are refused)."""
    value = decimal_number(text)  # "0,5": write the decimal point as a dot
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(t("site.bad_timeout", value=text))
    return value


def _leave(signum, frame) -> None:
    raise SystemExit(128 + signum)  # the probe's `finally` stops its srun


def main(args: argparse.Namespace) -> int:
    previous = signal.signal(signal.SIGTERM, _leave)
    try:
        lines = run_checks(args)
    except (SystemExit, KeyboardInterrupt) as stop:
        name = "SIGINT" if isinstance(stop, KeyboardInterrupt) else "SIGTERM"
        print(t("site.stopped", signal=name), file=sys.stderr, flush=True)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    bad = sum(not line.ok for line in lines)
    print(t("site.summary_ok", count=len(lines)) if not bad else t("site.summary_bad", bad=bad, count=len(lines)))
    return 0 if not bad else 1


def add_cli(subparsers) -> argparse.ArgumentParser:
    """``ddp-tutorial site-check`` (cli.py calls this)."""
    parser = subparsers.add_parser("site-check", help=t("site.cli_help"), description=t("site.cli_description"))
    parser.add_argument("--partition", help=t("site.cli_partition"))
    parser.add_argument("--account", help=t("site.cli_account"))
    parser.add_argument("--reservation", help=t("site.cli_reservation"))
    parser.add_argument("--root", help=t("site.cli_root"))
    parser.add_argument("--site", help=t("site.cli_site"))
    parser.add_argument("--venv", help=t("site.cli_venv"))
    parser.add_argument("--timeout", type=seconds, default=120.0, help=t("site.cli_timeout"))
    parser.add_argument("--no-slurm", action="store_true", help=t("site.cli_no_slurm"))
    parser.set_defaults(func=main)
    return parser

