"""Submitting and watching jobs: ``sbatch``, ``scontrol``/``sacct``, ``scancel``, the log and the result.

Submitting uses ``sbatch --parsable``; the state comes from ``scontrol show job``
(``sacct`` when the job is no longer known to the controller); :func:`wait` polls
(``sbatch --wait`` backs off to 32 s between checks).

    spec = JobSpec.from_profile(workshop_profile(), nodes=2, account="myaccount")
    script = write_script(render(spec), "job.sh")
    job = submit(script)
    info = wait(job)
    print(info.state, read_result(job))

No torch import.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..i18n import LANGUAGES, TutorialError, t
from .spec import SIGNAL, bad_value, job_id_of


#: The commands that make a job or a step from the environment they are given.
SUBMITTING = ("sbatch", "srun", "salloc")
#: What a job (the JupyterLab session) holds in its environment about itself and its step, and must not hand
#: to a job it submits (T5-15): sbatch exports the environment, and the child's srun steps would read the
#: session's SRUN_CPUS_PER_TASK, SLURM_CPU_BIND, SLURM_MEM_PER_* … as their own options.
SESSION_PREFIXES = ("SLURM_", "SLURMD_", "SRUN_", "SALLOC_", "PMI_", "PMIX_")
#: SLURM_* variables that say which cluster to talk to, not what a job is: kept.
KEPT = ("SLURM_CONF", "SLURM_CLUSTERS", "SLURM_TIME_FORMAT")


def without_session(environ: Mapping[str, str]) -> Dict[str, str]:
    """``environ`` less its job's own variables (:data:`SESSION_PREFIXES`, except :data:`KEPT`) when it is
    the environment of a job (``SLURM_JOB_ID`` set); otherwise unchanged. sbatch's own ``SBATCH_*``
    variables stay: they are the user's (or the site's) choice, and the preview says where they win."""
    if not environ.get("SLURM_JOB_ID"):
        return dict(environ)
    return {k: v for k, v in environ.items() if k in KEPT or not k.startswith(SESSION_PREFIXES)}


def run_command(args: Sequence[str], env: Optional[Mapping[str, str]] = None, timeout: float = 60,
                check: bool = True) -> subprocess.CompletedProcess:
    """Run a SLURM client command; a missing command or a failure becomes a clear error. ``sbatch``,
    ``srun`` and ``salloc`` run without the session job's own variables (:func:`without_session`)."""
    environ = dict(os.environ if env is None else env)
    if os.path.basename(args[0]) in SUBMITTING:
        environ = without_session(environ)
    if shutil.which(args[0], path=environ.get("PATH")) is None:
        raise TutorialError("slurm.missing", command=args[0])
    try:
        proc = subprocess.run(list(args), env=environ, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TutorialError("slurm.command_timeout", command=" ".join(args[:2]), seconds=timeout) from None
    if check and proc.returncode != 0:
        detail = (proc.stderr.strip() or proc.stdout.strip() or "-").splitlines()[-1]
        raise TutorialError("slurm.command_failed", command=" ".join(args[:2]), code=proc.returncode,
                            detail=detail)
    return proc


def log_dirs(text: str) -> List[Path]:
    """Directories named by #SBATCH --output/--error in a script's ``text``: SLURM does not create
    them, and a job whose log directory is missing fails at once, without any log."""
    dirs = []
    for line in text.splitlines():
        m = re.match(r"#SBATCH\s+(?:--output|--error|-o|-e)[=\s]\s*(\S+)", line)
        if m and "%" not in os.path.dirname(m.group(1)):
            dirs.append(Path(m.group(1)).parent)
    return dirs


def submit(script: os.PathLike | str, sbatch_args: Sequence[str] = (),
           env: Optional[Mapping[str, str]] = None) -> str:
    """``sbatch --parsable [sbatch_args] script`` → the job id."""
    script = Path(script)
    if not script.is_file():
        raise TutorialError("slurm.no_script", path=str(script))
    for directory in log_dirs(script.read_text(errors="replace")):
        directory.mkdir(parents=True, exist_ok=True)
    proc = run_command(["sbatch", "--parsable", *sbatch_args, str(script)], env=env)
    return job_id_of(proc.stdout.strip().split(";")[0])  # "id" or "id;cluster"


def test_only(script: os.PathLike | str, sbatch_args: Sequence[str] = (),
              env: Optional[Mapping[str, str]] = None, timeout: float = 60) -> str:
    """``sbatch --test-only``: would SLURM accept the script, and when would it start? Nothing is queued.
    Returns SLURM's answer, e.g. ``Job 7 to start at … using 12 processors on nodes n[1-2] …``."""
    script = Path(script)
    if not script.is_file():
        raise TutorialError("slurm.no_script", path=str(script))
    proc = run_command(["sbatch", "--test-only", *sbatch_args, str(script)], env=env, timeout=timeout)
    return (proc.stderr.strip() or proc.stdout.strip()).removeprefix("sbatch: ")


MAX_POLL_SECONDS = 30.0  # the longest wait between two polls of one job (see wait())
FORGOTTEN_AFTER_S = 30.0  # wait(): how long the controller may say "no such job" before the job counts as unknown
#: What a SLURM client prints when slurmctld does not answer (down, frozen, restarting, the network): no
#: verdict on the job. "Invalid job id specified" is the controller's own answer that it does not know the job.
NO_ANSWER = re.compile(r"Unable to contact slurm controller|Socket timed out|connect failure|Connection refused"
                       r"|Connection timed out|Connection reset|Zero Bytes were transmitted|Transport endpoint",
                       re.IGNORECASE)
#: The states a job does not leave. PREEMPTED is one: slurmctld shows a preempted job that it requeues as
#: COMPLETING, then PENDING (wait() follows it to its end), and PREEMPTED only for one that stays preempted
#: (``--no-requeue``, or ``PreemptMode=CANCEL``) — recorded on a preempting lab, tests/test_slurm_preemption.py.
#: (submitit, which reads sacct's records of each run, counts PREEMPTED as not done; job_info reads the controller.)
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
            "DEADLINE", "PREEMPTED", "SPECIAL_EXIT", "REVOKED"}


