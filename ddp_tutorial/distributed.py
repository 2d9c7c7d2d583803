"""Step 4 — the process group: who am I, how many are we, where do we meet?

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

import contextlib
import datetime
import os
import re
import shutil
import socket
import sys
from dataclasses import asdict, dataclass
from typing import Mapping, Optional

import torch
import torch.distributed as dist

from . import launch_env
from .exits import LOST_PEER
from .failures import WATCHDOG_LINE, classify_failure  # noqa: F401 (re-exported)
from .hostlist import first_host
from .i18n import TutorialError, t


PORT_BASE = 15000
PORT_SPAN = 15000

# Exit code of a rank that stopped only because *another* rank failed (its collective broke or
# timed out). Launchers use it to name the rank that failed first, not its victims.
EXIT_LOST_PEER = LOST_PEER  # ddp_tutorial.exits: one table of exit codes


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

    def as_dict(self) -> dict:
        return asdict(self)


def _int(environ: Mapping[str, str], name: str) -> Optional[int]:
    value = environ.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value.strip())
    except ValueError:
        raise TutorialError("env.not_integer", name=name, value=value) from None


def _require(environ: Mapping[str, str], launcher: str, names) -> dict:
    present = [n for n in names if environ.get(n, "") != ""]
    missing = [n for n in names if environ.get(n, "") == ""]
    if missing:
        raise TutorialError("env.incomplete", launcher=launcher, present=", ".join(present),
                            missing=", ".join(missing))
    return {n: _int(environ, n) for n in names}


def _tasks_on_node(spec: str, node: int) -> Optional[int]:
    """SLURM_TASKS_PER_NODE looks like '2(x3),1': 2 tasks on each of 3 nodes, then 1."""
    counts = []
    for part in spec.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            return None
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts[node] if 0 <= node < len(counts) else None


# The words and details put into env.rank_range / env.disagree, in both languages (the Turkish
# messages used to carry English words; found by tests/test_bad_input.py).


def _check_range(what: str, value: int, of: str, size: int) -> None:
    if not 0 <= value < size:
        raise TutorialError("env.rank_range", what=t("env.term." + what), value=value, limit=size - 1,
                            of=t("env.term." + of), size=size)


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
        try:
            port = int(raw)
        except ValueError:
            raise TutorialError("env.bad_port", value=raw) from None
    if port is None:
        job_id = _int(environ, launch_env.SLURM_JOB_ID)
        if job_id is not None:
            port = derive_port(job_id)
        elif world_size == 1:
            port = find_free_port()
        else:
            raise TutorialError("env.no_port")
    if not 1 <= port <= 65535:
        raise TutorialError("env.bad_port", value=str(port))
    return addr, port


def resolve_environment(rank: Optional[int] = None, world_size: Optional[int] = None,
                        local_rank: Optional[int] = None, nproc_per_node: Optional[int] = None,
                        node_rank: Optional[int] = None, num_nodes: Optional[int] = None,
                        master_addr: Optional[str] = None, master_port: Optional[int] = None,
                        environ: Optional[Mapping[str, str]] = None) -> DistEnv:
    """Rank, local rank, world size, node and master address/port of this process (see module doc)."""
    environ = os.environ if environ is None else environ

    if rank is not None or world_size is not None:  # 1. explicit
        if rank is None or world_size is None:
            raise TypeError("give both rank and world_size, or neither")
        scheme = "explicit"
        local_world_size = nproc_per_node or world_size
        local_rank = rank % local_world_size if local_rank is None else local_rank
        num_nodes = num_nodes or max(1, -(-world_size // local_world_size))
        node_rank = rank // local_world_size if node_rank is None else node_rank
    elif local_rank is not None and nproc_per_node is not None:  # 2. the seed's per-node parent
        scheme = "spawn"
        if node_rank is None and num_nodes is None and environ.get(launch_env.SLURM_PROCID, "") != "":
            slurm = _require(environ, "SLURM", [launch_env.SLURM_PROCID, launch_env.SLURM_NPROCS])
            ntasks = _int(environ, launch_env.SLURM_NTASKS)
            if ntasks is not None and ntasks != slurm[launch_env.SLURM_NPROCS]:
                raise TutorialError("env.disagree", detail=t("env.detail.but", a=f"SLURM_NTASKS={ntasks}",
                                                             b=f"SLURM_NPROCS={slurm['SLURM_NPROCS']}"))
            node_rank, num_nodes = slurm[launch_env.SLURM_PROCID], slurm[launch_env.SLURM_NPROCS]
        node_rank = 0 if node_rank is None else node_rank
        num_nodes = 1 if num_nodes is None else num_nodes
        local_world_size = nproc_per_node
        world_size = nproc_per_node * num_nodes
        if num_nodes < 1:
            raise TutorialError("env.world_size", world_size=world_size)
        _check_range("node rank", node_rank, "the number of nodes", num_nodes)
        rank = local_rank + node_rank * nproc_per_node
    elif any(environ.get(n, "") != "" for n in (launch_env.RANK, launch_env.WORLD_SIZE,
                                                 launch_env.LOCAL_RANK)):  # 3. torchrun
        scheme = "torchrun"
        values = _require(environ, "torchrun", [launch_env.RANK, launch_env.WORLD_SIZE, launch_env.LOCAL_RANK])
        rank, world_size = values[launch_env.RANK], values[launch_env.WORLD_SIZE]
        local_rank = values[launch_env.LOCAL_RANK]
        local_world_size = _int(environ, launch_env.LOCAL_WORLD_SIZE) or world_size
        num_nodes = max(1, -(-world_size // local_world_size)) if world_size > 0 else 1
        node_rank = _int(environ, launch_env.GROUP_RANK)
        node_rank = rank // local_world_size if node_rank is None and local_world_size > 0 else (node_rank or 0)
    elif environ.get(launch_env.SLURM_PROCID, "") != "" and environ.get(launch_env.SLURM_LOCALID, "") != "":  # 4. SLURM
        scheme = "slurm"
        values = _require(environ, "SLURM",
                          [launch_env.SLURM_PROCID, launch_env.SLURM_NTASKS, launch_env.SLURM_LOCALID])
        rank, world_size = values[launch_env.SLURM_PROCID], values[launch_env.SLURM_NTASKS]
        local_rank = values[launch_env.SLURM_LOCALID]
        nprocs = _int(environ, launch_env.SLURM_NPROCS)
        if nprocs is not None and nprocs != world_size:
            raise TutorialError("env.disagree", detail=t("env.detail.but", a=f"SLURM_NTASKS={world_size}",
                                                         b=f"SLURM_NPROCS={nprocs}"))
        node_rank = _int(environ, launch_env.SLURM_NODEID) or 0
        num_nodes = _int(environ, launch_env.SLURM_STEP_NUM_NODES) or _int(environ, launch_env.SLURM_JOB_NUM_NODES) \
            or _int(environ, launch_env.SLURM_NNODES) or 1
        spec = environ.get(launch_env.SLURM_STEP_TASKS_PER_NODE) or environ.get(launch_env.SLURM_TASKS_PER_NODE) or ""
        local_world_size = _tasks_on_node(spec, node_rank) or max(1, -(-world_size // num_nodes))
    else:  # 5. one process
        scheme = "single"
        rank, world_size, local_rank, local_world_size, node_rank, num_nodes = 0, 1, 0, 1, 0, 1

    if world_size < 1:
        raise TutorialError("env.world_size", world_size=world_size)
    _check_range("rank", rank, "world size", world_size)
    if local_world_size < 1:
        raise TutorialError("env.world_size", world_size=local_world_size)
    _check_range("local rank", local_rank, "processes on this node", local_world_size)
    if local_world_size > world_size:
        raise TutorialError("env.disagree", detail=t("env.detail.per_node", per_node=local_world_size,
                                                     world_size=world_size))
    addr, port = _master(environ, world_size, master_addr, master_port)
    return DistEnv(rank=rank, local_rank=local_rank, world_size=world_size, local_world_size=local_world_size,
                   node_rank=node_rank, num_nodes=num_nodes, master_addr=addr, master_port=port, scheme=scheme)


# --------------------------------------------------------------------------------------
# Device and backend: one rule for every launcher

BINDING_VARIABLE = "DDP_TUTORIAL_GPU_BINDING"  # task | shared: overrides the guess of binding_of()


def binding_of(env: DistEnv, environ: Optional[Mapping[str, str]] = None) -> str:
    """How this node's GPUs are shown to its training processes.

    ``task``: every process has its own view (``srun`` starts each one, and SLURM may bind one GPU
    to each task with ``--gpus-per-task=1`` / ``--gpu-bind``: each then sees *its* GPU as device 0).
    ``shared``: all processes of the node see the same GPUs (the per-node parent of
    :mod:`ddp_tutorial.spawn`, torchrun, local ipyparallel engines): each takes ``cuda:local_rank``.
    ``DDP_TUTORIAL_GPU_BINDING=task|shared`` overrides the guess (a wrapper script that sets
    ``CUDA_VISIBLE_DEVICES`` per process is ``task``).
    """
    environ = os.environ if environ is None else environ
    forced = environ.get(BINDING_VARIABLE, "").strip().lower()
    if forced in ("task", "shared"):
        return forced
    if env.scheme == "slurm":  # srun started this process itself
        return "task"
    if env.scheme == "explicit" and environ.get(launch_env.SLURM_GPUS_PER_TASK, "") != "":
        return "task"  # an ipyparallel engine started by srun --gpus-per-task
    return "shared"  # children of one parent (spawn, torchrun) share its GPUs


def device_for(local_rank: int, visible: int, requested: str = "auto", local_world_size: int = 1,
               binding: str = "shared", gpus_on_node: Optional[int] = None) -> str:
    """The device of one training process: ``"cpu"`` or ``"cuda:N"`` (a pure function).

    ``visible``: GPUs this process sees (``torch.cuda.device_count()``, 0 without a usable GPU);
    ``local_world_size``: training processes on this node; ``binding``: see :func:`binding_of`;
    ``gpus_on_node``: SLURM's ``SLURM_GPUS_ON_NODE`` when known.

    * ``cpu`` → the CPU; ``auto`` with no GPU → the CPU; ``cuda`` with no GPU → an error;
    * one GPU visible → ``cuda:0`` (with ``task`` binding: SLURM gave this task its own GPU);
    * several → ``cuda:local_rank``;
    * an error, on *every* rank of the node and before the rendezvous, when some process of the
      node would have no GPU of its own: ``1 < visible ≤ local_rank``, fewer GPUs than processes
      — so ``auto`` never mixes CUDA+nccl ranks with CPU+gloo ranks (they would wait for each
      other until a misleading timeout). Each rank decides this alone, from local facts.
    """
    if requested not in ("auto", "cpu", "cuda"):
        raise TutorialError("device.unknown", device=requested)
    if requested == "cpu":
        return "cpu"
    if visible <= 0:
        if requested == "cuda":
            raise TutorialError("device.no_gpu")
        return "cpu"
    fields = dict(visible=visible, local_rank=local_rank, per_node=local_world_size)
    if binding == "task":
        if visible == 1:
            if gpus_on_node is not None and 0 < gpus_on_node < local_world_size:
                raise TutorialError("dist.gpu_task_shared", gpus=gpus_on_node, **fields)
            return "cuda:0"
        if local_rank >= visible or local_world_size > visible:
            raise TutorialError("dist.gpu_task_beyond", **fields)
        return f"cuda:{local_rank}"
    if local_world_size > visible or local_rank >= visible:
        raise TutorialError("dist.gpu_shared_too_few", **fields)
    return f"cuda:{local_rank}"


@contextlib.contextmanager
def explained():
    """Turn "GPUs requested but none usable" into the reason, when this node does have GPUs:
    a CPU-only torch build on a GPU node, or a driver older than the wheel needs (:mod:`.gpu`)."""
    try:
        yield
    except TutorialError as error:
        if error.key == "device.no_gpu":
            from . import gpu
            better = gpu.why_no_gpu()  # None when there is nothing more to say
            if better is not None:
                raise better from None
        raise


def choose_device(requested: str, env: DistEnv, environ: Optional[Mapping[str, str]] = None,
                  binding: Optional[str] = None) -> torch.device:
    """This process's device by :func:`device_for`, from what torch sees here.

    ``torch.cuda.set_device`` is called here, before any other CUDA work, so that every
    later ``.cuda()`` and NCCL call of this process uses *its* GPU, not GPU 0.
    When GPUs were asked for and torch sees none, the message says why, from the facts of
    this node (a CPU-only torch build on a GPU node, a driver older than the wheel …).
    """
    environ = os.environ if environ is None else environ
    if requested == "cpu":
        return torch.device("cpu")
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    binding = binding or binding_of(env, environ)
    on_node = _int(environ, launch_env.SLURM_GPUS_ON_NODE) if binding == "task" else None
    with explained():
        name = device_for(env.local_rank, visible, requested, env.local_world_size, binding, on_node)
    if requested == "auto" and visible == 0 and shutil.which("nvidia-smi"):
        # A GPU node whose GPUs this torch cannot use (a CPU-only build, an old driver): say so,
        # then train on the CPU as asked ("auto"), instead of a silent slow run.
        from . import gpu
        verdict = gpu.check()
        if not verdict.ok:
            print(verdict.message(), file=sys.stderr, flush=True)
    device = torch.device(name)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def choose_backend(requested: str, device: torch.device) -> str:
    """``nccl`` when this process has its own GPU, ``gloo`` on the CPU (``auto``)."""
    if requested not in ("auto", "gloo", "nccl"):
        raise TutorialError("backend.unknown", backend=requested)
    if requested == "nccl" and device.type != "cuda":
        raise TutorialError("backend.nccl_needs_cuda")
    if requested == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    return requested


# --------------------------------------------------------------------------------------
# The process group, the NCCL way

_control: dict = {"group": None, "backend": None, "device": None}


def init_process_group(env: DistEnv, backend: str, timeout_seconds: float,
                       device: Optional[torch.device] = None) -> None:
    """Join the process group (the rendezvous at MASTER_ADDR:MASTER_PORT), with a timeout.

    Torch's default timeout is 30 minutes (10 for NCCL): a typo in MASTER_ADDR would burn
    half an hour of GPU time before saying anything. We wait ``timeout_seconds`` and then
    say what went wrong. The same timeout bounds every collective: a rank that stops
    answering ends the job after that long instead of hanging it.

    With ``nccl``:

    * ``device_id=`` (this process's GPU) binds the NCCL communicator to it at once, so an NCCL
      setup error surfaces here, not later from the DDP constructor;
    * ``TORCH_NCCL_ASYNC_ERROR_HANDLING=1`` (unless the user set it): when a collective fails or
      times out, NCCL's watchdog thread aborts the communicator and ends the process (SIGABRT)
      instead of leaving it waiting forever in a GPU kernel. That abort is a *consequence* of the
      first failure; :mod:`ddp_tutorial.spawn` names the first one;
    * a small gloo side group, :func:`control_group`, for the control votes (the stop request):
      a CPU tensor, so a vote never drains the GPU pipeline.
    """
    timeout = datetime.timedelta(seconds=timeout_seconds)
    url = f"tcp://{_url_host(env.master_addr)}:{env.master_port}"
    fields = dict(rank=env.rank, world_size=env.world_size, addr=env.master_addr, port=env.master_port)
    options = {}
    if backend == "nccl":
        os.environ.setdefault(launch_env.TORCH_NCCL_ASYNC_ERROR_HANDLING, "1")
        if device is not None and device.type == "cuda":
            options["device_id"] = device
    try:
        dist.init_process_group(backend, init_method=url, rank=env.rank, world_size=env.world_size,
                                timeout=timeout, **options)
        group = dist.new_group(backend="gloo") if backend == "nccl" else None
    except Exception as error:  # noqa: BLE001 - torch raises DistNetworkError / DistStoreError / RuntimeError
        text = str(error)
        lowered = text.lower()
        if "address already in use" in lowered or "errno 98" in lowered or "eaddrinuse" in lowered:
            raise TutorialError("pg.port_in_use", addr=env.master_addr, port=env.master_port) from None
        if "timed out" in lowered or "timeout" in lowered or isinstance(error, TimeoutError):
            raise TutorialError("pg.timeout", timeout=timeout_seconds, detail=_first_line(text),
                                **fields) from None
        raise TutorialError("pg.failed", detail=_first_line(text), **fields) from None
    _control.update(group=group, backend=backend, device=device)


def control_group():
    """The group for control votes (stop request, small CPU tensors): the gloo side group made
    right after an nccl init, or ``None`` — the default group — when the main backend is gloo."""
    return _control["group"]


def barrier() -> None:
    """A barrier of the default group; on nccl with ``device_ids=[this GPU]`` (else NCCL guesses
    the device from the rank and may pick another process's GPU)."""
    device = _control["device"]
    if _control["backend"] == "nccl" and device is not None and device.type == "cuda":
        dist.barrier(device_ids=[device.index if device.index is not None else torch.cuda.current_device()])
    else:
        dist.barrier()


def destroy_process_group() -> None:
    _control.update(group=None, backend=None, device=None)
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else text[:300]
