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
3. runs the package's :func:`ddp_tutorial.train.train` on every engine (:func:`train`), any function
   as torchrun would run it or inside a ready process group (:func:`run`), or a script file
   (:func:`run_script`); what runs on the engines is in :mod:`.remote`;
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
import math
import numbers
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..config import RENDEZVOUS_TIMEOUT, TrainConfig
from ..i18n import TutorialError
from . import local, remote, runner
from . import slurm as _slurm_engines
from .engines import EngineSet, check_kernel_has_no_cuda, current, stop, stop_silently
from .local import gpu_count

__all__ = ["EngineSet", "check_kernel_has_no_cuda", "current", "gpu_count", "run", "run_script", "start", "start_slurm",
           "stop", "train", "DEFAULT_TIMEOUT"]

DEFAULT_TIMEOUT = 3600.0  # wall-clock bound of one train() call (seconds); None: no bound

atexit.register(stop_silently)  # a kernel that exits cleanly takes its engines along


PG_TIMEOUT_MAX = 7 * 24 * 3600.0  # the training's own bound (config.timeout)


def _seconds(value) -> Optional[float]:
    """``value`` as a finite number of seconds > 0, else None (a bool, a string, nan, inf, ≤ 0)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    seconds = float(value)
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def _checked_timeout(timeout) -> Optional[float]:
    """The whole call's wall-clock bound: a finite number of seconds > 0, or None (no bound); checked
    before any engine starts (``nan`` compared false everywhere and meant "no bound" without a word)."""
    if timeout is None:
        return None
    seconds = _seconds(timeout)
    if seconds is None:
        raise TutorialError("ipp.bad_timeout", value=timeout)
    return seconds


def _checked_pg_timeout(pg_timeout) -> float:
    """The process group's timeout: a finite number of seconds > 0, at most a week; checked before any
    engine starts (a bad one ended both engines through the rendezvous watchdog, "exited with code 2")."""
    seconds = _seconds(pg_timeout)
    if seconds is None or seconds > PG_TIMEOUT_MAX:
        raise TutorialError("ipp.bad_pg_timeout", value=pg_timeout, most=int(PG_TIMEOUT_MAX))
    return seconds


def _absolute(path: Optional[str]) -> Optional[str]:
    """``path`` from the kernel's folder (the engines share this machine's files, not its working
    directory); an empty path stays empty: validation refuses it."""
    return str(Path(path).expanduser().resolve()) if path and path.strip() else path


def start(n: Optional[int] = None, device: str = "auto") -> EngineSet:
    """Start ``n`` local engines, or reuse the running ones when there are enough.

    ``n`` defaults to the number of GPUs, or 2 CPU engines where there is none.
    ``device``: ``auto`` (one engine per GPU when there are at least ``n`` GPUs, else CPU engines, said
    in one line: a 0- or 1-GPU session runs every notebook), ``cuda`` (refused with too few GPUs, naming
    the call that works) or ``cpu``. CPU engines see no GPU (``CUDA_VISIBLE_DEVICES`` is empty for them).
    Engines kept from :func:`start_slurm` are used instead when there are any.
    """
    check_kernel_has_no_cuda()
    kept = current()
    if isinstance(kept, _slurm_engines.SlurmEngines):  # engines on a SLURM allocation: use them
        return kept.check_usable(n, device)
    return local.start(n, device)


def start_slurm(nodes: int = 1, engines_per_node: Optional[int] = None, gpus_per_node: Optional[int] = None,
                profile: Optional[str] = None, **options) -> EngineSet:
    """Start the engines through SLURM, on the nodes of an allocation, and keep them for
    :func:`train` and :func:`run` (one engine per GPU, or ``engines_per_node`` CPU engines per
    node; ``profile``: default :func:`ddp_tutorial.slurm.workshop_profile`, i.e. ``$DDP_TUTORIAL_SLURM_PROFILE``;
    GPUs per node, cores, account, reservation and run folder default to the class's shape, as 05's job's:
    :func:`ddp_tutorial.slurm.class_job`; ``options``: partition, account, reservation, time_limit, modules,
    conda/venv, controller_ip …).
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
    timeout = _checked_timeout(timeout)
    config = replace(config or TrainConfig(), **overrides)
    # The engines share this machine's files, not the kernel's working directory: absolute paths.
    config = replace(config, root=str(Path(config.root).expanduser().resolve()),
                     progress=config.progress is not False, json=_absolute(config.json),
                     checkpoint_dir=_absolute(config.checkpoint_dir)).validated()
    engines = start(n, device=device if config.device == "auto" else config.device)
    return runner.launch(engines, n, keep, timeout, lambda place: (remote.train_on_engine, (config, place)))


