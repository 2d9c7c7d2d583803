"""Exercise of notebook 05: write the job yourself — 2 whole GPU nodes of the site's partition for the day's jobs
(the session's site table, ``[exercises] job_script_partition``: every GPU of a node, its cores per GPU), from a
near-blank script.

The check reads the attendee's text as sbatch and bash would and names the first piece that is missing or
wrong, and why it matters: a placeholder left (``<venv>``: bash reads ``<name>`` as an input redirection),
a misspelt directive, the training started by srun and the partition's written rules (the shape rules
``fixed_sbatch`` applies too: :mod:`.job_shape`), then the exercise's own partition, nodes, tasks, GPUs and
cores (:data:`ddp_tutorial.slurm.PROFILES`), the log folder (SLURM does not create it), ``MASTER_ADDR`` from the
node list, a port from the job id (computed for a 7-digit job id, as a large site's are), ``SRUN_CPUS_PER_TASK``,
``--kill-on-bad-exit``, the c10d rendezvous (or one task per GPU), SIGUSR1 with its trap, torchrun told to
pass it on, a ``wait`` that outlasts the trap, and a requeue that can fire. #SBATCH lines are read as sbatch
reads them (:func:`~ddp_tutorial.exercises.cluster.read_directives`), code lines without their comments.
Then ``bash -n``, and ``sbatch --test-only`` where a SLURM answers and has the job's partition (input
variables such as ``SBATCH_PARTITION`` override the script's lines there, as they do for ``sbatch``
itself); elsewhere the grade is the reading alone, and the message says so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..i18n import t
from .cluster import PLACEHOLDER, exercise_profile, read_directives
from .core import Exercise, NotDone, WrongAnswer, fail
from .job_shape import check_shape, read_shape, training_line
from .shell import JOB_ID_NAMES, code_lines, port_for, walk

NODES = 2

# The near-blank script the attendee starts from (the same in both languages: no words in it).
SKELETON = """#!/bin/bash
#SBATCH --job-name=ddp-own
#SBATCH --time=00:30:00
source <venv>/bin/activate

srun python train.py
"""

# sbatch's and sinfo's words where no SLURM is configured here, and where its controller does not answer.
_NO_SLURM = ("Could not establish a configuration source", "slurm.conf", "Unable to establish")
_SILENT = ("Unable to contact slurm controller", "Connection refused", "Zero Bytes were transmitted",
           "Socket timed out", "timed out")
SINFO_SECONDS, SBATCH_SECONDS = 4, 8
"""How long sinfo and sbatch --test-only may take: together well inside the check's bound
(:data:`~ddp_tutorial.exercises.core.GRADING_BOUND`), so a controller that does not answer is named as such."""
JOB_IDS = (1234567, 1234568, 9999999, 4711)
"""The job ids MASTER_PORT is computed for: a large site's have 7 digits."""
TORCHRUN_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
_TORCHRUN_DEFAULT_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"  # torch/distributed/run.py, --signals-to-handle


def _profile():
    """The profile the exercise is written for (:func:`~ddp_tutorial.exercises.cluster.exercise_profile`)."""
    return exercise_profile("job_script_partition")


def _line_of(text, index):
    return text.count("\n", 0, index) + 1


