"""Step 1 of the story — who am I? Rank, local rank, world size, and where we all meet.

Every training process needs five facts before it can join the others:

* ``rank`` — its number among all training processes (0 … world_size − 1);
* ``world_size`` — how many training processes there are in total;
* ``local_rank`` — its number on this machine, which picks the GPU (``cuda:local_rank``, or
  ``cuda:0`` when SLURM shows each task only its own GPU: :func:`device_for`);
* ``MASTER_ADDR`` / ``MASTER_PORT`` — where rank 0 listens, so that all can meet
  ("rendezvous") and form the *process group* that the collectives (all-reduce …) use.

Who tells a process these facts depends on how it was started. :func:`resolve_environment`
reads them, in this order:

1. explicit arguments (ipyparallel engines, tests);
2. the per-node parent of :mod:`ddp_tutorial.spawn` (the seed's scheme): the parent passes
   ``local_rank`` and ``nproc_per_node``; the node number and node count come from
   ``--node-rank``/``--nnodes`` or SLURM's ``SLURM_PROCID``/``SLURM_NPROCS`` (one SLURM task per
   node), and ``rank = local_rank + node_rank × nproc_per_node``;
3. torchrun: ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` (and ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``);
4. SLURM with one task per device (``srun`` starts every training process):
   ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``, ``SLURM_NODEID``;
5. none of these: a single process (world size 1).

``MASTER_ADDR`` defaults to the first host of ``SLURM_JOB_NODELIST``. ``MASTER_PORT``, when
unset inside a SLURM job, is derived from the job id — ``15000 + SLURM_JOB_ID % 15000`` — so
two jobs that share a node use different ports unless their ids differ by a multiple of
15 000 (and the range 15000–29999 stays below Linux's ephemeral ports, 32768 and up, which
the kernel hands out for outgoing connections). On one machine the launcher picks a free port.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import asdict, dataclass
from typing import Mapping, Optional

from . import launch_env
from .hostlist import first_host
from .i18n import TutorialError, t


PORT_BASE = 15000
PORT_SPAN = 15000
WHOLE_NUMBER = re.compile(r"\s*-?[0-9]{1,18}\s*", re.ASCII)  # what SLURM and torchrun write
MAX_SPEC_CHARS = 4096  # SLURM_TASKS_PER_NODE longer than this is not SLURM's


@dataclass(frozen=True)
class DistEnv:
    """Where this process stands among all training processes."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    master_addr: str
    master_port: int
    scheme: str  # explicit | spawn | torchrun | slurm | single

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def init_method(self) -> str:
        """Where rank 0 listens, as ``init_process_group(init_method=…)`` takes it: ``tcp://host:port``."""
        host = self.master_addr
        host = f"[{host}]" if ":" in host and not host.startswith("[") else host  # an IPv6 address
        return f"tcp://{host}:{self.master_port}"

    def as_dict(self) -> dict:
        return asdict(self)


def env_int(environ: Mapping[str, str], name: str) -> Optional[int]:
    """An integer environment variable; None when unset or empty; our message when it is not a number."""
    value = environ.get(name)
    if value is None or value == "":
        return None
    if not WHOLE_NUMBER.fullmatch(value):  # int() would also take "2_9_5" and other scripts' digits
        raise TutorialError("env.not_integer", name=name, value=value)
    return int(value.strip())


def _require(environ: Mapping[str, str], launcher: str, names) -> dict:
    present = [n for n in names if environ.get(n, "") != ""]
    missing = [n for n in names if environ.get(n, "") == ""]
    if missing:
        raise TutorialError("env.incomplete", launcher=launcher, present=", ".join(present),
                            missing=", ".join(missing))
    return {n: env_int(environ, n) for n in names}


def _tasks_on_node(spec: str, node: int) -> Optional[int]:
    """SLURM_TASKS_PER_NODE looks like '2(x3),1': 2 tasks on each of 3 nodes, then 1. Walked, not
    expanded: a hostile '1(x999999999999)' costs nothing."""
    if len(spec) > MAX_SPEC_CHARS:
        return None
    first = 0  # the number of the first node this part describes
    for part in spec.split(","):
        match = re.fullmatch(r"(\d{1,9})(?:\(x(\d{1,15})\))?", part.strip())
        if not match:
            return None
        repeat = int(match.group(2) or 1)
        if first <= node < first + repeat:
            return int(match.group(1))
        first += repeat
    return None


