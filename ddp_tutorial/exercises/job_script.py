"""Exercise of notebook 05: write the job yourself — 2 nodes × 4 GPUs on TRUBA akya-cuda, from a near-blank script.

The check reads the attendee's text as sbatch and bash would and names the first piece that is missing or
wrong, and why it matters: a placeholder left (``<venv>``: bash reads ``<name>`` as an input redirection),
a misspelt directive, the partition, nodes, tasks, GPUs and cores per GPU for the site profile
(:data:`ddp_tutorial.slurm.PROFILES`), the log folder (SLURM does not create it), ``MASTER_ADDR`` from the
node list, a port from the job id, ``SRUN_CPUS_PER_TASK``, ``--kill-on-bad-exit``, the c10d rendezvous (or
one task per GPU), SIGUSR1 with its trap and the requeue. Then ``bash -n``, and ``sbatch --test-only``
where a SLURM answers (input variables such as ``SBATCH_PARTITION`` override the script's lines there,
as they do for ``sbatch`` itself).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..i18n import t
from .cluster import PLACEHOLDER, sbatch_options
from .core import Exercise, NotDone, WrongAnswer, fail

PROFILE = "akya-cuda"
NODES = 2

# The near-blank script the attendee starts from (the same in both languages: no words in it).
SKELETON = """#!/bin/bash
#SBATCH --job-name=ddp-own
#SBATCH --time=00:30:00
source <venv>/bin/activate

srun python train.py
"""

_NO_SLURM = ("Could not establish a configuration source", "Unable to contact slurm controller",
             "Connection refused", "Unable to establish", "slurm.conf", "Zero Bytes were transmitted")


def _profile():
    from ..slurm.spec import PROFILES
    return PROFILES[PROFILE]


def _code_lines(text):
    """(line number, line) of every line bash runs: comments and #SBATCH lines left out."""
    return [(number, line) for number, line in enumerate(text.splitlines(), start=1)
            if line.strip() and not line.strip().startswith("#")]


def _joined(text):
    """The script with its continuation lines joined (``\\`` + newline), as bash reads a command."""
    return re.sub(r"\\\n\s*", " ", text)


def _int(options, name, default=None):
    value = options.get(name)
    if value is None or value == "":
        return default
    match = re.fullmatch(r"(\d+)", value)
    if not match:
        fail("ex.ddp_job.number", option=name, value=value)
    return int(match.group(1))


def _gpus(options):
    if "gpus-per-node" in options:
        return _int(options, "gpus-per-node")
    gres = options.get("gres")
    if not gres:
        return None
    match = re.fullmatch(r"gpu(?::[\w.-]+)?:(\d+)", gres)
    if not match:
        fail("ex.ddp_job.number", option="gres", value=gres)
    return int(match.group(1))


def _check_text(text):
    for number, line in _code_lines(text):
        found = PLACEHOLDER.search(line.split(" #")[0])
        if found:
            fail("ex.ddp_job.placeholder", line=number, code=line.strip()[:70], name=found.group(0))
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if re.match(r"^#\s*S[A-Z]{3,}", stripped) and not stripped.startswith("#SBATCH "):
            fail("ex.ddp_job.typo", line=number, code=stripped[:60])


def _launch(text):
    """The srun line that starts the training (continuations joined), and whether it runs torchrun."""
    lines = [line.strip() for line in _joined(text).splitlines()
             if re.match(r"^\s*srun\b", line) and re.search(r"\bpython\S*\b|\btorchrun\b", line)]
    if not lines:
        fail("ex.ddp_job.no_srun")
    line = lines[-1]
    return line, bool(re.search(r"\btorchrun\b|torch\.distributed\.run", line))