def _check_bytes(text):
    """What no file for sbatch can hold: a character UTF-8 cannot write, a NUL byte, Windows line ends."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        fail("ex.ddp_job.encoding", line=_line_of(text, error.start), char=ascii(text[error.start]))
    if "\0" in text:
        fail("ex.ddp_job.nul", line=_line_of(text, text.index("\0")))
    if "\r" in text:
        fail("ex.ddp_job.crlf", line=_line_of(text, text.index("\r")))


def _check_text(text):
    for number, line in code_lines(text):
        found = PLACEHOLDER.search(line)
        if found:
            fail("ex.ddp_job.placeholder", line=number, code=line.strip()[:70], name=found.group(0))
    return read_directives(text, typo="ex.ddp_job.typo", indented="ex.ddp_job.indented",
                           late="ex.ddp_job.late_directive")


def _launch(text):
    """(line number, srun line that starts the training, whether it runs torchrun), continuations joined: the
    training line the shape rules find (:func:`~.job_shape.training_line`: under srun), with no ``exit`` before it."""
    number, line = training_line(text)
    for command in walk(text):
        if command.line < number and command.words[0] == "exit" and command.depth == 0:
            fail("ex.ddp_job.exit_early", line=command.line, code=command.code.strip()[:60], srun=number)
    return number, line, bool(re.search(r"\btorchrun\b|torch\.distributed\.run", line))


def _check_allocation(options, torchrun):
    """The exercise's partition and its launch layout's tasks per node (one torchrun, or one task per GPU: a
    wrong layout is named as such, not by the cores it multiplies), then the shape rules both job exercises
    share (:func:`~.job_shape.check_shape`: the site table's rules), then the exercise's own numbers (2 nodes,
    every GPU of a node)."""
    profile = _profile()
    partition = options.get("partition")
    if not partition:
        fail("ex.ddp_job.no_partition", want=profile.partition)
    if partition != profile.partition:
        fail("ex.ddp_job.partition", got=partition or "—", want=profile.partition)
    shape = read_shape(options)
    want_tasks = 1 if torchrun else profile.gpus_per_node
    if shape.tasks_per_node != want_tasks:
        fail("ex.ddp_job.tasks_torchrun" if torchrun else "ex.ddp_job.tasks_per_gpu",
             got=shape.tasks_per_node if shape.tasks_per_node is not None else "—", want=want_tasks)
    check_shape(shape)
    if options.get("nodes") is None or shape.nodes != NODES:
        fail("ex.ddp_job.nodes", got=options.get("nodes") or "—", want=NODES)
    if shape.gpus_per_node is None:
        fail("ex.ddp_job.no_gpus", want=profile.gpus_per_node)
    if shape.gpus_per_node != profile.gpus_per_node:
        fail("ex.ddp_job.gpus", got=shape.gpus_per_node, want=profile.gpus_per_node, partition=profile.partition)
    output = options.get("output")
    if not output:
        fail("ex.ddp_job.no_output")
    folder = os.path.dirname(output)
    workdir = options.get("chdir") or "."
    if folder and not Path(workdir, folder).is_dir():
        fail("ex.ddp_job.log_folder", folder=folder, output=output)
    if "USR1" not in options.get("signal", ""):
        fail("ex.ddp_job.no_signal")


def _export(text, name):
    """The value of the script's first ``[export] name=…`` (comments left out), or None."""
    for _, line in code_lines(text):
        match = re.match(rf"^\s*(?:export\s+)?{name}=(.*)$", line)
        if match:
            return match.group(1).strip()
    return None


def _check_port(value):
    ports = [port_for(value.strip("'"), job_id) for job_id in JOB_IDS]
    if None in ports:
        if not any(name in value for name in JOB_ID_NAMES):
            fail("ex.ddp_job.port", value=value)
        if "%" not in value and not re.search(r"\btail\s+-c\s*[1-4]\b", value):  # what keeps it below 65536
            fail("ex.ddp_job.port_unknown", value=value, job=str(JOB_IDS[0]))
        return
    for job_id, port in zip(JOB_IDS, ports):
        if not 1024 < port < 65536:
            fail("ex.ddp_job.port_range", value=value, job=str(job_id), port=str(port))
    if len(set(ports)) == 1:
        fail("ex.ddp_job.port", value=value)


def _check_rendezvous(text):
    address = _export(text, "MASTER_ADDR")
    if address is None:
        fail("ex.ddp_job.no_addr")
    if not (re.search(r"scontrol\s+show\s+hostnames?", address) and "NODELIST" in address):
        fail("ex.ddp_job.addr", value=address)
    port = _export(text, "MASTER_PORT")
    if port is None:
        fail("ex.ddp_job.no_port")
    _check_port(port)


def _check_launch(text, line, torchrun):
    profile = _profile()
    if _export(text, "SRUN_CPUS_PER_TASK") is None and not re.search(r"--cpus-per-task|\s-c\s", line):
        fail("ex.ddp_job.srun_cpus")
    kill = re.search(r"--kill-on-bad-exit(?:=(\S*))?|\s-K(\S*)", line)
    if not kill:
        fail("ex.ddp_job.kill_on_bad_exit")
    if (kill.group(1) or kill.group(2) or "").strip("\"'") == "0":
        fail("ex.ddp_job.kill_on_bad_exit_off", option=kill.group(0).strip())
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


def _check_torchrun_signals(text, line):
    """torchrun passes on only the signals of its --signals-to-handle option (or PET_SIGNALS_TO_HANDLE); it
    sets TORCHELASTIC_SIGNALS_TO_HANDLE from that option itself, over whatever the job exported."""
    option = re.search(r"--signals[-_]to[-_]handle(?:=|\s+)(\S+)", line)
    given = option.group(1).strip("\"'") if option else _export(text, "PET_SIGNALS_TO_HANDLE")
    if given is not None and "SIGUSR1" in given.strip("\"'").split(","):
        return
    if given is None and ("TORCHELASTIC_SIGNALS_TO_HANDLE=" in line
                          or _export(text, "TORCHELASTIC_SIGNALS_TO_HANDLE") is not None):
        fail("ex.ddp_job.signals_variable", option=TORCHRUN_SIGNALS, default=_TORCHRUN_DEFAULT_SIGNALS)
    fail("ex.ddp_job.signals", got=(given or _TORCHRUN_DEFAULT_SIGNALS).strip("\"'"), option=TORCHRUN_SIGNALS)


_SEVENTY_FIVE = re.compile(r"(-eq|(?<![!<>=])==?)\s*[\"']?75\b|\b75[\"']?\s*(-eq|==?)")


def _only_on_75(condition):
    """Whether an if's condition (or a case branch's) holds only when a status is 75: an equality with 75, not
    negated (``!``), with no ``||`` beside it."""
    negated = re.search(r"(^|\s)!\s", condition)
    return bool(_SEVENTY_FIVE.search(condition)) and "||" not in condition and not negated


def _never(condition):
    """Whether an if's condition is written so that it is never true: ``false``, ``! true``, ``[ 0 -eq 1 ]``."""
    condition = condition.strip()
    if condition in ("false", "! true", "/bin/false", ":&&false"):
        return True
    compared = re.fullmatch(r"\[\[?\s*\"?(\d+)\"?\s*(-eq|==?)\s*\"?(\d+)\"?\s*\]\]?", condition)
    return bool(compared and int(compared.group(1)) != int(compared.group(3)))


def _check_preemption(text, number, line, options, torchrun):
    commands = walk(text)
    if torchrun:
        _check_torchrun_signals(text, line)
    to_batch = options.get("signal", "").startswith("B:")
    if to_batch:
        if not any(command.words[0] == "trap" and re.search(r"\b(SIG)?USR1\b|\b10\b", " ".join(command.words[1:]))
                   for command in commands):
            fail("ex.ddp_job.no_trap")
        if not line.rstrip().endswith("&"):
            fail("ex.ddp_job.foreground")
    waits = [command for command in commands if command.line >= number and command.words[0] == "wait"]
    if line.rstrip().endswith("&") and not waits:
        fail("ex.ddp_job.no_wait")
    if to_batch and len(waits) < 2 and not any(command.loops for command in waits):
        fail("ex.ddp_job.wait_once", line=waits[0].line)
    requeues = [command for command in commands
                if command.words[0] == "scontrol" and "requeue" in command.words[1:2]]
    if not requeues:
        fail("ex.ddp_job.no_requeue")
    blocked = []
    for requeue in requeues:
        same_line = re.search(r"([^;&|]*)&&\s*scontrol\s+requeue", requeue.code)
        guards = requeue.guards + ((same_line.group(1).strip(),) if same_line else ())
        never = [guard for guard in guards if _never(guard)]
        only_75 = [guard for guard in guards if torchrun and _only_on_75(guard)]
        if not never and not only_75:
            return  # a requeue that can fire
        blocked.append(("ex.ddp_job.requeue_never", requeue.line, never[0]) if never else
                       ("ex.ddp_job.requeue_75", requeue.line, only_75[0]))
    key, line_, condition = blocked[0]
    fail(key, line=line_, condition=condition)

def _bash_n(text):
    done = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        fail("ex.ddp_job.syntax", error=" ".join(done.stderr.strip().splitlines()[:2]))


def ask_slurm(text: str, partition: str) -> str:
    """What SLURM says of ``text``, as the grade's last part: ``sbatch --test-only``'s answer
    (:func:`ddp_tutorial.slurm.jobs.test_only`) where a SLURM answers and lists ``partition``; else why it was
    not asked (no SLURM here, no such partition here, no answer within the bound). A refusal fails the check
    with sbatch's own words. The job's partition is ``SBATCH_PARTITION`` where it is set, as for sbatch."""
    from ..i18n import TutorialError
    from ..slurm.jobs import run_command, test_only
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return t("ex.ddp_job.no_slurm")
    partition = os.environ.get("SBATCH_PARTITION") or partition
    command = ["sinfo", "-h", "-p", partition, "-o", "%P"]
    seconds = SINFO_SECONDS
    try:
        if not run_command(command, timeout=seconds).stdout.strip():
            return t("ex.ddp_job.no_partition_here", partition=partition)
        with tempfile.NamedTemporaryFile("w", suffix=".sbatch", delete=False) as handle:
            handle.write(text)
        command, seconds = ["sbatch", "--test-only"], SBATCH_SECONDS
        try:
            said = test_only(handle.name, timeout=seconds)
        finally:
            os.unlink(handle.name)
    except TutorialError as error:
        detail = str(error.fields.get("detail", ""))
        if error.key == "slurm.command_timeout" or any(words in detail for words in _SILENT):
            return t("ex.ddp_job.slurm_silent", command=" ".join(command[:2]) if command[0] == "sbatch" else command[0],
                     seconds=seconds)
        if error.key != "slurm.command_failed" or any(words in detail for words in _NO_SLURM):
            return t("ex.ddp_job.no_slurm")
        if command[0] == "sinfo":
            return t("ex.ddp_job.not_asked", command="sinfo", detail=detail)
        fail("ex.ddp_job.sbatch_refused", error=detail)
    return t("ex.ddp_job.accepted", answer=said.splitlines()[-1] if said else "ok")


def _grade(text):
    if not isinstance(text, str):
        fail("ex.ddp_job.type", got=type(text).__name__)
    if text.strip() == SKELETON.strip():
        raise NotDone()
    _check_bytes(text)
    options = _check_text(text)
    number, line, torchrun = _launch(text)
    _check_allocation(options, torchrun)
    _check_rendezvous(text)
    _check_launch(text, line, torchrun)
    _check_preemption(text, number, line, options, torchrun)
    _bash_n(text)
    sbatch = ask_slurm(text, options["partition"])
    layout = t("ex.ddp_job.torchrun" if torchrun else "ex.ddp_job.per_gpu")
    return {"layout": layout, "sbatch": sbatch}


_SOLUTION = r'''
from pathlib import Path

# ⟪SLURM günlük klasörünü kendisi açmaz:
# yoksa iş günlüksüz ölür‖SLURM does not create the log folder:
# without it the job dies with no log⟫
Path("runs").mkdir(exist_ok=True)
# ⟪#SBATCH: 2 düğüm × @GPUS@ GPU, düğüm başına bir torchrun,
# GPU başına @PER_GPU@ CPU çekirdeği (@PARTITION@: @CORES@/@GPUS@);
# USR1, süre dolmadan 300 s önce betiğe (B:) gelir.
# Sonra: MASTER_ADDR düğüm listesinden, port iş numarasından, srun CPU çekirdeklerini bilsin,
# bir rank ölünce iş bitsin (--kill-on-bad-exit), c10d buluşması; torchrun USR1'i işçilerine iletsin
# (--signals-to-handle: torchrun 2.14 TORCHELASTIC_SIGNALS_TO_HANDLE değişkenini bu seçenekle ezer);
# srun arka planda (&), tuzak (trap) USR1'i ona iletir, wait srun bitene dek bekler
# ve iş yeniden kuyruğa girer.‖#SBATCH: 2 nodes × @GPUS@ GPUs, one torchrun per node,
# @PER_GPU@ cores per GPU (@PARTITION@: @CORES@/@GPUS@);
# USR1 reaches the script (B:) 300 s before the time limit.
# Then: MASTER_ADDR from the node list, the port from the job id, srun told the cores,
# one dead rank ends the job (--kill-on-bad-exit), c10d rendezvous; torchrun passes USR1 on to its workers
# (--signals-to-handle: torchrun 2.14 overwrites TORCHELASTIC_SIGNALS_TO_HANDLE from this option);
# srun in the background (&), the trap passes USR1 on to it, wait waits until srun has ended
# and the job requeues itself.⟫
ddp_job = """#!/bin/bash
#SBATCH --job-name=ddp-own
#SBATCH --partition=@PARTITION@
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:@GPUS@
#SBATCH --cpus-per-task=@CORES@
#SBATCH --time=00:30:00
#SBATCH --output=runs/%x-%j.out
#SBATCH --signal=B:USR1@300
source "$HOME/ddp-tutorial/.venv/bin/activate"

export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=$((15000 + SLURM_JOB_ID % 15000))
export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK
export OMP_NUM_THREADS=@PER_GPU@

srun --kill-on-bad-exit=1 python -m torch.distributed.run \\
    --nnodes "$SLURM_NNODES" --nproc-per-node @GPUS@ \\
    --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv-id "$SLURM_JOB_ID" \\
    --signals-to-handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1 \\
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


def _solution() -> str:
    """The solution with the numbers of the exercise's partition: every GPU of a node, its cores per GPU."""
    p = _profile()
    return (_SOLUTION.replace("@PARTITION@", p.partition).replace("@GPUS@", str(p.gpus_per_node))
            .replace("@PER_GPU@", str(p.cpus_per_gpu)).replace("@CORES@", str(p.gpus_per_node * p.cpus_per_gpu)))


SOLUTION = _solution()


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
