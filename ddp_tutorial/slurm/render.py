"""Building the job script: a template from ``slurm/`` with its gaps filled in one pass.

The templates are ordinary sbatch scripts with gaps that :func:`render` fills:

* ``{{sbatch}}``   — the ``#SBATCH`` lines (nodes, tasks, GPUs, CPUs, time, logs …);
* ``{{settings}}`` — shell variables (interpreter, run directory, training options or your script);
* ``{{setup}}``    — the environment set-up (``module load``, conda or venv activation);
* ``{{network}}``  — which network interface gloo and NCCL use (:func:`network_lines`, after ``MASTER_ADDR``);
* ``{{check}}``    — GPU jobs of the package's training: does this torch fit the node's GPUs (:func:`check_lines`);
* ``{{program}}``  — what each process runs: the package's training, or your own script
  (per-gpu and torchrun templates).

The comments come in the user's language (``DDP_TUTORIAL_LANG``; the shell code is the same in both): a
template writes each comment as ``⟪Türkçe‖English⟫`` (the notebooks' marker, :func:`in_language`), and
the generated lines take theirs from the ``[slurm_script]`` messages. Section headers stay bilingual.

Every gap is filled in **one pass** over the template: a generated line is never scanned
again, so a value that looks like a gap stays text (and :func:`~.spec.validate` refuses such
values anyway). Every user value is shell-quoted exactly once (:func:`shlex.quote`).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Callable, Dict, List

from .. import convention
from ..atomic import write_text
from ..i18n import TutorialError, language, localize_code, t
from .spec import TEMPLATES, JobSpec, validate

#: ipyparallel engines on an allocation, one per GPU (ddp_tutorial.ipp.start_slurm); not a training job.
ENGINES_TEMPLATE = "ipengines.sbatch"
GAP = re.compile(r"\{\{([a-z]+)\}\}")

q = shlex.quote  # 'it'"'"'s' — the shell reads the value back exactly, never runs it


def _template_dir() -> Path:
    """The templates: the repository's ``slurm/`` folder in a checkout (or editable install),
    ``ddp_tutorial/sbatch`` in an installed wheel (pyproject.toml maps one onto the other)."""
    package = Path(__file__).resolve().parent.parent
    checkout = package.parent / "slurm"
    return checkout if (checkout / "seed.sbatch").is_file() else package / "sbatch"


TEMPLATE_DIR = _template_dir()


def template_text(name: str, lang: str | None = None) -> str:
    """The template ``name`` with its comments in ``lang`` (default: the user's language)."""
    if name not in TEMPLATES and name != "ipengines":
        raise TutorialError("slurm.unknown_template", name=name, choices=", ".join(TEMPLATES))
    path = TEMPLATE_DIR / TEMPLATES.get(name, ENGINES_TEMPLATE)
    if not path.is_file():
        raise TutorialError("slurm.template_missing", path=str(path))
    return in_language(path.read_text(encoding="utf-8"), lang or language(), path)


def in_language(text: str, lang: str, path: os.PathLike | str = "") -> str:
    """``⟪Türkçe‖English⟫`` → its ``lang`` part. Only template text comes here, never a user's value
    (a value is inserted later and stays as given). A stray ⟪, ‖ or ⟫ means a broken template."""
    try:
        return localize_code(text, lang)  # the marker of notebooks/src/*.cells (it may span lines)
    except ValueError:
        raise TutorialError("slurm_script.broken_marker", path=str(path)) from None


def fill(text: str, gaps: Dict[str, str], escape: Callable[[str], str] = str,
         raw: Dict[str, str] = None) -> str:
    """Replace every ``{{name}}`` of ``text`` in one pass. ``escape`` is applied to the template's
    own text and to ``gaps``' values, never to ``raw``'s. A gap the template has but we do not
    fill means a broken template: a clear error, not a script with a hole."""
    raw = raw or {}
    out, last = [], 0
    for m in GAP.finditer(text):
        name = m.group(1)
        if name in raw:
            value = raw[name]
        elif name in gaps:
            value = escape(gaps[name])
        else:
            raise TutorialError("slurm.template_gap", gap=m.group(0))
        out += [escape(text[last:m.start()]), value]
        last = m.end()
    out.append(escape(text[last:]))
    return "".join(out)


def _run_dir(spec: JobSpec) -> str:
    return spec.run_dir.rstrip("/") or "/"


def _sbatch_lines(spec: JobSpec, lang: str) -> List[str]:
    lines = [
        ("--job-name", spec.job_name, t("slurm_script.job_name", lang)),
        ("--account", spec.account, t("slurm_script.account", lang)),
        ("--partition", spec.partition, t("slurm_script.partition", lang)),
        ("--reservation", spec.reservation, t("slurm_script.reservation", lang)),
        ("--qos", spec.qos, t("slurm_script.qos", lang)),
        ("--nodes", spec.nodes, t("slurm_script.nodes", lang)),
        ("--ntasks-per-node", spec.tasks_per_node, t("slurm_script.tasks_per_parent", lang) if spec.per_node
         else t("slurm_script.tasks_per_gpu", lang) if spec.template == "per-gpu"
         else t("slurm_script.tasks_per_node", lang)),
        ("--gres", f"gpu:{spec.gpus_per_node}" if spec.gpus_per_node else None, t("slurm_script.gres", lang)),
        ("--cpus-per-task", spec.cpus_per_task, t("slurm_script.cpus_per_task", lang)),
        ("--time", spec.time, t("slurm_script.time", lang)),
        ("--chdir", spec.workdir, t("slurm_script.chdir", lang)),
        ("--output", f"{_run_dir(spec)}/slurm-%j.out", t("slurm_script.output", lang)),
        ("--signal", f"B:USR1@{spec.signal_seconds}" if spec.signal_seconds else None,
         t("slurm_script.signal", lang)),
        ("--requeue", True if spec.requeue else None, t("slurm_script.requeue", lang)),
        ("--open-mode", "append" if spec.requeue else None, t("slurm_script.open_mode", lang)),
    ]
    out = []
    for option, value, comment in lines:
        if value is None:
            continue
        text = option if value is True else f"{option}={value}"
        out.append(f"#SBATCH {text:<34} # {comment}")
    return out


def _training_args(spec: JobSpec) -> List[str]:
    args = list(spec.training_argv)
    args += ["--device", "cuda" if spec.gpus_per_node else "cpu", "--threads", str(spec.cpus_per_process)]
    args += list(spec.train_args)
    return args


def _nccl_lines(spec: JobSpec, lang: str) -> List[str]:
    """GPU jobs: NCCL's diagnostics at a quiet level, unless set. TORCH_NCCL_ASYNC_ERROR_HANDLING is
    left to torch: its default (3) tears a process with a failed collective down without the
    communicator abort that can itself hang (pytorch/pytorch#110723)."""
    if not spec.gpus_per_node:
        return []
    return [
        "# " + t("slurm_script.nccl", lang),
        'export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"',
    ]


#: The interface rule, in shell (run on the first node, where the batch script runs): the interface
#: that holds the address MASTER_ADDR resolves to, i.e. the network the other nodes reach rank 0 on —
#: never loopback (``lo``, 127.*: a node whose /etc/hosts maps its own name to 127.0.1.1 would make
#: every rank bind lo and a multi-node rendezvous time out; review N9): then nothing is chosen.
#: ddp_tutorial.ipp.remote.interface_for applies the same rule to SLURM engines.
IFNAME_RULE = ("ip -o -4 addr show 2>/dev/null | awk "
               "-v a=\"$(getent ahostsv4 \"$MASTER_ADDR\" | awk 'NR == 1 {print $1}')\" "
               "'a != \"\" && a !~ /^127[.]/ && $2 != \"lo\" && index($4, a \"/\") == 1 {print $2; exit}'")
#: True (exit 0) when MASTER_ADDR resolves to a loopback address: a multi-node job then says so.
LOOPBACK_TEST = "getent ahostsv4 \"$MASTER_ADDR\" | awk 'NR == 1 && /^127[.]/ {f = 1} END {exit !f}'"


def network_lines(lang: str) -> List[str]:
    """Which network gloo (always) and NCCL (its bootstrap and socket transport) use: one rule for
    both, overridable (``DDP_TUTORIAL_IFNAME`` for both, or ``GLOO_SOCKET_IFNAME`` /
    ``NCCL_SOCKET_IFNAME`` each, e.g. through ``--env``). The name found on the first node is used on
    every node: a partition's nodes are alike. Nothing found (no ``ip``, an unresolvable name, a
    loopback address: never ``lo``): nothing is set and gloo/NCCL choose as they would; a multi-node
    job whose MASTER_ADDR resolves to 127.* says so on stderr."""
    return [
        *_comment("slurm_script.network", lang),
        f'IFNAME=${{DDP_TUTORIAL_IFNAME:-$({IFNAME_RULE})}}',
        'if [ -n "$IFNAME" ]; then',
        '    export GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-$IFNAME}"',
        '    export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-$IFNAME}"',
        "fi",
        f'if [ -z "$IFNAME" ] && [ "${{SLURM_JOB_NUM_NODES:-1}}" -gt 1 ] && {LOOPBACK_TEST}; then',
        f'    echo "!! MASTER_ADDR=$MASTER_ADDR: {t("slurm_script.network_loopback", lang)}" >&2',  # the job's language
        "fi",
        f'echo "{t("slurm_script.echo_network", lang)}"',  # the job's language
    ]


def check_lines(spec: JobSpec, lang: str) -> List[str]:
    """GPU jobs that run the package's training: the batch host (a node of the partition) checks once
    whether the torch of ``$PYTHON`` can use its GPUs (``ddp_tutorial.gpu``: driver and kernels) and ends
    the job with the verdict and the command that fixes it, instead of every rank failing on its own.
    Not for your own script (its environment need not have this package) nor CPU jobs."""
    if not spec.gpus_per_node or spec.script is not None:
        return []
    return [
        "# ---- GPU check / GPU denetimi ------------------------------------------------------------",
        *_comment("slurm_script.check", lang),
        f'"$PYTHON" -m ddp_tutorial.gpu || {{ echo "{t("slurm_script.echo_gpu_check_failed", lang)}"; exit 2; }}',
    ]


def _settings_lines(spec: JobSpec, lang: str) -> List[str]:
    own = spec.script is not None
    pairs = [
        (f"PYTHON={q(spec.python)}", t("slurm_script.python", lang)),
        (f"RUN_DIR={q(_run_dir(spec))}",
         t("slurm_script.run_dir_own", lang) if own else t("slurm_script.run_dir", lang)),
        (f"NPROC_PER_NODE={spec.processes_per_node}",
         t("slurm_script.nproc_parent", lang) if spec.per_node
         else t("slurm_script.nproc_gpu", lang) if spec.gpus_per_node else t("slurm_script.nproc_cpu", lang)),
    ]
    if own:
        pairs += [(f"SCRIPT={q(spec.script)}", t("slurm_script.script", lang)),
                  ("SCRIPT_ARGS=(" + " ".join(q(a) for a in spec.script_argv) + ")",
                   t("slurm_script.script_args", lang))]
    else:
        pairs.append(("TRAIN_ARGS=(" + " ".join(q(a) for a in _training_args(spec)) + ")",
                      t("slurm_script.train_args", lang)))
    pairs += [
        (f"REQUEUE={1 if spec.requeue else 0}",
         t("slurm_script.requeue_own", lang) if own else t("slurm_script.requeue_training", lang)),
        (f"export OMP_NUM_THREADS={spec.cpus_per_process}", t("slurm_script.threads", lang)),
    ]
    width = max(len(code) for code, _ in pairs if len(code) <= 48)
    lines = [f"{code:<{width}}  # {comment}" if len(code) <= 48 else f"# {comment}\n{code}"
             for code, comment in pairs]
    lines += _nccl_lines(spec, lang)
    lines += [f"export {key}={q(value)}" for key, value in spec.env]
    if own:
        lines += _rank_check_lines(spec, lang)
    return lines


def _rank_check_lines(spec: JobSpec, lang: str) -> List[str]:
    """The convention the job gives its processes, and the check that stops a script reading the other one
    (:mod:`ddp_tutorial.convention`): DDP_TUTORIAL_RANK_CHECK holds the Python every process runs the script
    through (in the environment, not on the command line: torchrun's failure report prints the command)."""
    return [*_comment("slurm_script.rank_check", lang),
            f"export DDP_TUTORIAL_CONVENTION={convention.meant(spec.template)}",
            "export DDP_TUTORIAL_RANK_CHECK=\"$(cat <<'RANK_CHECK_PY'", convention.runner(lang).rstrip("\n"),
            "RANK_CHECK_PY", ")\"",
            """CHECKED='import os; exec(os.environ["DDP_TUTORIAL_RANK_CHECK"])'"""]


def _comment(key: str, lang: str) -> List[str]:
    """A message as comment lines: ``# `` before each of its lines."""
    return ["# " + line for line in t(key, lang).splitlines()]


def _setup_lines(spec: JobSpec, lang: str) -> List[str]:
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
        lines += _comment("slurm_script.no_setup", lang)
    return lines


# What each process runs (the {{program}} gap), by template: the package's training, or your script.
_TRAINING = '"${TRAIN_ARGS[@]}" --json "$RESULT" --checkpoint-dir "$CHECKPOINTS" "${RESUME[@]}"'
PROGRAMS = {
    ("per-gpu", False): '"$PYTHON" -m ddp_tutorial.train \\\n    ' + _TRAINING,
    ("torchrun", False): "-m ddp_tutorial.train \\\n    " + _TRAINING,
    # srun sets SLURM_PROCID etc. per task; a DDP script expects the torchrun names: export them
    # inside each task (single quotes: expanded by the task's shell, not by this script).
    # Each process runs the script through the rank check ("$PYTHON" -c "$CHECKED" SCRIPT ARGS…).
    # SLURM_GPUS_ON_NODE, which slurmstepd unsets in a task without GPUs, from DDP_TUTORIAL_GPUS_ON_NODE when the
    # job gives it (a CPU job of a script that reads it: cli.check_convention).
    ("per-gpu", True): ("bash -c 'export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS"
                        " LOCAL_WORLD_SIZE=$SLURM_NTASKS_PER_NODE"
                        " ${DDP_TUTORIAL_GPUS_ON_NODE:+SLURM_GPUS_ON_NODE=$DDP_TUTORIAL_GPUS_ON_NODE}; exec \"$@\"'"
                        " rank-env \\\n"
                        '    "$PYTHON" -c "$CHECKED" "$SCRIPT" "${SCRIPT_ARGS[@]}"'),
    # torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT itself;
    # --no-python: it starts the command as given (-u: unbuffered, as torchrun's own python -u).
    ("torchrun", True): '--no-python "$PYTHON" -u -c "$CHECKED" "$SCRIPT" "${SCRIPT_ARGS[@]}"',
}


# Your script's job, after srun: the code of the rank that failed first (convention.py's runner wrote each
# rank's own code and end time into EXIT_DIR; a rank that was stopped wrote none) replaces srun's, whose 143 is
# that of the ranks it killed; when srun's code differs or a rank was stopped, one line names the rank, before
# the finished line (jobs.py reads both back).
_MAKE_EXIT_DIR = 'rm -rf "$EXIT_DIR" && mkdir -p "$EXIT_DIR" && export DDP_TUTORIAL_EXIT_DIR="$EXIT_DIR"'
_RANK_CODE = """SRUN_STATUS=$STATUS
EXITS=$(cat "$EXIT_DIR"/rank-* 2>/dev/null | sort -n)
read -r _ FAILED_RANK RANK_CODE < <(awk '$3 != 0' <<< "$EXITS")
if [ "$STATUS" -ne 0 ] && [ -n "${RANK_CODE:-}" ] && { [ "$RANK_CODE" -ne "$STATUS" ] ||
        [ "$(grep -c . <<< "$EXITS")" -lt $((SLURM_NNODES * NPROC_PER_NODE)) ]; }; then
    echo "{echo}"
    STATUS=$RANK_CODE
fi
rm -rf "$EXIT_DIR"
"""


# What the job says about the run's files, the stop signal and a requeue: the package's training
# writes RUN_DIR/result-ID.json and checkpoints, and resumes; your own script does what it does
# (slurm/README.md shows the pattern that makes it checkpoint, exit 75 and resume).
# The echo texts are in the job's language (slurm_script.echo_*), like its comments; "finished" is the log's
# last line, which `slurm result` reads back from the same message (jobs.py: finished_lines).
def _run_notes(own: bool, lang: str) -> Dict[str, str]:
    if own:
        return {
            "runfiles": "\n".join([*_comment("slurm_script.own_files", lang), *_comment("slurm_script.exit_dir", lang),
                                   'EXIT_DIR="$RUN_DIR/.exit-$SLURM_JOB_ID"', _MAKE_EXIT_DIR]),
            "rankcode": _RANK_CODE.replace("{echo}", t("slurm_script.echo_rank_failed", lang, rank="$FAILED_RANK",
                                                       code="$RANK_CODE", srun_code="$SRUN_STATUS")),
            "stopnote": "\n".join(_comment("slurm_script.stop_own", lang)),
            "stopecho": t("slurm_script.echo_stop_own", lang),
            "finished": t("slurm_script.echo_finished_own", lang, code="$STATUS"),
            "exitnote": "\n".join(_comment("slurm_script.exit_own", lang)),
            "requeueecho": t("slurm_script.echo_requeue_own", lang),
        }
    return {
        "runfiles": "\n".join([
            'RESULT="$RUN_DIR/result-$SLURM_JOB_ID.json"',
            'CHECKPOINTS="$RUN_DIR/checkpoint-$SLURM_JOB_ID"',
            "RESUME=()",
            'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then',
            "    RESUME=(--resume)   # " + t("slurm_script.resume", lang),
            "fi"]),
        "stopnote": "\n".join(_comment("slurm_script.stop_training", lang)),
        "stopecho": t("slurm_script.echo_stop_training", lang),
        "finished": t("slurm_script.echo_finished_training", lang, code="$STATUS"),
        "rankcode": "",
        "exitnote": "\n".join(_comment("slurm_script.exit_training", lang)),
        "requeueecho": t("slurm_script.echo_requeue_training", lang),
    }


def render(spec: JobSpec, lang: str | None = None) -> str:
    """The sbatch script for ``spec`` (validated first), its comments in ``lang`` (default: the
    user's language); the shell code is the same in every language."""
    validate(spec)
    lang = lang or language()
    gaps = {"sbatch": "\n".join(_sbatch_lines(spec, lang)), "settings": "\n".join(_settings_lines(spec, lang)),
            "setup": "\n".join(_setup_lines(spec, lang)), "network": "\n".join(network_lines(lang)),
            "check": "\n".join(check_lines(spec, lang)),
            **_run_notes(spec.script is not None, lang)}  # the seed takes only its echo lines
    if spec.template in ("per-gpu", "torchrun"):
        gaps["program"] = PROGRAMS[(spec.template, spec.script is not None)]
    return fill(template_text(spec.template, lang), gaps)


def _double_braces(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def render_engines(spec: JobSpec, engine_command: str = "{program_and_args}", lang: str | None = None) -> str:
    """The sbatch script that starts one ipyparallel engine per SLURM task (``slurm/ipengines.sbatch``).

    ``spec`` gives the allocation (nodes, GPUs or CPU processes per node, cores, time, account,
    set-up); its training fields are not used. The result is a template for ipyparallel's
    ``SlurmEngineSetLauncher``, which fills it with :meth:`str.format`-like rules: every brace of
    ours is doubled, so only ``engine_command`` (by default ipyparallel's ``{program_and_args}``)
    is left for it to fill, and a value such as ``${HOME}`` in an exported variable reaches the
    script as written.
    """
    spec = replace(spec, template="per-gpu")  # one task per GPU / CPU process, like per-gpu
    validate(spec)
    lang = lang or language()
    settings = [f"export OMP_NUM_THREADS={spec.cpus_per_process}  # " + t("slurm_script.engine_threads", lang)]
    settings += _nccl_lines(spec, lang)
    settings += [f"export {key}={q(value)}" for key, value in spec.env]
    gaps = {"sbatch": "\n".join(_sbatch_lines(spec, lang)), "settings": "\n".join(settings),
            "setup": "\n".join(_setup_lines(spec, lang))}
    return fill(template_text("ipengines", lang), gaps, escape=_double_braces, raw={"engines": engine_command})


def engines_script(spec: JobSpec, lang: str | None = None) -> str:
    """The engine script as ``sbatch`` receives it: :func:`render_engines` after ipyparallel's own
    :meth:`str.format` pass (every doubled brace single again: ``${NCCL_DEBUG:-WARN}``), with the engine
    command it fills in shown as ``{program_and_args}``. What 05 shows where there is no cluster (issue 49:
    it showed the template, ``${{NCCL_DEBUG:-WARN}}``)."""
    return render_engines(spec, lang=lang).format(program_and_args="{program_and_args}")


def write_script(text: str, path: os.PathLike | str) -> Path:
    """Write a rendered script (executable, atomically) and return its path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_text(path, text, mode=0o777)  # executable (less the umask); a device or pipe is written through
