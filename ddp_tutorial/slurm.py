"""Step 11 — SLURM: write an sbatch script from a template, submit it, watch it.

The templates in ``slurm/`` are ordinary sbatch scripts with three gaps that
:func:`render` fills:

* ``{{sbatch}}``   — the ``#SBATCH`` lines (nodes, tasks, GPUs, CPUs, time, logs …);
* ``{{settings}}`` — shell variables (interpreter, run directory, training options);
* ``{{setup}}``    — the environment set-up (``module load``, conda or venv activation).

Three layouts (see ``slurm/README.md``):

========== =========================================================================
``seed``     one task per node; ``python -m ddp_tutorial.spawn`` starts one process
             per GPU on its node (the seed tutorial's scheme)
``per-gpu``  one SLURM task per GPU; ``srun`` starts every training process itself
``torchrun`` one ``torchrun`` per node, meeting through a c10d rendezvous
========== =========================================================================

Every value is checked before it reaches the script. Values that end up on
``#SBATCH`` lines (names, times, paths) must match a strict pattern; values used
in shell commands are shell-quoted (:func:`shlex.quote`) and may not contain
control characters such as newlines. A value like ``x; rm -rf ~`` or
``$(touch canary)`` is therefore either refused with a clear message or written
as plain text — never executed.

Submitting uses ``sbatch --parsable``; the state comes from ``scontrol show job``
(``sacct`` when the job is no longer known to the controller); :func:`wait` polls
(``sbatch --wait`` backs off to 32 s between checks).

    spec = JobSpec.from_profile("palamut-cuda", nodes=2, account="myaccount")
    script = write_script(render(spec), "job.sh")
    job = submit(script)
    info = wait(job)
    print(info.state, read_result(job))
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .i18n import TutorialError, t


# --------------------------------------------------------------------------------------
# Templates and site profiles

def _template_dir() -> Path:
    """The templates: the repository's ``slurm/`` folder in a checkout (or editable install),
    ``ddp_tutorial/sbatch`` in an installed wheel (pyproject.toml maps one onto the other)."""
    here = Path(__file__).resolve().parent
    checkout = here.parent / "slurm"
    return checkout if (checkout / "seed.sbatch").is_file() else here / "sbatch"


TEMPLATE_DIR = _template_dir()
TEMPLATES = {
    "seed": "seed.sbatch",          # one task per node → ddp_tutorial.spawn → one process per GPU
    "per-gpu": "per-gpu.sbatch",    # one SLURM task per GPU → ddp_tutorial.train
    "torchrun": "torchrun.sbatch",  # one torchrun per node, c10d rendezvous → ddp_tutorial.train
}
#: ipyparallel engines on an allocation, one per GPU (ddp_tutorial.ipp.start_slurm); not a training job.
ENGINES_TEMPLATE = "ipengines.sbatch"

#: The exit code with which training says "checkpoint written, run me again" (preemption.EXIT_REQUEUE).
EXIT_REQUEUE = 75


@dataclass(frozen=True)
class Profile:
    """What a partition's nodes offer: GPUs per node and CPU cores that go with each GPU."""

    name: str
    partition: Optional[str]
    gpus_per_node: int
    cpus_per_gpu: int
    description: str


PROFILES: Dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("generic", None, 0, 1, "any cluster; CPU-only unless --gpus-per-node is given"),
        Profile("barbun-cuda", "barbun-cuda", 2, 20, "TRUBA barbun-cuda: 2× NVIDIA P100, 20 cores per GPU"),
        Profile("akya-cuda", "akya-cuda", 4, 10, "TRUBA akya-cuda: 4× NVIDIA V100, 10 cores per GPU"),
        Profile("palamut-cuda", "palamut-cuda", 8, 16, "TRUBA palamut-cuda: 8× NVIDIA A100, 16 cores per GPU"),
        Profile("kolyoz-cuda", "kolyoz-cuda", 4, 16, "TRUBA kolyoz-cuda: 4× NVIDIA H100/H200, 16 cores per GPU"),
    )
}