def _check_allocation(text, torchrun):
    profile, options = _profile(), sbatch_options(text)
    partition = options.get("partition")
    if not partition:
        fail("ex.ddp_job.no_partition", want=profile.partition)
    if partition != profile.partition:
        fail("ex.ddp_job.partition", got=partition or "—", want=profile.partition)
    nodes = _int(options, "nodes")
    if nodes != NODES:
        fail("ex.ddp_job.nodes", got=nodes if nodes is not None else "—", want=NODES)
    gpus = _gpus(options)
    if gpus is None:
        fail("ex.ddp_job.no_gpus", want=profile.gpus_per_node)
    if gpus != profile.gpus_per_node:
        fail("ex.ddp_job.gpus", got=gpus, want=profile.gpus_per_node, partition=profile.partition)
    per_node = _int(options, "ntasks-per-node")
    want_tasks = 1 if torchrun else profile.gpus_per_node
    if per_node != want_tasks:
        fail("ex.ddp_job.tasks_torchrun" if torchrun else "ex.ddp_job.tasks_per_gpu",
             got=per_node if per_node is not None else "—", want=want_tasks)
    total = _int(options, "ntasks")
    if total is not None and total != NODES * want_tasks:
        fail("ex.ddp_job.ntasks", got=total, want=NODES * want_tasks)
    cpus = _int(options, "cpus-per-task")
    processes = profile.gpus_per_node if torchrun else 1
    if cpus is None:
        fail("ex.ddp_job.no_cpus", want=profile.cpus_per_gpu * processes, per_gpu=profile.cpus_per_gpu)
    if cpus > profile.cpus_per_gpu * processes:
        fail("ex.ddp_job.cpus", got=cpus, want=profile.cpus_per_gpu * processes, per_gpu=profile.cpus_per_gpu,
             node=profile.cpus_per_gpu * profile.gpus_per_node, partition=profile.partition)
    output = options.get("output")
    if not output:
        fail("ex.ddp_job.no_output")
    folder = os.path.dirname(output)
    workdir = options.get("chdir") or "."
    if folder and not Path(workdir, folder).is_dir():
        fail("ex.ddp_job.log_folder", folder=folder, output=output)
    if "USR1" not in options.get("signal", ""):
        fail("ex.ddp_job.no_signal")
    return options


def _export(text, name):
    match = re.search(rf"^\s*(?:export\s+)?{name}=(.*)$", text, re.M)
    return match.group(1).split(" #")[0].strip() if match else None


def _check_rendezvous(text):
    address = _export(text, "MASTER_ADDR")
    if address is None:
        fail("ex.ddp_job.no_addr")
    if not (re.search(r"scontrol\s+show\s+hostnames?", address) and "NODELIST" in address):
        fail("ex.ddp_job.addr", value=address)
    port = _export(text, "MASTER_PORT")
    if port is None:
        fail("ex.ddp_job.no_port")
    if "SLURM_JOB_ID" not in port:
        fail("ex.ddp_job.port", value=port)


def _check_launch(text, line, torchrun):
    profile = _profile()
    if _export(text, "SRUN_CPUS_PER_TASK") is None and not re.search(r"--cpus-per-task|\s-c\s", line):
        fail("ex.ddp_job.srun_cpus")
    if "--kill-on-bad-exit" not in line and not re.search(r"\s-K\b", line):
        fail("ex.ddp_job.kill_on_bad_exit")
    if not torchrun:
        return
    if "--standalone" in line:
        fail("ex.ddp_job.standalone")
    if not re.search(r"--rdzv[-_]backend[= ]\s*c10d", line):
        fail("ex.ddp_job.rdzv")
    endpoint = re.search(r"--rdzv[-_]endpoint[= ]\s*(\S+)", line)
    if not endpoint or "MASTER_ADDR" not in endpoint.group(1):
        fail("ex.ddp_job.rdzv_endpoint", got=endpoint.group(1) if endpoint else "—")
    nproc = re.search(r"--nproc[-_]per[-_]node[= ]\s*(\S+)", line)
    if not nproc or nproc.group(1).strip("\"'") != str(profile.gpus_per_node):
        fail("ex.ddp_job.nproc", got=nproc.group(1) if nproc else "—", want=profile.gpus_per_node)
    nnodes = re.search(r"--nnodes[= ]\s*(\S+)", line)
    if not nnodes or nnodes.group(1).strip("\"'") not in (str(NODES), "$SLURM_NNODES", "$SLURM_JOB_NUM_NODES",
                                                            "${SLURM_NNODES}", "${SLURM_JOB_NUM_NODES}"):
        fail("ex.ddp_job.nnodes", got=nnodes.group(1) if nnodes else "—", want=NODES)


def _check_preemption(text, line, options):
    if options.get("signal", "").startswith("B:"):
        if not re.search(r"^\s*trap\s.*\bUSR1\b", text, re.M):
            fail("ex.ddp_job.no_trap")
        if not line.rstrip().endswith("&"):
            fail("ex.ddp_job.foreground")
    if not re.search(r"scontrol\s+requeue", text):
        fail("ex.ddp_job.no_requeue")


def _bash_n(text):
    done = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        fail("ex.ddp_job.syntax", error=" ".join(done.stderr.strip().splitlines()[:2]))