# The words and details put into env.rank_range / env.disagree, in both languages (the Turkish
# messages used to carry English words; found by tests/test_bad_input.py).


def _check_range(what: str, value: int, of: str, size: int) -> None:
    """``what`` and ``of`` are the message keys of the two terms (env.term_*)."""
    if not 0 <= value < size:
        raise TutorialError("env.rank_range", what=t(what), value=value, limit=size - 1, of=t(of), size=size)


def _slurm_task(environ: Mapping[str, str]) -> bool:
    """Started by srun as one task of several (SLURM_PROCID and SLURM_LOCALID), or a half-set SLURM
    environment that must not pass for a single process (SLURM_PROCID > 0 or SLURM_NTASKS > 1)."""
    if environ.get(launch_env.SLURM_PROCID, "") == "":
        return False
    if environ.get(launch_env.SLURM_LOCALID, "") != "":
        return True
    return (env_int(environ, launch_env.SLURM_PROCID) or 0) > 0 or (env_int(environ, launch_env.SLURM_NTASKS) or 1) > 1


def derive_port(job_id: int) -> int:
    """MASTER_PORT for a SLURM job: 15000 + job id mod 15000."""
    return PORT_BASE + job_id % PORT_SPAN


def find_free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _master(environ: Mapping[str, str], world_size: int, master_addr: Optional[str],
            master_port: Optional[int]) -> tuple:
    addr = master_addr or environ.get(launch_env.MASTER_ADDR) or ""
    if not addr:
        nodelist = environ.get(launch_env.SLURM_JOB_NODELIST) or environ.get(launch_env.SLURM_NODELIST)
        addr = first_host(nodelist) if nodelist else "127.0.0.1"
    port = master_port
    if port is None and environ.get(launch_env.MASTER_PORT, "") != "":
        raw = environ[launch_env.MASTER_PORT]
        if not WHOLE_NUMBER.fullmatch(raw):
            raise TutorialError("env.bad_port", value=raw)
        port = int(raw)
    if port is None:
        job_id = env_int(environ, launch_env.SLURM_JOB_ID)
        if job_id is not None:
            port = derive_port(job_id)
        elif world_size == 1:
            port = find_free_port()
        else:
            raise TutorialError("env.no_port")
    if not 1 <= port <= 65535:
        raise TutorialError("env.bad_port", value=str(port))
    return addr, port


# ----------------------------------------------------------------------------------------------
# The launchers, one small detector each: ``detect`` says whether this process was started by it,
# ``read`` returns where the process stands as (rank, world size, local rank, processes on this
# node, node rank, nodes). They are asked in the order of LAUNCHERS; the first that detects wins.

@dataclass(frozen=True)
class Given:
    """What the caller passed by hand (ipyparallel engines, the per-node parent, tests)."""

    rank: Optional[int] = None
    world_size: Optional[int] = None
    local_rank: Optional[int] = None
    nproc_per_node: Optional[int] = None
    node_rank: Optional[int] = None
    num_nodes: Optional[int] = None