def notebook_style(function: Callable) -> bool:
    """The rule of ``group=None``: a function whose first parameter is named ``env`` (every function of
    the notebooks, the exercises and 08's ``train_ddp``) is a notebook function; any other function is
    torchrun-style."""
    import inspect
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return False
    return bool(parameters) and parameters[0].name == "env" and parameters[0].kind in (
        inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _takes_env(function: Callable) -> bool:
    """Can ``function(env, ...)`` be called (a first positional parameter, or ``*args``)?"""
    import inspect
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters)


def _reading_of(function: Callable):
    """The reading of the function's source (:mod:`ddp_tutorial.script_check`), or None without a source."""
    import inspect
    import textwrap
    from ..script_check import read_source
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return None
    return read_source(textwrap.dedent(source), getattr(function, "__name__", "<function>"))


def _gpus_on_node(report, engines: EngineSet, n: Optional[int]) -> bool:
    """Code that reads ``SLURM_GPUS_ON_NODE`` with ``[]``: set on CPU engines too, said here in one line
    before it runs (:func:`ddp_tutorial.script_check.reads_gpus_on_node`)."""
    from ..i18n import t
    from ..script_check import reads_gpus_on_node
    if report is None or not reads_gpus_on_node(report):
        return False
    if engines.device != "cuda":
        per_node = engines.per_node(0, engines.size if n is None else n)
        print(t("script.gpus_on_node_ipp", path=report.path, n=per_node), flush=True)
    return True


def _checked_output(output: str) -> str:
    if output not in runner.OUTPUTS:
        raise TutorialError("ipp.bad_output", output=output, choices=", ".join(runner.OUTPUTS))
    return output


