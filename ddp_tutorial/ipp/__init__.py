"""The same training function on ipyparallel engines (for the notebooks).

A Jupyter kernel is one process, but DDP needs one process per GPU. ipyparallel starts
those processes for us: a *controller* plus N *engines*, each engine a separate Python
process that runs whatever function the notebook sends it. This package

1. starts (or reuses) an *engine set*: N local engines, one per GPU of this machine or N CPU
   engines where there is none (:func:`start`, :mod:`.local`), or the tasks of one SLURM job
   on the nodes of an allocation (:func:`start_slurm`, :mod:`.slurm`) — both behind the
   small interface of :class:`.engines.EngineSet`;
2. tells each engine who it is — rank, local rank, world size, device, and a free
   ``MASTER_PORT`` — through :func:`ddp_tutorial.whoami.resolve_environment`; ranks
   follow the engines' order explicitly (engine ids need not be 0 … N−1 in order);
3. runs the package's :func:`ddp_tutorial.train.train` on every engine (:func:`train`), or
   any function inside a process group (:func:`run`); what runs on the engines is in :mod:`.remote`;
4. streams rank 0's output and progress bar into the notebook while it waits (:mod:`.runner`,
   :mod:`.progress`), and returns the per-rank results in rank order;
5. stops the engines afterwards unless asked to keep them (``keep=True``); a watchdog ends them
   (and cancels a SLURM job) when the kernel is shut down, restarted or killed (:mod:`.watchdog`).

When something goes wrong it fails fast and clearly: an engine that dies (even by SIGKILL),
a rank that raises, or a run that outlives ``timeout`` seconds becomes one
:class:`~ddp_tutorial.i18n.TutorialError` naming the rank, and all engines are killed.

The notebook kernel itself must never touch CUDA: a CUDA context in the kernel takes memory
on GPU 0 and, where GPUs are in exclusive-process mode, locks engine 0 out of its GPU. Every
entry point checks ``torch.cuda.is_initialized()`` and refuses.

    from ddp_tutorial import ipp
    from ddp_tutorial.config import TrainConfig
    results = ipp.train(TrainConfig(dataset="fashion-mnist", epochs=1), n=2)
    results[0].test_accuracy
"""

from __future__ import annotations

import atexit
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional

from ..config import TrainConfig
from . import local, remote, runner
from . import slurm as _slurm_engines
from .engines import EngineSet, check_kernel_has_no_cuda, current, stop, stop_silently
from .local import gpu_count

__all__ = ["EngineSet", "check_kernel_has_no_cuda", "current", "gpu_count", "run", "start", "start_slurm",
           "stop", "train", "DEFAULT_TIMEOUT"]

DEFAULT_TIMEOUT = 3600.0  # wall-clock bound of one train() call (seconds); None: no bound

atexit.register(stop_silently)  # a kernel that exits cleanly takes its engines along


def start(n: Optional[int] = None, device: str = "auto") -> EngineSet:
    """Start ``n`` local engines, or reuse the running ones when there are enough.

    ``n`` defaults to the number of GPUs, or 2 CPU engines where there is none.
    ``device``: ``auto`` (GPUs when there are any), ``cuda`` or ``cpu``. Engines kept from
    :func:`start_slurm` are used instead when there are any.
    """
    check_kernel_has_no_cuda()
    kept = current()
    if isinstance(kept, _slurm_engines.SlurmEngines):  # engines on a SLURM allocation: use them
        return kept.check_usable(n, device)
    return local.start(n, device)


def start_slurm(nodes: int = 1, engines_per_node: Optional[int] = None, gpus_per_node: Optional[int] = None,
                profile: str = "generic", **options) -> EngineSet:
    """Start the engines through SLURM, on the nodes of an allocation, and keep them for
    :func:`train` and :func:`run` (one engine per GPU, or ``engines_per_node`` CPU engines per
    node; ``options``: partition, account, time_limit, modules, conda/venv, controller_ip …).
    See :mod:`ddp_tutorial.ipp.slurm`; :func:`stop` ends the job."""
    return _slurm_engines.start(nodes, engines_per_node, gpus_per_node, profile, **options)


def train(config: Optional[TrainConfig] = None, n: Optional[int] = None, keep: bool = False,
          timeout: Optional[float] = DEFAULT_TIMEOUT, device: str = "auto", **overrides) -> list:
    """Run :func:`ddp_tutorial.train.train` on ``n`` engines (world size ``n``); return the
    ``TrainResult`` of every rank, in rank order.

    ``overrides`` change fields of ``config`` (e.g. ``epochs=1``). ``timeout``: wall-clock
    seconds for the whole run (``None``: no bound); collectives are bounded by
    ``config.timeout``. ``keep=True`` keeps the engines for the next call. Rank 0's progress
    bar is drawn here (``progress=False`` turns it off).
    """
    check_kernel_has_no_cuda()
    config = replace(config or TrainConfig(), **overrides)
    # The engines share this machine's files: give them absolute paths.
    json = config.json  # an empty path stays empty: validation refuses it
    config = replace(config, root=str(Path(config.root).expanduser().resolve()),
                     progress=config.progress is not False,
                     json=str(Path(json).expanduser().resolve()) if json and json.strip() else json).validated()
    engines = start(n, device=device if config.device == "auto" else config.device)
    return runner.launch(engines, n, keep, timeout, lambda place: (remote.train_on_engine, (config, place)))


def run(function: Callable, *args, n: Optional[int] = None, keep: bool = False, backend: str = "gloo",
        timeout: Optional[float] = 300.0, pg_timeout: float = 60.0, **kwargs) -> list:
    """Run ``function(env, *args, **kwargs)`` on ``n`` engines inside one process group and
    return its results in rank order. ``env`` is the engine's
    :class:`~ddp_tutorial.whoami.DistEnv` (``env.rank``, ``env.world_size`` …).

    ``function`` is sent to the engines: import inside it what it needs (``import torch``),
    since the engines are other processes with their own namespaces. ``backend``: ``gloo``
    (default; CPU tensors) or ``nccl`` (CUDA tensors, GPU engines only).
    """
    check_kernel_has_no_cuda()
    engines = start(n)
    return runner.launch(engines, n, keep, timeout,
                         lambda place: (remote.run_on_engine, (function, args, kwargs, backend, pg_timeout, place)))
