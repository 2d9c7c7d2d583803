"""The shape of a job script and the rules it must keep, for both job exercises of notebook 05 (``fixed_sbatch``:
the seed's script repaired; ``ddp_job``: the attendee's own): one set of rules, so that the two checks cannot
disagree on a job.

:func:`read_shape` reads the numbers of the #SBATCH lines (nodes, tasks, GPUs per node, cores per task, time) as
sbatch reads them; :func:`check_shape` holds them to the job's own arithmetic (``--ntasks`` = nodes × tasks per
node) and to the written rules of its partition in the session's site table (:meth:`ddp_tutorial.sites.Site.check_job`:
the GPUs, cores and nodes a partition has, cores per GPU, GPU-only, the time limit); :func:`training_line` finds
the command that starts the training and requires srun before it (a batch script runs on the first node of its
allocation only). Each broken rule fails with its own message, ``ex.job_shape.<rule>``, in both exercises.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional, Tuple

from .core import fail
from .shell import walk

#: The message of each rule of the site table (``Violation.rule``), said of a job's #SBATCH lines.
RULE_KEYS = {"gpus_per_node": "ex.job_shape.gpus_per_node", "nodes": "ex.job_shape.nodes",
             "cores_per_node": "ex.job_shape.cores_per_node", "cores_per_gpu": "ex.job_shape.cores_per_gpu",
             "min_cores": "ex.job_shape.min_cores", "gpu_only": "ex.job_shape.gpu_only",
             "max_time": "ex.job_shape.max_time"}


@dataclass(frozen=True)
class Shape:
    """What a job's #SBATCH lines ask for; ``None`` where the line is missing (SLURM's default then applies)."""

    partition: Optional[str]
    nodes: int                      # --nodes (default 1)
    tasks_per_node: Optional[int]   # --ntasks-per-node
    tasks: Optional[int]            # --ntasks
    gpus_per_node: Optional[int]    # --gres=gpu[:type][:N] or --gpus-per-node
    cpus_per_task: Optional[int]    # --cpus-per-task (default 1)
    time: Optional[str]             # --time

    @property
    def node_tasks(self) -> int:
        """The tasks on one node: --ntasks-per-node, else --ntasks spread over the nodes, else 1."""
        if self.tasks_per_node is not None:
            return self.tasks_per_node
        return math.ceil(self.tasks / self.nodes) if self.tasks is not None else 1

    @property
    def cores_per_node(self) -> int:
        return (self.cpus_per_task or 1) * self.node_tasks


def _count(options, name):
    value = options.get(name)
    if value is None or value == "":
        return None
    if not re.fullmatch(r"\d+", value):
        fail("ex.job_shape.number", option=name, value=value)
    if int(value) < 1:
        fail("ex.job_shape.zero", option=name, value=value)
    return int(value)


def _gpus(options):
    """GPUs per node: ``--gpus-per-node=N``, or ``--gres=gpu:N`` / ``gpu:TYPE:N`` / ``gpu`` (one) as SLURM reads it."""
    if options.get("gpus-per-node"):
        return _count(options, "gpus-per-node")
    gres = options.get("gres")
    if not gres:
        return None
    match = re.fullmatch(r"gpu(?::[A-Za-z][\w.-]*)?(?::(\d+))?", gres)
    if not match:
        fail("ex.job_shape.number", option="gres", value=gres)
    return int(match.group(1) or 1)


def read_shape(options) -> Shape:
    """The :class:`Shape` of ``options`` (``{option: value}`` of the #SBATCH lines sbatch reads); a count that is
    not a number, or zero, fails."""
    return Shape(partition=options.get("partition") or None, nodes=_count(options, "nodes") or 1,
                 tasks_per_node=_count(options, "ntasks-per-node"), tasks=_count(options, "ntasks"),
                 gpus_per_node=_gpus(options), cpus_per_task=_count(options, "cpus-per-task"),
                 time=options.get("time") or None)


def check_shape(shape: Shape) -> None:
    """Fail on the first rule ``shape`` breaks: its task counts disagree, or its partition's written rules (the
    session's site table) refuse it. A partition the table does not know has no written rules here; a time sbatch
    cannot read is left to sbatch."""
    from .. import sites
    from ..slurm.rules import TIME
    per_node = shape.tasks_per_node
    if shape.tasks is not None and per_node is not None and shape.tasks != shape.nodes * per_node:
        fail("ex.job_shape.ntasks", tasks=shape.tasks, nodes=shape.nodes, per_node=per_node,
             product=shape.nodes * per_node)
    site = sites.site_for(shape.partition) if shape.partition else None
    if site is None:
        return
    time = shape.time if shape.time and TIME.fullmatch(shape.time) else None
    broken = site.check_job(shape.partition, nodes=shape.nodes, gpus_per_node=shape.gpus_per_node or 0,
                            cores_per_node=shape.cores_per_node, time=time)
    if not broken:
        return
    rule, tasks, gpus = broken[0], shape.node_tasks, shape.gpus_per_node or 0
    cores = site.partitions[shape.partition].cores_per_node
    fields = dict(rule.fields, cpus=shape.cpus_per_task or 1, tasks=tasks, gpus=gpus, nodes=shape.nodes,
                  most=cores // tasks if cores else "—")
    if rule.rule == "cores_per_gpu":  # the --cpus-per-task that gives every GPU of a task its cores
        fields["need"] = math.ceil(rule.limit * gpus / tasks)
        if shape.cpus_per_task is None:
            fail("ex.job_shape.no_cpus", **fields)
    if rule.rule == "min_cores":
        fields["need"] = math.ceil(rule.limit / (shape.nodes * tasks))
    fail(RULE_KEYS[rule.rule], **fields)


_PROGRAM = re.compile(r"(?:^|/)(?:python[\d.]*|torchrun|\$\{?PYTHON\}?)$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")


def _program_at(words) -> Optional[int]:
    """Where ``words`` run python (with a script or ``-m``) or torchrun: the index of that word, else ``None``."""
    for index, word in enumerate(words):
        if _PROGRAM.search(word.strip("\"'")):
            rest = words[index + 1:]
            if word.strip("\"'").endswith("torchrun") or (rest and rest[0] not in ("-c", "-V", "--version")):
                return index
    return None


def training_line(text) -> Tuple[int, str]:
    """(line number, code line) of the command that starts the training: the script's last command that runs
    python (a script, or ``-m``) or torchrun, directly or through srun. It must run under srun: a batch script
    runs on the first node of its allocation, and only srun starts a program on every node of it."""
    found = None
    for command in walk(text):
        words = list(command.words)
        while words and (_ASSIGNMENT.match(words[0]) or words[0] == "exec"):
            words.pop(0)
        if not words:
            continue
        if words[0] == "srun" and _program_at(words[1:]) is not None:
            found = (command, True)
        elif _program_at(words) == 0:
            found = (command, False)
    if found is None:
        fail("ex.job_shape.no_training")
    command, under_srun = found
    if not under_srun:
        fail("ex.job_shape.no_srun", line=command.line, code=" ".join(command.code.split())[:80])
    return command.line, command.code.strip()
