"""Step 2 of the story — my device and the backend: one rule for every launcher.

A training process with a GPU of its own trains on it (``cuda:local_rank``, or ``cuda:0`` when SLURM
shows each task only its own GPU) and talks through ``nccl``; without one it trains on the CPU and
talks through ``gloo``. :func:`device_for` is that rule as a pure function (table-tested);
:func:`choose_device` applies it to what torch sees here and calls ``torch.cuda.set_device``;
:func:`choose_backend` picks the backend for the device.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from typing import TYPE_CHECKING, Mapping, Optional

from . import launch_env
from .config import TRAIN_RULES
from .i18n import TutorialError
from .whoami import DistEnv, env_int

if TYPE_CHECKING:  # torch only where a device is made: a launcher applies the rule without importing it
    import torch


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
    if requested not in TRAIN_RULES["device"].choices:
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
    import torch
    environ = os.environ if environ is None else environ
    if requested == "cpu":
        return torch.device("cpu")
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    binding = binding or binding_of(env, environ)
    on_node = env_int(environ, launch_env.SLURM_GPUS_ON_NODE) if binding == "task" else None
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
    if requested not in TRAIN_RULES["backend"].choices:
        raise TutorialError("backend.unknown", backend=requested)
    if requested == "nccl" and device.type != "cuda":
        raise TutorialError("backend.nccl_needs_cuda")
    if requested == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    return requested