@dataclass
class JobSpec:
    """Everything :func:`render` needs. Build it directly or with :meth:`from_profile`."""

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
    # Training
    dataset: Optional[str] = None          # default: the package's (mnist)
    root: Optional[str] = None             # where the data set is staged
    epochs: Optional[int] = None
    batch_size: Optional[int] = None
    lr: Optional[float] = None
    seed: Optional[int] = None
    train_args: Tuple[str, ...] = ()       # anything else for the training, e.g. ("--scale-lr",)
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
        return self.cpus_per_process * (1 if self.template == "per-gpu" else self.processes_per_node)


# --------------------------------------------------------------------------------------
# Validation: every value is checked before it is written into a script

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_PATH = re.compile(r"^[A-Za-z0-9_./+,@-]{1,4096}$")
_MODULE = re.compile(r"^[A-Za-z0-9_./+-]{1,256}$")
_TIME = re.compile(r"^(\d{1,4}-\d{1,2}(:\d{1,2}){0,2}|\d{1,6}(:\d{1,2}){0,2})$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_JOB_ID = re.compile(r"^\d{1,12}$")


def _bad(name: str, value, rule: str, **fields) -> TutorialError:
    return TutorialError("slurm.bad_value", name=name, value=value, rule=t(rule, **fields))


def _int_in(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _bad(name, value, "slurm.rule.int_range", low=low, high=high)
    return value


def _matching(name: str, value, pattern: re.Pattern, allowed: str) -> str:
    if not isinstance(value, str) or not pattern.match(value):
        raise _bad(name, value, "slurm.rule.pattern", allowed=t(allowed))
    return value


def _plain_text(name: str, value) -> str:
    """Any text that will be shell-quoted: only control characters (newlines …) are refused."""
    if not isinstance(value, str) or _CONTROL.search(value) or value == "":
        raise _bad(name, value, "slurm.rule.control")
    return value


def job_id_of(value) -> str:
    """A job id as text, checked: digits only (array/het suffixes are not used here)."""
    text = str(value).strip()
    if not _JOB_ID.match(text):
        raise TutorialError("slurm.bad_job_id", value=value)
    return text


def validate(spec: JobSpec) -> JobSpec:
    """Check every field of ``spec``; raise a bilingual :class:`TutorialError` on the first bad one."""
    if spec.template not in TEMPLATES:
        raise TutorialError("slurm.unknown_template", name=spec.template, choices=", ".join(TEMPLATES))
    _int_in("nodes", spec.nodes, 1, 4096)
    _int_in("gpus_per_node", spec.gpus_per_node, 0, 64)
    if spec.nproc_per_node is not None:
        _int_in("nproc_per_node", spec.nproc_per_node, 1, 1024)
        if spec.gpus_per_node > 0 and spec.nproc_per_node != spec.gpus_per_node:
            raise TutorialError("slurm.gpu_cpu_conflict", gpus=spec.gpus_per_node, nproc=spec.nproc_per_node)
    _int_in("cpus_per_process", spec.cpus_per_process, 1, 1024)
    _matching("job_name", spec.job_name, _NAME, "slurm.allowed.name")
    for name in ("account", "partition", "qos"):
        if getattr(spec, name) is not None:
            _matching(name, getattr(spec, name), _NAME, "slurm.allowed.name")
    if not isinstance(spec.time, str) or not _TIME.match(spec.time):
        raise _bad("time", spec.time, "slurm.rule.time")
    # These two appear on #SBATCH lines, which sbatch reads without a shell: strict.
    _matching("run_dir", spec.run_dir, _PATH, "slurm.allowed.path")
    if spec.workdir is not None:
        _matching("workdir", spec.workdir, _PATH, "slurm.allowed.path")
    # These are shell-quoted in the script.
    _plain_text("python", spec.python)
    for module in spec.modules:
        _matching("module", module, _MODULE, "slurm.allowed.module")
    for name in ("conda", "conda_env", "venv", "root"):
        if getattr(spec, name) is not None:
            _plain_text(name, getattr(spec, name))
    if (spec.conda is None) != (spec.conda_env is None):
        raise TutorialError("slurm.conda_needs_env")
    for pair in spec.env:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise _bad("env", pair, "slurm.rule.env_name")
        key, value = pair
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise _bad("env", key, "slurm.rule.env_name")
        if not isinstance(value, str) or _CONTROL.search(value):
            raise _bad(key, value, "slurm.rule.control")
    if spec.dataset is not None:
        from .config import DATASETS
        if spec.dataset not in DATASETS:
            raise _bad("dataset", spec.dataset, "slurm.rule.choice", choices=", ".join(DATASETS))
    if spec.epochs is not None:
        _int_in("epochs", spec.epochs, 0, 100000)
    if spec.batch_size is not None:
        _int_in("batch_size", spec.batch_size, 1, 1 << 20)
    if spec.seed is not None:
        _int_in("seed", spec.seed, 0, 2**63 - 1)
    if spec.lr is not None and (isinstance(spec.lr, bool) or not isinstance(spec.lr, (int, float))
                                or not 0 < spec.lr < float("inf")):
        raise _bad("lr", spec.lr, "slurm.rule.number")
    for arg in spec.train_args:
        _plain_text("train_args", arg)
    if spec.signal_seconds is not None:
        _int_in("signal_seconds", spec.signal_seconds, 1, 65535)
    if not isinstance(spec.requeue, bool):
        raise _bad("requeue", spec.requeue, "slurm.rule.choice", choices="True, False")
    return spec


# --------------------------------------------------------------------------------------
# Rendering

q = shlex.quote  # 'it'"'"'s' — the shell reads the value back exactly, never runs it


def _sbatch_lines(spec: JobSpec) -> List[str]:
    run_dir = spec.run_dir.rstrip("/") or "/"
    lines = [
        ("--job-name", spec.job_name, "name shown by squeue"),
        ("--account", spec.account, "whose allocation pays for the job"),
        ("--partition", spec.partition, "which group of nodes"),
        ("--qos", spec.qos, "quality of service"),
        ("--nodes", spec.nodes, "number of nodes"),
        ("--ntasks-per-node", spec.tasks_per_node,
         "SLURM tasks per node: one per GPU" if spec.template == "per-gpu" else "one launcher per node"),
        ("--gres", f"gpu:{spec.gpus_per_node}" if spec.gpus_per_node else None, "GPUs per node"),
        ("--cpus-per-task", spec.cpus_per_task, "cores for each task"),
        ("--time", spec.time, "time limit (the job is stopped after it)"),
        ("--chdir", spec.workdir, "working directory of the job"),
        ("--output", f"{run_dir}/slurm-%j.out", "log file (%j = job id; stderr goes here too)"),
        ("--signal", f"B:USR1@{spec.signal_seconds}" if spec.signal_seconds else None,
         "SIGUSR1 to this script that many seconds before the time limit"),
        ("--requeue", True if spec.requeue else None, "the job may be put back in the queue"),
        ("--open-mode", "append" if spec.requeue else None, "a requeued run appends to the same log"),
    ]
    out = []
    for option, value, comment in lines:
        if value is None:
            continue
        text = option if value is True else f"{option}={value}"
        out.append(f"#SBATCH {text:<34} # {comment}")
    return out


def _training_args(spec: JobSpec) -> List[str]:
    args: List[str] = []
    for option, value in (("--dataset", spec.dataset), ("--root", spec.root), ("--epochs", spec.epochs),
                          ("--batch-size", spec.batch_size), ("--lr", spec.lr), ("--seed", spec.seed)):
        if value is not None:
            args += [option, str(value)]
    args += ["--device", "cuda" if spec.gpus_per_node else "cpu", "--threads", str(spec.cpus_per_process)]
    args += list(spec.train_args)
    return args


def _settings_lines(spec: JobSpec) -> List[str]:
    run_dir = spec.run_dir.rstrip("/") or "/"
    per_node = "one per GPU" if spec.gpus_per_node else "CPU processes"
    pairs = [
        (f"PYTHON={q(spec.python)}", "the interpreter"),
        (f"RUN_DIR={q(run_dir)}", "logs, results (JSON) and checkpoints"),
        (f"NPROC_PER_NODE={spec.processes_per_node}", f"training processes per node ({per_node})"),
        ("TRAIN_ARGS=(" + " ".join(q(a) for a in _training_args(spec)) + ")", "training options"),
        (f"REQUEUE={1 if spec.requeue else 0}", "1: requeue after a checkpoint-and-stop (exit 75)"),
        (f"export OMP_NUM_THREADS={spec.cpus_per_process}", "threads per training process"),
    ]
    width = max(len(code) for code, _ in pairs if len(code) <= 48)
    lines = [f"{code:<{width}}  # {comment}" if len(code) <= 48 else f"# {comment}\n{code}" for code, comment in pairs]
    for key, value in spec.env:
        lines.append(f"export {key}={q(value)}")
    return lines


def _setup_lines(spec: JobSpec) -> List[str]:
    lines: List[str] = []
    if spec.modules:
        lines.append("module purge")
        lines += [f"module load {q(m)}" for m in spec.modules]
    if spec.conda:
        lines.append(f"source {q(spec.conda.rstrip('/') + '/etc/profile.d/conda.sh')}")
        lines.append(f"conda activate {q(spec.conda_env)}")
    if spec.venv:
        lines.append(f"source {q(spec.venv.rstrip('/') + '/bin/activate')}")
    if not lines:
        lines.append("# (nothing to set up: the job uses the environment it was submitted from)")
    return lines


def template_text(name: str) -> str:
    if name not in TEMPLATES and name != "ipengines":
        raise TutorialError("slurm.unknown_template", name=name, choices=", ".join(TEMPLATES))
    path = TEMPLATE_DIR / TEMPLATES.get(name, ENGINES_TEMPLATE)
    if not path.is_file():
        raise TutorialError("slurm.template_missing", path=str(path))
    return path.read_text()


def render(spec: JobSpec) -> str:
    """The sbatch script for ``spec`` (validated first)."""
    validate(spec)
    text = template_text(spec.template)
    for gap, lines in (("{{sbatch}}", _sbatch_lines(spec)), ("{{settings}}", _settings_lines(spec)),
                       ("{{setup}}", _setup_lines(spec))):
        text = text.replace(gap, "\n".join(lines))
    return text


def render_engines(spec: JobSpec, engine_command: str = "{program_and_args}") -> str:
    """The sbatch script that starts one ipyparallel engine per SLURM task (``slurm/ipengines.sbatch``).

    ``spec`` gives the allocation (nodes, GPUs or CPU processes per node, cores, time, account,
    set-up); its training fields are not used. The result is a template for ipyparallel's
    ``SlurmEngineSetLauncher``, which fills it with :meth:`str.format`-like rules: every brace of
    ours is doubled, so only ``engine_command`` (by default ipyparallel's ``{program_and_args}``)
    is left for it to fill, and a value such as ``${HOME}`` in an exported variable reaches the
    script as written.
    """
    validate(replace(spec, template="per-gpu"))  # one task per GPU / CPU process, like per-gpu
    spec = replace(spec, template="per-gpu")
    settings = [f"export OMP_NUM_THREADS={spec.cpus_per_process}  # threads per engine (its training process)"]
    settings += [f"export {key}={q(value)}" for key, value in spec.env]
    text = template_text("ipengines")
    for gap, lines in (("{{sbatch}}", _sbatch_lines(spec)), ("{{settings}}", settings),
                       ("{{setup}}", _setup_lines(spec))):
        text = text.replace(gap, "\n".join(lines))
    marker = "\x00engines\x00"
    text = text.replace("{{engines}}", marker).replace("{", "{{").replace("}", "}}")
    return text.replace(marker, engine_command)


def write_script(text: str, path: os.PathLike | str) -> Path:
    """Write a rendered script (executable) and return its path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


# --------------------------------------------------------------------------------------
# Talking to SLURM


def _run(args: Sequence[str], env: Optional[Mapping[str, str]] = None, timeout: float = 60,
         check: bool = True) -> subprocess.CompletedProcess:
    """Run a SLURM client command; a missing command or a failure becomes a clear error."""
    environ = dict(os.environ if env is None else env)
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


def _log_dirs(script: Path) -> List[Path]:
    """Directories named by #SBATCH --output/--error: SLURM does not create them, and a job whose
    log directory is missing fails at once, without any log."""
    dirs = []
    for line in script.read_text(errors="replace").splitlines():
        m = re.match(r"^#SBATCH\s+(?:--output|--error|-o|-e)[=\s]\s*(\S+)", line)
        if m and "%" not in os.path.dirname(m.group(1)):
            dirs.append(Path(m.group(1)).parent)
    return dirs


def submit(script: os.PathLike | str, sbatch_args: Sequence[str] = (),
           env: Optional[Mapping[str, str]] = None) -> str:
    """``sbatch --parsable [sbatch_args] script`` → the job id."""
    script = Path(script)
    if not script.is_file():
        raise TutorialError("slurm.no_script", path=str(script))
    for directory in _log_dirs(script):
        directory.mkdir(parents=True, exist_ok=True)
    proc = _run(["sbatch", "--parsable", *sbatch_args, str(script)], env=env)
    return job_id_of(proc.stdout.strip().split(";")[0])  # "id" or "id;cluster"


def test_only(script: os.PathLike | str, sbatch_args: Sequence[str] = (),
              env: Optional[Mapping[str, str]] = None) -> str:
    """``sbatch --test-only``: would SLURM accept the script, and when would it start? Nothing is queued.
    Returns SLURM's answer, e.g. ``Job 7 to start at … using 12 processors on nodes n[1-2] …``."""
    script = Path(script)
    if not script.is_file():
        raise TutorialError("slurm.no_script", path=str(script))
    proc = _run(["sbatch", "--test-only", *sbatch_args, str(script)], env=env)
    return (proc.stderr.strip() or proc.stdout.strip()).removeprefix("sbatch: ")


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

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL

    @property
    def succeeded(self) -> bool:
        return self.state == "COMPLETED" and (self.exit_code or 0) == 0

    def describe(self) -> str:
        reason = t("slurm.state.reason", reason=self.reason) if self.reason and self.reason != "None" else ""
        code = t("slurm.state.exit", code=self.exit_code) if self.finished and self.exit_code is not None else ""
        restarts = t("slurm.state.restarts", n=self.restarts) if self.restarts else ""
        return t("slurm.state", job_id=self.job_id, state=self.state, reason=reason, exit=code, restarts=restarts)


_FIELD = re.compile(r"(?:^|\s)([A-Za-z][\w:/]*)=(.*?)(?=\s+[A-Za-z][\w:/]*=|\s*$)")


def parse_scontrol(text: str) -> Dict[str, str]:
    """``Key=Value Key=Value …`` (``scontrol show job -o``) → a dict."""
    return {m.group(1): m.group(2) for m in _FIELD.finditer(text.strip())}


def _exit_pair(text: str) -> Tuple[Optional[int], Optional[int]]:
    m = re.match(r"^(\d+):(\d+)$", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def job_info(job_id, env: Optional[Mapping[str, str]] = None) -> JobInfo:
    """The job's state from ``scontrol show job`` (``sacct`` once the controller has forgotten it)."""
    job_id = job_id_of(job_id)
    proc = _run(["scontrol", "show", "job", "-o", job_id], env=env, check=False)
    if proc.returncode == 0 and "JobId=" in proc.stdout:
        f = parse_scontrol(proc.stdout.splitlines()[0])
        code, sig = _exit_pair(f.get("ExitCode", ""))
        return JobInfo(job_id=job_id, state=f.get("JobState", "UNKNOWN"), reason=f.get("Reason", ""),
                       exit_code=code, signal=sig, restarts=int(f.get("Restarts", "0") or 0),
                       nodes=f.get("NodeList", ""), stdout=f.get("StdOut"), stderr=f.get("StdErr"),
                       workdir=f.get("WorkDir"), fields=f)
    # Not (or no longer) known to the controller: ask the accounting database, if there is one.
    environ = dict(os.environ if env is None else env)
    if shutil.which("sacct", path=environ.get("PATH")):
        acct = _run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode,NodeList"], env=env,
                    check=False)
        line = acct.stdout.strip().splitlines()[:1]
        if acct.returncode == 0 and line and "|" in line[0]:
            state, exit_text, nodes = (line[0].split("|") + ["", ""])[:3]
            code, sig = _exit_pair(exit_text)
            return JobInfo(job_id=job_id, state=state.split()[0], exit_code=code, signal=sig, nodes=nodes)
    return JobInfo(job_id=job_id, state="UNKNOWN")


def wait(job_id, timeout: Optional[float] = None, poll: float = 2.0, env: Optional[Mapping[str, str]] = None,
         on_change: Optional[Callable[[JobInfo], None]] = None) -> JobInfo:
    """Poll until the job has finished (COMPLETED, FAILED, …); return its final :class:`JobInfo`.

    A requeued job passes through PENDING again and is waited for to the end. ``on_change`` is
    called whenever the state changes (the CLI prints it).
    """
    job_id = job_id_of(job_id)
    started = time.monotonic()
    last = None
    unknown_since = None
    while True:
        info = job_info(job_id, env=env)
        key = (info.state, info.restarts)
        if key != last:
            last = key
            if on_change:
                on_change(info)
        if info.finished:
            return info
        if info.state == "UNKNOWN":
            # Just after sbatch the controller knows the job; "unknown" for long means it never will.
            unknown_since = unknown_since or time.monotonic()
            if time.monotonic() - unknown_since > max(10 * poll, 30):
                raise TutorialError("slurm.unknown_job", job_id=job_id)
        else:
            unknown_since = None
        if timeout is not None and time.monotonic() - started > timeout:
            raise TutorialError("slurm.wait_timeout", job_id=job_id, state=info.state,
                                seconds=time.monotonic() - started)
        time.sleep(poll)


def cancel(job_id, signal: Optional[str] = None, batch: bool = False,
           env: Optional[Mapping[str, str]] = None) -> None:
    """``scancel`` the job, or only send it a signal (``signal="USR1", batch=True``: to the script)."""
    args = ["scancel"]
    if signal:
        name = signal.upper().removeprefix("SIG")
        if not re.match(r"^[A-Z0-9]{1,10}$", name):
            raise _bad("signal", signal, "slurm.rule.pattern", allowed=t("slurm.allowed.name"))
        args.append(f"--signal={name}")
    if batch:
        args.append("--batch")
    _run(args + [job_id_of(job_id)], env=env)


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
    text = path.read_text(errors="replace")
    if tail:
        text = "\n".join(text.splitlines()[-tail:]) + "\n"
    return text


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
    except ValueError as error:
        raise TutorialError("slurm.bad_result", path=str(path), detail=str(error)) from None


# --------------------------------------------------------------------------------------
# Command line: ddp-tutorial slurm render|submit|status|wait|cancel|logs|result


def _spec_from_args(args: argparse.Namespace) -> JobSpec:
    env = []
    for item in args.env or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise _bad("--env", item, "slurm.rule.env_name")
        env.append((key, value))
    train_args = list(args.train_args or [])
    if train_args and train_args[0] == "--":
        train_args = train_args[1:]
    run_dir = args.run_dir
    if run_dir is not None and not os.path.isabs(run_dir) and args.workdir is None:
        run_dir = os.path.abspath(run_dir)  # the job may start elsewhere: make it unambiguous
    return JobSpec.from_profile(
        args.profile,
        template=args.template, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
        nproc_per_node=args.nproc_per_node, cpus_per_process=args.cpus_per_process,
        job_name=args.job_name, account=args.account, partition=args.partition, qos=args.qos, time=args.time,
        run_dir=run_dir, workdir=args.workdir, python=args.python, modules=tuple(args.module or ()),
        conda=args.conda, conda_env=args.conda_env, venv=args.venv, env=tuple(env),
        dataset=args.dataset, root=args.root, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
        seed=args.seed, train_args=tuple(train_args), signal_seconds=args.preempt_signal,
        requeue=True if args.requeue else None,
    )


def _cmd_render(args) -> int:
    text = render(_spec_from_args(args))
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        print(t("slurm.written", path=write_script(text, args.output)), file=sys.stderr)
    return 0


def _cmd_submit(args) -> int:
    if args.test_only:
        print(test_only(args.script, sbatch_args=args.sbatch_arg or ()))
        return 0
    job_id = submit(args.script, sbatch_args=args.sbatch_arg or ())
    print(job_id if args.parsable else t("slurm.submitted", job_id=job_id))
    if args.wait:
        return _finish(wait(job_id, timeout=args.timeout, poll=args.poll, on_change=_print_info))
    return 0


def _print_info(info: JobInfo) -> None:
    print(info.describe(), flush=True)


def _finish(info: JobInfo) -> int:
    return 0 if info.succeeded else 1


def _cmd_status(args) -> int:
    info = job_info(args.job_id)
    if args.json:
        print(json.dumps({k: v for k, v in info.__dict__.items() if k != "fields"}, indent=2))
    else:
        print(info.describe())
    return 0 if info.state != "UNKNOWN" else 1


def _cmd_wait(args) -> int:
    return _finish(wait(args.job_id, timeout=args.timeout, poll=args.poll, on_change=_print_info))


def _cmd_cancel(args) -> int:
    cancel(args.job_id, signal=args.signal, batch=args.batch)
    return 0


def _cmd_logs(args) -> int:
    sys.stdout.write(read_log(args.job_id, run_dir=args.run_dir, tail=args.tail))
    return 0


def _cmd_result(args) -> int:
    print(json.dumps(read_result(args.job_id, run_dir=args.run_dir), indent=2, sort_keys=True))
    return 0


def add_render_arguments(p: argparse.ArgumentParser) -> None:
    d = JobSpec()
    p.add_argument("--template", choices=list(TEMPLATES), default=None,
                   help="seed (spawn per node, default), per-gpu (one task per GPU), torchrun (c10d)")
    p.add_argument("--profile", choices=list(PROFILES), default="generic",
                   help="site profile: fills in partition, GPUs per node and cores per GPU")
    p.add_argument("--nodes", type=int, default=None, help=f"number of nodes (default {d.nodes})")
    p.add_argument("--gpus-per-node", type=int, default=None, help="GPUs per node (0: CPU-only form)")
    p.add_argument("--nproc-per-node", type=int, default=None, help="CPU form: training processes per node")
    p.add_argument("--cpus-per-process", type=int, default=None, help="cores per training process")
    p.add_argument("--job-name", default=None)
    p.add_argument("--account", default=None)
    p.add_argument("--partition", default=None)
    p.add_argument("--qos", default=None)
    p.add_argument("--time", default=None, help=f"time limit (default {d.time})")
    p.add_argument("--run-dir", default=None, help="logs, results and checkpoints (default ./runs)")
    p.add_argument("--workdir", default=None, help="the job's working directory (#SBATCH --chdir)")
    p.add_argument("--python", default=None, help="interpreter after set-up (default: python)")
    p.add_argument("--module", action="append", help="module to load (repeatable); module purge comes first")
    p.add_argument("--conda", default=None, help="conda installation directory, e.g. ~/miniconda3")
    p.add_argument("--conda-env", default=None, help="conda environment to activate")
    p.add_argument("--venv", default=None, help="virtual environment to activate")
    p.add_argument("--env", action="append", metavar="NAME=VALUE", help="export NAME=VALUE (repeatable)")
    p.add_argument("--dataset", default=None)
    p.add_argument("--root", default=None, help="where the data set is staged (run 'data prepare' first)")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--preempt-signal", type=int, default=None, metavar="SECONDS",
                   help="#SBATCH --signal=B:USR1@SECONDS: checkpoint and stop before the time limit")
    p.add_argument("--requeue", action="store_true", help="requeue after a checkpoint-and-stop (exit 75)")
    p.add_argument("train_args", nargs="*", help="further training options after --, e.g. -- --scale-lr")


def add_cli(subparsers) -> argparse.ArgumentParser:
    """Add ``slurm render|submit|status|wait|cancel|logs|result`` to the ``ddp-tutorial`` command."""
    slurm = subparsers.add_parser("slurm", help="write, submit and watch SLURM jobs")
    sub = slurm.add_subparsers(dest="slurm_command", required=True)

    p = sub.add_parser("render", help="write an sbatch script from a template")
    add_render_arguments(p)
    p.add_argument("-o", "--output", default=None, help="write the script here (default: print it)")
    p.set_defaults(func=_cmd_render)

    p = sub.add_parser("submit", help="sbatch a script; print the job id")
    p.add_argument("script")
    p.add_argument("--sbatch-arg", action="append",
                   help="extra sbatch option (repeatable), e.g. --sbatch-arg=--nodelist=gpu01")
    p.add_argument("--parsable", action="store_true", help="print only the job id")
    p.add_argument("--test-only", action="store_true", help="only ask sbatch whether it would accept the script")
    p.add_argument("--wait", action="store_true", help="then wait until it finishes")
    p.add_argument("--timeout", type=float, default=None)
    p.add_argument("--poll", type=float, default=2.0)
    p.set_defaults(func=_cmd_submit)

    p = sub.add_parser("status", help="state of a job")
    p.add_argument("job_id")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser("wait", help="wait until a job has finished (exit 0 when COMPLETED)")
    p.add_argument("job_id")
    p.add_argument("--timeout", type=float, default=None, help="give up after this many seconds")
    p.add_argument("--poll", type=float, default=2.0, help="seconds between checks (default 2)")
    p.set_defaults(func=_cmd_wait)

    p = sub.add_parser("cancel", help="cancel a job, or send it a signal")
    p.add_argument("job_id")
    p.add_argument("--signal", default=None, help="send this signal instead of cancelling, e.g. USR1")
    p.add_argument("--batch", action="store_true", help="signal only the batch script (it traps USR1)")
    p.set_defaults(func=_cmd_cancel)

    p = sub.add_parser("logs", help="print a job's log")
    p.add_argument("job_id")
    p.add_argument("--run-dir", default=None, help="look here instead of asking SLURM where the log is")
    p.add_argument("--tail", type=int, default=None, help="only the last N lines")
    p.set_defaults(func=_cmd_logs)

    p = sub.add_parser("result", help="print a job's JSON result")
    p.add_argument("job_id")
    p.add_argument("--run-dir", default=None)
    p.set_defaults(func=_cmd_result)
    return slurm