def _nodes_for(world_size: int, per_node: int) -> int:
    return max(1, -(-world_size // per_node)) if world_size > 0 and per_node > 0 else 1


class Explicit:
    """1. Everything given as arguments."""

    scheme = "explicit"

    @staticmethod
    def detect(environ: Mapping[str, str], given: Given) -> bool:
        return given.rank is not None or given.world_size is not None

    @staticmethod
    def read(environ: Mapping[str, str], given: Given) -> tuple:
        if given.rank is None or given.world_size is None:
            raise TypeError("give both rank and world_size, or neither")
        per_node = given.nproc_per_node or given.world_size
        local_rank = given.rank % per_node if given.local_rank is None else given.local_rank
        node = given.rank // per_node if given.node_rank is None else given.node_rank
        return given.rank, given.world_size, local_rank, per_node, node, given.num_nodes or _nodes_for(
            given.world_size, per_node)


class PerNodeParent:
    """2. The seed's per-node parent (:mod:`ddp_tutorial.spawn`): it passes ``local_rank`` and
    ``nproc_per_node``; the node comes from ``--node-rank``/``--nnodes`` or one SLURM task per node."""

    scheme = "spawn"

    @staticmethod
    def detect(environ: Mapping[str, str], given: Given) -> bool:
        return given.local_rank is not None and given.nproc_per_node is not None

    @staticmethod
    def read(environ: Mapping[str, str], given: Given) -> tuple:
        node, nodes = given.node_rank, given.num_nodes
        if node is None and nodes is None and environ.get(launch_env.SLURM_PROCID, "") != "":
            node, nodes = _slurm_node_of_parent(environ)
        node, nodes = (0 if node is None else node), (1 if nodes is None else nodes)
        if nodes < 1:
            raise TutorialError("env.world_size", world_size=given.nproc_per_node * nodes)
        _check_range("env.term_node_rank", node, "env.term_nodes", nodes)
        rank = given.local_rank + node * given.nproc_per_node
        return rank, given.nproc_per_node * nodes, given.local_rank, given.nproc_per_node, node, nodes


def _slurm_node_of_parent(environ: Mapping[str, str]) -> tuple:
    """One SLURM task per node runs the per-node parent: its task number is its node."""
    slurm = _require(environ, "SLURM", [launch_env.SLURM_PROCID, launch_env.SLURM_NPROCS])
    _agree(environ, slurm[launch_env.SLURM_NPROCS])
    return slurm[launch_env.SLURM_PROCID], slurm[launch_env.SLURM_NPROCS]


def _agree(environ: Mapping[str, str], nprocs: int) -> None:
    """SLURM_NTASKS and SLURM_NPROCS, where both are set, say the same."""
    ntasks = env_int(environ, launch_env.SLURM_NTASKS)
    if ntasks is not None and ntasks != nprocs:
        raise TutorialError("env.disagree", detail=t("env.detail.but", a=f"SLURM_NTASKS={ntasks}",
                                                     b=f"SLURM_NPROCS={nprocs}"))


class Torchrun:
    """3. torchrun: ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` (and ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``)."""

    scheme = "torchrun"
    NAMES = (launch_env.RANK, launch_env.WORLD_SIZE, launch_env.LOCAL_RANK)

    @classmethod
    def detect(cls, environ: Mapping[str, str], given: Given) -> bool:
        return any(environ.get(name, "") != "" for name in cls.NAMES)

    @classmethod
    def read(cls, environ: Mapping[str, str], given: Given) -> tuple:
        values = _require(environ, "torchrun", list(cls.NAMES))
        rank, world_size, local_rank = (values[name] for name in cls.NAMES)
        per_node = env_int(environ, launch_env.LOCAL_WORLD_SIZE)
        if per_node is not None and per_node < 1:
            raise TutorialError("env.not_a_count", name=launch_env.LOCAL_WORLD_SIZE, value=per_node)
        per_node = per_node or world_size
        node = env_int(environ, launch_env.GROUP_RANK)
        node = rank // per_node if node is None and per_node > 0 else (node or 0)
        return rank, world_size, local_rank, per_node, node, _nodes_for(world_size, per_node)


class Slurm:
    """4. srun starts every training process, one task per device: ``SLURM_PROCID``, ``SLURM_NTASKS``,
    ``SLURM_LOCALID``, ``SLURM_NODEID``; the tasks on this node from ``SLURM_TASKS_PER_NODE``."""

    scheme = "slurm"
    NAMES = (launch_env.SLURM_PROCID, launch_env.SLURM_NTASKS, launch_env.SLURM_LOCALID)

    @staticmethod
    def detect(environ: Mapping[str, str], given: Given) -> bool:
        return _slurm_task(environ)

    @classmethod
    def read(cls, environ: Mapping[str, str], given: Given) -> tuple:
        rank, world_size, local_rank = (_require(environ, "SLURM", list(cls.NAMES))[name] for name in cls.NAMES)
        nprocs = env_int(environ, launch_env.SLURM_NPROCS)
        if nprocs is not None and nprocs != world_size:
            raise TutorialError("env.disagree", detail=t("env.detail.but", a=f"SLURM_NTASKS={world_size}",
                                                         b=f"SLURM_NPROCS={nprocs}"))
        node = env_int(environ, launch_env.SLURM_NODEID) or 0
        nodes = next((n for n in map(lambda name: env_int(environ, name), SLURM_NODE_COUNTS) if n), 1)
        _check_range("env.term_node_rank", node, "env.term_nodes", nodes)
        spec = environ.get(launch_env.SLURM_STEP_TASKS_PER_NODE) or environ.get(launch_env.SLURM_TASKS_PER_NODE) or ""
        per_node = _tasks_on_node(spec, node) or max(1, -(-world_size // nodes))
        return rank, world_size, local_rank, per_node, node, nodes


# Where SLURM writes the number of nodes: the step's, else the job's (two spellings).
SLURM_NODE_COUNTS = (launch_env.SLURM_STEP_NUM_NODES, launch_env.SLURM_JOB_NUM_NODES, launch_env.SLURM_NNODES)


class Single:
    """5. None of these: one process, world size 1."""

    scheme = "single"

    @staticmethod
    def detect(environ: Mapping[str, str], given: Given) -> bool:
        return True

    @staticmethod
    def read(environ: Mapping[str, str], given: Given) -> tuple:
        return 0, 1, 0, 1, 0, 1


LAUNCHERS = (Explicit, PerNodeParent, Torchrun, Slurm, Single)


def _check_placement(rank: int, world_size: int, local_rank: int, per_node: int) -> None:
    """What every launcher's numbers must satisfy, whoever wrote them."""
    if world_size < 1:
        raise TutorialError("env.world_size", world_size=world_size)
    _check_range("env.term_rank", rank, "env.term_world_size", world_size)
    if per_node < 1:
        raise TutorialError("env.world_size", world_size=per_node)
    _check_range("env.term_local_rank", local_rank, "env.term_per_node", per_node)
    if per_node > world_size:
        raise TutorialError("env.disagree", detail=t("env.detail.per_node", per_node=per_node,
                                                     world_size=world_size))


def _started_without_srun(environ: Mapping[str, str], launcher, given: Given, world_size: int,
                          num_nodes: int) -> bool:
    """The job's batch script ran this process itself where SLURM's tasks were meant (a forgotten ``srun``):
    the batch step has ``SLURM_JOB_ID`` and the job's ``SLURM_NTASKS``, with ``SLURM_PROCID`` 0, but no
    ``SLURM_STEP_ID`` (srun sets it in every step). Read as rank 0 of them all, the process would wait for
    the others until the job's time limit."""
    if environ.get(launch_env.SLURM_JOB_ID, "") == "" or environ.get(launch_env.SLURM_PROCID, "") != "0":
        return False
    if environ.get(launch_env.SLURM_STEP_ID, "") != "" or environ.get(launch_env.SLURM_STEPID, "") != "":
        return False
    if launcher is Slurm:
        return world_size > 1
    if launcher is PerNodeParent:  # node and node count taken from SLURM's tasks (not given)
        return given.node_rank is None and given.num_nodes is None and num_nodes > 1
    return False


def resolve_environment(rank: Optional[int] = None, world_size: Optional[int] = None,
                        local_rank: Optional[int] = None, nproc_per_node: Optional[int] = None,
                        node_rank: Optional[int] = None, num_nodes: Optional[int] = None,
                        master_addr: Optional[str] = None, master_port: Optional[int] = None,
                        environ: Optional[Mapping[str, str]] = None) -> DistEnv:
    """Rank, local rank, world size, node and master address/port of this process (see module doc)."""
    environ = os.environ if environ is None else environ
    given = Given(rank, world_size, local_rank, nproc_per_node, node_rank, num_nodes)
    launcher = next(launcher for launcher in LAUNCHERS if launcher.detect(environ, given))
    rank, world_size, local_rank, per_node, node_rank, num_nodes = launcher.read(environ, given)
    _check_placement(rank, world_size, local_rank, per_node)
    addr, port = _master(environ, world_size, master_addr, master_port)
    if _started_without_srun(environ, launcher, given, world_size, num_nodes):
        tasks = env_int(environ, launch_env.SLURM_NTASKS) or env_int(environ, launch_env.SLURM_NPROCS)
        raise TutorialError("env.no_srun", tasks=tasks, nodes=num_nodes)
    return DistEnv(rank=rank, local_rank=local_rank, world_size=world_size, local_world_size=per_node,
                   node_rank=node_rank, num_nodes=num_nodes, master_addr=addr, master_port=port,
                   scheme=launcher.scheme)