@dataclass
class JobInfo:
    """What SLURM says about a job."""

    job_id: str
    state: str                        # PENDING, RUNNING, COMPLETED, FAILED, … or UNKNOWN
    reason: str = ""
    exit_code: Optional[int] = None   # the batch script's exit code (ExitCode=N:signal)
    signal: Optional[int] = None
    restarts: int = 0                 # how often it was requeued
    nodes: str = ""
    stdout: Optional[str] = None
    stderr: Optional[str] = None
    workdir: Optional[str] = None
    fields: Dict[str, str] = field(default_factory=dict)
    no_answer: str = ""               # the client's error when the controller did not answer (state UNKNOWN)

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL

    @property
    def succeeded(self) -> bool:
        return self.state == "COMPLETED" and (self.exit_code or 0) == 0

    def describe(self) -> str:
        if self.no_answer:
            return t("slurm.state.no_answer", job_id=self.job_id, detail=self.no_answer)
        reason = t("slurm.state.reason", reason=self.reason) if self.reason and self.reason != "None" else ""
        code = t("slurm.state.exit", code=self.exit_code) if self.finished and self.exit_code is not None else ""
        restarts = t("slurm.state.restarts", n=self.restarts) if self.restarts else ""
        return t("slurm.state", job_id=self.job_id, state=self.state, reason=reason, exit=code, restarts=restarts)


_FIELD = re.compile(r"(?:^|\s)([A-Za-z][\w:/]*)=(.*?)(?=\s+[A-Za-z][\w:/]*=|\s*$)")


def parse_scontrol(text: str) -> Dict[str, str]:
    """``Key=Value Key=Value …`` (``scontrol show job -o``) → a dict."""
    return {m.group(1): m.group(2) for m in _FIELD.finditer(text.strip())}