def test_only(text: str) -> str:
    """``sbatch --test-only`` on ``text`` where a SLURM answers (:func:`ddp_tutorial.slurm.jobs.test_only`): its
    answer line, or "" when none is here. A refusal fails the check with sbatch's own words."""
    from ..i18n import TutorialError
    from ..slurm.jobs import test_only as sbatch_test_only
    if shutil.which("sbatch") is None:
        return ""
    with tempfile.NamedTemporaryFile("w", suffix=".sbatch", delete=False) as handle:
        handle.write(text)
    try:
        said = sbatch_test_only(handle.name)
    except TutorialError as error:
        said = str(error.fields.get("detail", ""))
        if error.key != "slurm.command_failed" or any(words in said for words in _NO_SLURM):
            return ""  # no answer in time, or no SLURM controller to ask
        fail("ex.ddp_job.sbatch_refused", error=said)
    finally:
        os.unlink(handle.name)
    return said.splitlines()[-1] if said else "ok"


def _grade(text):
    if not isinstance(text, str):
        fail("ex.ddp_job.type", got=type(text).__name__)
    if text.strip() == SKELETON.strip():
        raise NotDone()
    _check_text(text)
    line, torchrun = _launch(text)
    options = _check_allocation(text, torchrun)
    _check_rendezvous(text)
    _check_launch(text, line, torchrun)
    _check_preemption(text, line, options)
    _bash_n(text)
    accepted = test_only(text)
    layout = t("ex.ddp_job.torchrun" if torchrun else "ex.ddp_job.per_gpu")
    sbatch = t("ex.ddp_job.accepted", answer=accepted) if accepted else t("ex.ddp_job.no_slurm")
    return {"layout": layout, "sbatch": sbatch}


SOLUTION = r'''
from pathlib import Path

# ⟪SLURM günlük klasörünü kendisi açmaz:
# yoksa iş günlüksüz ölür‖SLURM does not create the log folder:
# without it the job dies with no log⟫
Path("runs").mkdir(exist_ok=True)
# ⟪#SBATCH: 2 düğüm × 4 GPU, düğüm başına bir torchrun,
# GPU başına 10 çekirdek (akya-cuda: 40/4);
# USR1, süre dolmadan 300 s önce betiğe (B:) gelir.
# Sonra: MASTER_ADDR düğüm listesinden, port iş numarasından, srun çekirdekleri bilsin,
# bir rank ölünce iş bitsin (--kill-on-bad-exit), c10d buluşması; srun arka planda (&),
# tuzak (trap) USR1'i ona iletir ve iş yeniden kuyruğa girer.‖#SBATCH: 2 nodes × 4 GPUs, one torchrun per node,
# 10 cores per GPU (akya-cuda: 40/4);
# USR1 reaches the script (B:) 300 s before the time limit.
# Then: MASTER_ADDR from the node list, the port from the job id, srun told the cores,
# one dead rank ends the job (--kill-on-bad-exit), c10d rendezvous; srun in the background (&),
# the trap passes USR1 on to it and the job requeues itself.⟫
ddp_job = """#!/bin/bash
#SBATCH --job-name=ddp-own
#SBATCH --partition=akya-cuda
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=40
#SBATCH --time=00:30:00
#SBATCH --output=runs/%x-%j.out
#SBATCH --signal=B:USR1@300
source "$HOME/ddp-tutorial/.venv/bin/activate"

export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=$((15000 + SLURM_JOB_ID % 15000))
export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK
export OMP_NUM_THREADS=10
export TORCHELASTIC_SIGNALS_TO_HANDLE=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1

srun --kill-on-bad-exit=1 python -m torch.distributed.run \\
    --nnodes "$SLURM_NNODES" --nproc-per-node 4 \\
    --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv-id "$SLURM_JOB_ID" \\
    --max-restarts 0 train.py &
STEP=$!
STOP=0
trap 'STOP=1; kill -USR1 "$STEP"' USR1
wait "$STEP"; STATUS=$?
while [ "$STATUS" -gt 128 ] && kill -0 "$STEP" 2>/dev/null; do
    wait "$STEP"; STATUS=$?
done
if [ "$STOP" -eq 1 ]; then
    scontrol requeue "$SLURM_JOB_ID"
fi
exit "$STATUS"
"""
'''


def _stub(lang=None):
    return f'ddp_job = """{SKELETON}"""  # ' + t("ex.ddp_job.your_code", lang=lang)


def solution_text() -> str:
    """The solution's job script (the text ``ddp_job`` holds after the solution's code)."""
    return SOLUTION.split('ddp_job = """', 1)[1].rsplit('"""', 1)[0].replace("\\\\\n", "\\\n")


def _without_kill_on_bad_exit() -> str:
    return ("from pathlib import Path\nPath('runs').mkdir(exist_ok=True)\nddp_job = "
            + repr(solution_text().replace("srun --kill-on-bad-exit=1 ", "srun ")))


EXERCISES = (
    Exercise("ddp_job", "05", _grade, SOLUTION,
             WrongAnswer(_without_kill_on_bad_exit(), "ex.ddp_job.kill_on_bad_exit"), stub=_stub),
)