def run(function: Callable, *args, n: Optional[int] = None, keep: bool = False, backend: str = "gloo",
        timeout: Optional[float] = 300.0, pg_timeout: float = RENDEZVOUS_TIMEOUT, group: Optional[bool] = None,
        argv: Optional[Sequence[str]] = None, slurm_names: Optional[bool] = None, output: str = "rank0",
        device: str = "auto", **kwargs) -> list:
    """Run ``function`` on ``n`` engines as one distributed run and return its results in rank order.

    Every engine gets what torchrun gives each process: ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
    ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` (a free port, chosen and held open by rank 0's
    engine for this call); with
    ``slurm_names=True`` also srun's ``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NTASKS`` … (default: when
    the function's source reads them, :mod:`ddp_tutorial.script_check`).
    ``argv``: the function's ``sys.argv`` (e.g. ``["train.py", "--epochs=1"]``; default: the engine's).
    All of it is put back on the engines afterwards.

    Two modes (``group``):

    * ``group=False`` — **torchrun's**: ``function(*args, **kwargs)``, no process group made for it: it
      calls ``dist.init_process_group(...)`` and ``destroy_process_group()`` itself, exactly as under
      ``torchrun`` (a group it leaves open is destroyed after it);
    * ``group=True`` — **the notebooks'**: the process group (``backend``, ``pg_timeout`` seconds) is made
      first and ``function(env, *args, **kwargs)`` runs inside it; ``env`` is the engine's
      :class:`~ddp_tutorial.whoami.DistEnv` (``env.rank``, ``env.world_size`` …);
    * ``group=None`` (default) — ``True`` when the function's first parameter is named ``env`` (every
      function of the notebooks), else ``False`` (:func:`notebook_style`).

    ``output``: whose prints are shown here while it runs: ``rank0`` (default), ``all`` (``[rank r]``
    before each line) or ``none``. ``function`` is sent to the engines: import inside it what it needs
    (``import torch``); a helper it calls must be importable there too (a module, not the notebook).
    ``backend``: ``gloo`` (default; CPU tensors) or ``nccl`` (CUDA tensors, GPU engines only).
    ``device``: the engines, as for :func:`start`: ``auto`` (one per GPU when there are ``n`` GPUs, else CPU
    engines, said in one line), ``cuda`` or ``cpu`` (e.g. ``ipp.run(f, n=2, device="cpu")``).
    """
    check_kernel_has_no_cuda()
    output = _checked_output(output)
    timeout, pg_timeout = _checked_timeout(timeout), _checked_pg_timeout(pg_timeout)
    in_group = notebook_style(function) if group is None else bool(group)
    if in_group and not _takes_env(function):
        raise TutorialError("ipp.group_needs_env", name=getattr(function, "__name__", repr(function)))
    argv = None if argv is None else [str(a) for a in argv]
    report = _reading_of(function)
    if slurm_names is None:
        slurm_names = report is not None and report.convention in ("slurm", "either")
    engines = start(n, "cuda" if in_group and backend == "nccl" and device == "auto" else device)
    gpus_on_node = _gpus_on_node(report, engines, n)
    return runner.launch(engines, n, keep, timeout,
                         lambda place: (remote.run_on_engine, (function, args, kwargs, backend, pg_timeout, place,
                                                               in_group, argv, slurm_names, gpus_on_node)),
                         output=output)


def run_script(path, args: Sequence[str] = (), n: Optional[int] = None, keep: bool = False,
               timeout: Optional[float] = 3600.0, output: str = "rank0",
               slurm_names: Optional[bool] = None, device: str = "auto") -> list:
    """Run the DDP script file ``path`` on ``n`` engines as ``torchrun --nproc-per-node n path args…``
    would: on every engine ``__name__ == "__main__"``, ``sys.argv == [path, *args]``, the launcher's
    variables of :func:`run` set, no process group made for it. Returns one ``None`` per rank; a rank
    whose script raises or exits with a code other than 0 fails the run (naming the rank and the code).

    ``output``: ``rank0`` (default), ``all`` or ``none``, as for :func:`run`. ``slurm_names``: also set
    srun's names (``SLURM_PROCID`` …); default: when the script reads them (:mod:`ddp_tutorial.script_check`).
    ``device``: the engines, as for :func:`start` (``auto``, ``cuda`` or ``cpu``).
    A script that starts its own processes per node (``mp.spawn``, the seed's parent) is refused: run it
    on one machine with one SLURM task's names (the message gives the command), or with ``slurm render
    --template per-gpu --nproc-per-node 1`` (with ``--gpus-per-node N``: one task per node holding its N GPUs).
    """
    from ..script_check import one_machine_command, read_script
    check_kernel_has_no_cuda()
    output = _checked_output(output)
    timeout = _checked_timeout(timeout)
    script = Path(path).expanduser().resolve()
    report = read_script(script)
    if report.convention == "per-node":
        raise TutorialError("ipp.script_spawns", path=str(path), command=one_machine_command(script))
    if slurm_names is None:
        slurm_names = report.convention in ("slurm", "either")
    argv = [str(a) for a in args]
    engines = start(n, device)
    gpus_on_node = _gpus_on_node(report, engines, n)
    return runner.launch(engines, n, keep, timeout,
                         lambda place: (remote.run_script_on_engine, (str(script), argv, place, bool(slurm_names),
                                                                      gpus_on_node)),
                         output=output)