def _exit_pair(text: str) -> Tuple[Optional[int], Optional[int]]:
    m = re.fullmatch(r"([0-9]+):([0-9]+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def job_info(job_id, env: Optional[Mapping[str, str]] = None, timeout: float = 60) -> JobInfo:
    """The job's state from ``scontrol show job`` (``sacct`` once the controller has forgotten it).

    A controller that does not answer (:data:`NO_ANSWER`, or no answer within ``timeout``) gives state
    ``UNKNOWN`` with :attr:`JobInfo.no_answer` set: the job may well be running."""
    job_id = job_id_of(job_id)
    try:
        proc = run_command(["scontrol", "show", "job", "-o", job_id], env=env, check=False, timeout=timeout)
    except TutorialError as error:
        if error.key != "slurm.command_timeout":
            raise
        proc, no_answer = None, str(error)
    else:
        lines = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        no_answer = lines[-1].strip() if proc.returncode != 0 and lines and NO_ANSWER.search(lines[-1]) else ""
    if proc is not None and proc.returncode == 0 and "JobId=" in proc.stdout:
        f = parse_scontrol(proc.stdout.splitlines()[0])
        code, sig = _exit_pair(f.get("ExitCode", ""))
        return JobInfo(job_id=job_id, state=f.get("JobState", "UNKNOWN"), reason=f.get("Reason", ""),
                       exit_code=code, signal=sig, restarts=int(f.get("Restarts", "0") or 0),
                       nodes=f.get("NodeList", ""), stdout=f.get("StdOut"), stderr=f.get("StdErr"),
                       workdir=f.get("WorkDir"), fields=f)
    # Not (or no longer) known to the controller, or no answer from it: ask the accounting database, if any.
    environ = dict(os.environ if env is None else env)
    if shutil.which("sacct", path=environ.get("PATH")):
        try:
            acct = run_command(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode,NodeList"],
                               env=env, check=False, timeout=timeout)
        except TutorialError as error:
            if error.key != "slurm.command_timeout":
                raise
            acct = None
        line = acct.stdout.strip().splitlines()[:1] if acct is not None else []
        if acct is not None and acct.returncode == 0 and line and "|" in line[0]:
            state, exit_text, nodes = (line[0].split("|") + ["", ""])[:3]
            code, sig = _exit_pair(exit_text)
            return JobInfo(job_id=job_id, state=state.split()[0], exit_code=code, signal=sig, nodes=nodes)
    return JobInfo(job_id=job_id, state="UNKNOWN", no_answer=no_answer)


def wait(job_id, timeout: Optional[float] = None, poll: float = 2.0, env: Optional[Mapping[str, str]] = None,
         on_change: Optional[Callable[[JobInfo], None]] = None, max_poll: float = MAX_POLL_SECONDS,
         forgotten_after: float = FORGOTTEN_AFTER_S) -> JobInfo:
    """Poll until the job has finished (COMPLETED, FAILED, …); return its final :class:`JobInfo`.

    A requeued job passes through PENDING again and is waited for to the end (a preempted one too: SLURM shows
    PREEMPTED only for a job it does not requeue, :data:`TERMINAL`). ``on_change`` is
    called whenever the state changes (the CLI prints it). Each poll is a request to slurmctld, so
    the interval backs off: ``poll`` seconds after a change, doubling while nothing changes, up to
    ``max_poll`` (30 workshop attendees waiting on one job each ask ≈1 request/s, not 15).

    A controller that does not answer (down, frozen, restarting) is reported once through ``on_change``
    and waited for, bounded only by ``timeout``; its state is reported again when it answers. Only the
    controller's own "no such job" for longer than ``forgotten_after`` s (at least ``10 * poll``) ends
    the wait with "SLURM does not know job N".
    """
    job_id = job_id_of(job_id)
    started = time.monotonic()
    last = None
    unknown_since = None
    interval = poll
    while True:
        left = None if timeout is None else timeout - (time.monotonic() - started)
        info = job_info(job_id, env=env, timeout=60 if left is None else max(poll, min(60.0, left)))
        key = (info.state, info.restarts, bool(info.no_answer))
        if key != last:
            last = key
            interval = poll  # something happened: look again soon
            if on_change:
                on_change(info)
        else:
            interval = min(max(poll, max_poll), interval * 2)
        if info.finished:
            return info
        if info.state == "UNKNOWN" and not info.no_answer:
            # Just after sbatch the controller knows the job; "unknown" for long means it never will.
            unknown_since = unknown_since or time.monotonic()
            if time.monotonic() - unknown_since > max(10 * poll, forgotten_after):
                raise TutorialError("slurm.unknown_job", job_id=job_id)
        else:
            unknown_since = None
        waited = time.monotonic() - started
        if timeout is not None and waited > timeout:
            raise TutorialError("slurm.wait_timeout", job_id=job_id, state=info.state, seconds=waited)
        time.sleep(interval if timeout is None else max(0.0, min(interval, timeout - waited + poll)))


def reservation(name: str, env: Optional[Mapping[str, str]] = None, timeout: float = 60) -> Dict[str, str]:
    """``scontrol show reservation -o NAME`` as a dict; empty when SLURM does not list it or does not answer."""
    try:
        proc = run_command(["scontrol", "show", "reservation", "-o", name], env=env, check=False, timeout=timeout)
    except TutorialError:
        return {}
    lines = proc.stdout.strip().splitlines()
    return parse_scontrol(lines[0]) if proc.returncode == 0 and lines and "ReservationName=" in lines[0] else {}


def reservation_start(name: str, env: Optional[Mapping[str, str]] = None, timeout: float = 60) -> Optional[str]:
    """The StartTime of reservation ``name`` (``2026-12-07T09:00:00``, the controller's local time) when it
    has not started yet; None when it runs already, or SLURM does not list it."""
    start = reservation(name, env=env, timeout=timeout).get("StartTime", "")
    try:
        later = datetime.strptime(start, "%Y-%m-%dT%H:%M:%S") > datetime.now()
    except ValueError:
        return None
    return start if later else None


def reservation_note(info: JobInfo, env: Optional[Mapping[str, str]] = None) -> str:
    """For a job pending with reason ``Reservation``: " · reservation R starts at T" (else "")."""
    name = info.fields.get("Reservation", "")
    if info.state != "PENDING" or info.reason != "Reservation" or not name or name == "(null)":
        return ""
    start = reservation_start(name, env=env, timeout=15)
    return t("slurm.reservation_starts", name=name, start=start.replace("T", " ")) if start else ""


def cancel(job_id, signal: Optional[str] = None, batch: bool = False,
           env: Optional[Mapping[str, str]] = None) -> None:
    """``scancel`` the job, or only send it a signal (``signal="USR1", batch=True``: to the script)."""
    args = ["scancel"]
    if signal:
        name = signal.upper().removeprefix("SIG")
        if not SIGNAL.fullmatch(name):
            raise bad_value("signal", signal, "slurm.rule.pattern", allowed=t("slurm.allowed.name"))
        args.append(f"--signal={name}")
    if batch:
        args.append("--batch")
    run_command(args + [job_id_of(job_id)], env=env)


def _where(job_id: str, info: Optional[JobInfo], run_dir: Optional[str]) -> Path:
    """The job's log file: what SLURM reports, else ``run_dir/slurm-ID.out`` as the templates write it."""
    if info is not None and info.stdout and info.stdout not in ("(null)", ""):
        return Path(info.stdout.replace("%j", job_id))
    return Path(run_dir or "runs") / f"slurm-{job_id}.out"


def log_path(job_id, run_dir: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> Path:
    job_id = job_id_of(job_id)
    info = None
    if run_dir is None:
        try:
            info = job_info(job_id, env=env)
        except TutorialError:
            info = None
    return _where(job_id, info, run_dir)


def read_log(job_id, run_dir: Optional[str] = None, tail: Optional[int] = None,
             env: Optional[Mapping[str, str]] = None) -> str:
    """The job's log (the last ``tail`` lines when given)."""
    path = log_path(job_id, run_dir, env=env)
    if not path.is_file():
        raise TutorialError("slurm.no_log", job_id=job_id_of(job_id), path=str(path))
    if tail:  # read from the end (J05): an NCCL_DEBUG=INFO log of several GB is never loaded whole
        with open(path, "rb") as log:
            end = start = log.seek(0, os.SEEK_END)
            data = b""
            while start > 0 and data.count(b"\n") <= tail:
                start = max(0, start - max(1 << 16, 2 * (end - start)))
                log.seek(start)
                data = log.read(end - start)
        return "\n".join(data.decode(errors="replace").splitlines()[-tail:]) + "\n"
    return path.read_text(errors="replace")


def result_path(job_id, run_dir: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> Path:
    """Where the templates make training write its JSON result: ``RUN_DIR/result-ID.json``."""
    job_id = job_id_of(job_id)
    return log_path(job_id, run_dir, env=env).parent / f"result-{job_id}.json"


def checkpoint_dir(job_id, run_dir: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> Path:
    job_id = job_id_of(job_id)
    return log_path(job_id, run_dir, env=env).parent / f"checkpoint-{job_id}"


def read_result(job_id, run_dir: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> dict:
    """The training's JSON result of the job (world size, losses, accuracy …)."""
    path = result_path(job_id, run_dir, env=env)
    if not path.is_file():
        raise TutorialError("slurm.no_result", job_id=job_id_of(job_id), path=str(path))
    try:
        return json.loads(path.read_text())
    except (ValueError, RecursionError) as error:  # RecursionError: 200 000 nested '[' (J04)
        raise TutorialError("slurm.bad_result", path=str(path), detail=str(error)) from None


@functools.lru_cache(maxsize=None)
def finished_lines() -> re.Pattern:
    """The line the per-gpu and torchrun templates end a user-script job's log with, in every language (a job
    writes it in the language it was rendered in): read from the message the template echoes
    (``slurm_script.echo_finished_own``, render.py's "finished"), its ``{code}`` the script's exit code."""
    lines = []
    for lang in LANGUAGES:
        before, after = t("slurm_script.echo_finished_own", lang, code="\0").split("\0")
        lines.append(re.escape(before) + r"(\d+)" + re.escape(after))
    return re.compile(r"^(?:" + "|".join(lines) + r")\s*$", re.M)


@functools.lru_cache(maxsize=None)
def rank_failed_lines() -> List[re.Pattern]:
    """The line a user-script job writes before its last one when a rank failed and srun stopped the others
    (``slurm_script.echo_rank_failed``, render.py's "rankcode"), one pattern per language: its ``rank``, its
    ``code`` (the rank's own exit code, also in the last line) and ``srun_code`` (srun's, 143 for the stopped)."""
    patterns = []
    for lang in LANGUAGES:
        pieces = re.split("\0(rank|code|srun_code)\0", t("slurm_script.echo_rank_failed", lang, rank="\0rank\0",
                                                            code="\0code\0", srun_code="\0srun_code\0"))
        text = "".join(re.escape(piece) if i % 2 == 0 else rf"(?P<{piece}>\d+)" for i, piece in enumerate(pieces))
        patterns.append(re.compile("^" + text + r"\s*$", re.M))
    return patterns


OWN_FINISHED_WINDOW = 1 << 16  # the end of a log read for that line: it is the last thing the job script writes


def _log_end(path: Path, size: int = OWN_FINISHED_WINDOW) -> str:
    """The last ``size`` bytes of the log at ``path`` ("" when there is none): a job log of several hundred MB
    (NCCL_DEBUG=INFO) is never loaded whole to find its last line."""
    if not path.is_file():  # a named pipe is never opened (it would block)
        return ""
    try:
        with open(path, "rb") as log:
            end = log.seek(0, os.SEEK_END)
            log.seek(max(0, end - size))
            return log.read(size).decode(errors="replace")
    except OSError:  # gone or unreadable since: no line to read
        return ""


def own_script_outcome(job_id, run_dir: Optional[str] = None,
                       env: Optional[Mapping[str, str]] = None) -> Optional[dict]:
    """What can be said of a job that ran the user's own script (``slurm render --script``), which writes no
    result file of the package: its exit code from the line the job ends its log with (:func:`finished_lines`),
    else from SLURM (``scontrol``/``sacct``) once it has finished. None when the job ran the package's
    training (or cannot be told apart): then there is simply no result yet."""
    job_id = job_id_of(job_id)
    try:
        info = job_info(job_id, env=env)
    except TutorialError:
        info = None
    path = _where(job_id, info if run_dir is None else None, run_dir)
    text = _log_end(path)
    state = info.state if info is not None else "UNKNOWN"
    found = list(finished_lines().finditer(text))
    if found:
        outcome = {"job_id": job_id, "own_script": True, "exit_code": int(found[-1].group(found[-1].lastindex)),
                   "source": "log", "log": str(path), "state": state}  # one group per language
        # the rank that failed first and srun's own code: the line just before the last finished line
        before = text[:found[-1].start()].rstrip("\n")
        for pattern in rank_failed_lines():
            failed = pattern.search(before, before.rfind("\n") + 1)
            if failed:
                outcome.update(failed_rank=int(failed["rank"]), srun_exit_code=int(failed["srun_code"]))
        return outcome
    command = (info.fields.get("Command") if info is not None else None) or ""
    try:
        own = bool(command) and re.search(r"^SCRIPT=", Path(command).read_text(errors="replace"), re.M) is not None
    except OSError:
        own = False
    if not own:
        return None
    code = info.exit_code if info.finished else None
    return {"job_id": job_id, "own_script": True, "exit_code": code, "source": "scontrol", "log": str(path),
            "state": state}
