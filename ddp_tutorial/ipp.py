"""Step 10 — the same training function on ipyparallel engines (for the notebooks).

A Jupyter kernel is one process, but DDP needs one process per GPU. ipyparallel starts
those processes for us: a *controller* plus N *engines*, each engine a separate Python
process that runs whatever function the notebook sends it. This module

1. starts (or reuses) a local ``ipyparallel.Cluster`` with one engine per GPU of this
   machine, or N CPU engines where there is none (:func:`start`);
2. tells each engine who it is — rank, local rank, world size, device, and a free
   ``MASTER_PORT`` on 127.0.0.1 — through :func:`ddp_tutorial.distributed.resolve_environment`;
   ranks follow the engines' order explicitly (ipyparallel's engine ids need not be
   0 … N−1 in order);
3. runs the package's :func:`ddp_tutorial.train.train` on every engine (:func:`train`), or
   any function inside a process group (:func:`run`, for the collectives of notebook 03);
4. streams rank 0's output into the notebook while it waits, and returns the per-rank
   results in rank order;
5. stops the cluster afterwards, unless asked to keep it for the next cell (``keep=True``).

When something goes wrong it fails fast and clearly: an engine that dies (even by
SIGKILL), a rank that raises, or a run that outlives ``timeout`` seconds of wall-clock time
becomes one :class:`~ddp_tutorial.i18n.TutorialError` naming the rank, and all engines are
killed (a rank blocked in a collective cannot be interrupted any other way; the next call
starts fresh ones in a few seconds). The collectives themselves are bounded by
``config.timeout`` (the process group's timeout).

The notebook kernel itself must never touch CUDA: a CUDA context in the kernel takes memory
on GPU 0 and, where GPUs are in exclusive-process mode (common on clusters), locks engine 0
out of its GPU. Every entry point checks ``torch.cuda.is_initialized()`` and refuses.

    from ddp_tutorial import ipp
    from ddp_tutorial.config import TrainConfig
    results = ipp.train(TrainConfig(dataset="fashion-mnist", epochs=1), n=2)
    results[0].test_accuracy
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from .config import TrainConfig
from .distributed import find_free_port
from .i18n import LANG_VARIABLE, LANGUAGES, TutorialError, language, t
from .runstate import looks_like_lost_peer as _looks_like_lost_peer


START_TIMEOUT = 120.0   # seconds for the engines to register with the controller
POLL_SECONDS = 0.2      # how often the kernel looks at the engines while it waits
GRACE_SECONDS = 3.0     # after a first failure: time for the other ranks to report their own
DEFAULT_TIMEOUT = 3600.0  # wall-clock bound of one train() call (seconds); None: no bound
MASTER_ADDR = "127.0.0.1"  # local engines all run on this machine
JOB_CHECK_SECONDS = 5.0    # SLURM engines: how often a run asks SLURM whether their job still runs


@dataclass
class Engines:
    """A running cluster: the controller, the engines and a client talking to them.

    Local engines (:func:`start`) run on this machine; SLURM engines (:func:`start_slurm`) run
    as the tasks of one SLURM job on the nodes of an allocation, and ``job_id`` names that job.
    """

    cluster: Any           # ipyparallel.Cluster
    client: Any            # ipyparallel.Client
    ids: List[int]         # engine ids, in rank order
    pids: List[int]        # the engines' process ids, in rank order (on their own hosts)
    device: str            # "cuda" (one GPU per engine) or "cpu"
    processes: List[Any] = field(default_factory=list)  # psutil handles: the engines and their helpers
    job_id: Optional[str] = None       # SLURM engines: the job whose tasks they are
    hosts: List[str] = field(default_factory=list)       # SLURM engines: each rank's node
    local_ranks: List[int] = field(default_factory=list)  # SLURM engines: each rank's place on its node
    master_addr: str = "127.0.0.1"     # where rank 0 listens: this machine, or rank 0's node

    @property
    def size(self) -> int:
        return len(self.ids)

    @property
    def on_slurm(self) -> bool:
        return self.job_id is not None

    def local_rank(self, rank: int) -> int:
        return self.local_ranks[rank] if self.local_ranks else rank

    def per_node(self, rank: int, n: int) -> int:
        """How many of the first ``n`` ranks share ``rank``'s node."""
        if not self.hosts:
            return n
        return sum(1 for host in self.hosts[:n] if host == self.hosts[rank])

    def alive(self, rank: int) -> bool:
        """Is the engine of ``rank`` still there? A local engine is a process of this machine;
        a SLURM engine counts as alive while the controller still lists it (its nanny reports
        its death at once; a lost node is noticed by the controller's heartbeat)."""
        if not self.on_slurm:
            return _alive(self.pids[rank])
        try:
            return self.ids[rank] in self.client.ids
        except Exception:  # noqa: BLE001 - the client lost the controller
            return False


_current: Optional[Engines] = None


# --------------------------------------------------------------------------------------
# Notebook helpers


def setup_notebook() -> dict:
    """Call first in every notebook: picks the messages' language from the notebook's folder
    (``notebooks/tr`` → Turkish, ``notebooks/en`` → English), and says which data set and
    data root this run uses (``DDP_TUTORIAL_DATASET`` / ``DDP_TUTORIAL_ROOT``)."""
    folder = Path.cwd().name
    if folder in LANGUAGES:
        os.environ[LANG_VARIABLE] = folder
    defaults = TrainConfig()
    info = {"lang": language(), "dataset": defaults.dataset, "root": defaults.root}
    print(t("ipp.notebook", language=info["lang"], dataset=info["dataset"], root=info["root"]))
    return info


def check_kernel_has_no_cuda() -> None:
    """Refuse to launch when this process (the notebook kernel) has initialised CUDA."""
    torch = sys.modules.get("torch")  # not imported at all: certainly no CUDA
    if torch is not None and torch.cuda.is_initialized():
        raise TutorialError("ipp.kernel_cuda")


def gpu_count() -> int:
    """GPUs of this machine, counted without initialising CUDA in this process."""
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


# --------------------------------------------------------------------------------------
# Starting, reusing and stopping the engines


def current() -> Optional[Engines]:
    """The running cluster kept by an earlier call (``keep=True``), if any."""
    return _current


def _keep(engines: Engines) -> None:
    global _current
    _current = engines


def start_slurm(nodes: int = 1, engines_per_node: Optional[int] = None, gpus_per_node: Optional[int] = None,
                profile: str = "generic", **options) -> Engines:
    """Start the engines through SLURM, on the nodes of an allocation, and keep them for
    :func:`train` and :func:`run` (one engine per GPU, or ``engines_per_node`` CPU engines per
    node; ``options``: partition, account, time_limit, modules, conda/venv, controller_ip …).
    See :mod:`ddp_tutorial.ipp_slurm`; :func:`stop` ends the job."""
    return _slurm().start(nodes, engines_per_node, gpus_per_node, profile, **options)


def _slurm():
    """:mod:`ddp_tutorial.ipp_slurm`, imported when first needed (it imports this module)."""
    from . import ipp_slurm
    return ipp_slurm


def _alive(pid: int) -> bool:
    import psutil  # installed with ipyparallel
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _with_helpers(pids: List[int]) -> List[Any]:
    """psutil handles of ``pids`` and of all their descendants (each engine starts a "nanny"
    process that watches it). A handle remembers its process's start time, so killing it later
    can never hit an unrelated process that reused the pid."""
    import psutil
    processes = []
    for pid in pids:
        try:
            process = psutil.Process(pid)
            processes += [process] + process.children(recursive=True)
        except psutil.NoSuchProcess:
            pass
    return processes


def start(n: Optional[int] = None, device: str = "auto") -> Engines:
    """Start ``n`` local engines, or reuse the running ones when there are enough.

    ``n`` defaults to the number of GPUs, or 2 CPU engines where there is none.
    ``device``: ``auto`` (GPUs when there are any), ``cuda`` or ``cpu``.
    """
    global _current
    check_kernel_has_no_cuda()
    if _current is not None and _current.on_slurm:  # engines on a SLURM allocation: use them
        return _slurm().check_usable(_current, n, device)
    gpus = gpu_count() if device != "cpu" else 0
    if device == "cuda" and not gpus:
        raise TutorialError("device.no_gpu")
    kind = "cuda" if gpus else "cpu"
    n = (gpus or 2) if n is None else n
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise TutorialError("ipp.bad_n", n=n)
    if kind == "cuda" and n > gpus:
        raise TutorialError("ipp.too_many_gpu_engines", n=n, gpus=gpus)

    engines = _current
    if engines is not None:
        healthy = _alive(engines.cluster.controller.pid) and all(_alive(p) for p in engines.pids)
        if healthy and engines.device == kind and engines.size >= n:
            return engines  # quietly: the notebooks' checked outputs must not show pids
        stop()

    import ipyparallel

    began = time.perf_counter()
    # ERROR: ipyparallel logs an engine's whole output as a warning whenever it exits with a
    # non-zero code, which ipyparallel 9's engines do even on a clean shutdown; our own
    # messages say what went wrong, and the logs stay in the profile's log folder.
    cluster = ipyparallel.Cluster(n=n, log_level=logging.ERROR)
    client = None
    try:
        cluster.start_cluster_sync(n)
        client = cluster.connect_client_sync()
        client.wait_for_engines(n, timeout=START_TIMEOUT, interactive=False)
        ids = sorted(client.ids)[:n]
        # Rank r runs on the r-th engine in this list, whatever its engine id. Each engine
        # works in the notebook's folder and can import what the notebook imports.
        pids = [client[eid].apply_sync(_engine_join_kernel, os.getcwd(), list(sys.path)) for eid in ids]
    except Exception as error:  # noqa: BLE001 - any start failure becomes one clear message
        _shutdown(cluster, client, _with_helpers(_launcher_pids(cluster)), force=True)
        raise TutorialError("ipp.start_failed", n=n, timeout=START_TIMEOUT, detail=str(error)[:300],
                            profile=getattr(cluster, "profile_dir", "~/.ipython")) from None
    _current = Engines(cluster=cluster, client=client, ids=ids, pids=pids, device=kind,
                       processes=_with_helpers(_launcher_pids(cluster)))
    print(t("ipp.started", n=n, seconds=time.perf_counter() - began, pids=pids, device=kind), flush=True)
    return _current


def stop(force: bool = False) -> None:
    """Stop the kept cluster (controller and engines), if there is one; ``force``: SIGKILL the
    engines at once (they may be blocked in a collective)."""
    global _current
    engines, _current = _current, None
    if engines is not None:
        _shutdown(engines.cluster, engines.client, engines.processes, force=force, job_id=engines.job_id)
        print(t("ipp.stopped_slurm", job_id=engines.job_id) if engines.on_slurm else t("ipp.stopped"), flush=True)


def _launcher_pids(cluster) -> List[int]:
    """The engine pids ipyparallel's launchers know (used when the engines never answered)."""
    pids = []
    for engine_set in getattr(cluster, "engines", {}).values():
        pids += [launcher.pid for launcher in getattr(engine_set, "launchers", {}).values() if launcher.pid > 0]
    return pids


def _still_running(processes: List[Any]) -> List[Any]:
    import psutil
    running = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                running.append(process)
        except psutil.NoSuchProcess:
            pass
    return running


def _kill(processes: List[Any], wait: float = 10.0) -> List[int]:
    """SIGKILL ``processes`` and wait until they are gone; returns the pids still there."""
    import psutil
    for process in _still_running(processes):
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and _still_running(processes):
        time.sleep(0.05)
    return [process.pid for process in _still_running(processes)]


def _shutdown(cluster, client, processes: List[Any], force: bool = False, job_id: Optional[str] = None) -> List[int]:
    """Stop the engines (``force``: SIGKILL them first), then the controller; make sure that
    no engine nor helper process is left (SLURM engines: that their job ``job_id`` has ended).
    Returns the pids that would not go."""
    if force:
        _kill(processes)
    if client is not None:
        try:
            if not force:  # ask the engines to exit cleanly (exit code 0, no alarming logs)
                client.shutdown(targets="all", block=True)
                deadline = time.monotonic() + 5.0
                while time.monotonic() < deadline and _still_running(processes):
                    time.sleep(0.05)
            client.close()
        except Exception:  # noqa: BLE001 - the engines may already be gone
            pass
    try:
        cluster.stop_cluster_sync()  # the controller (and any engine left: SIGTERM, then SIGKILL;
    except Exception:  # noqa: BLE001   SLURM engines: scancel of their job)
        pass
    if job_id is not None:
        _slurm().wait_for_job_end(job_id)
    return _kill(processes)


# --------------------------------------------------------------------------------------
# What runs on each engine (these functions are sent to the engines by reference:
# the engines import ddp_tutorial themselves)


def _engine_join_kernel(cwd: str, paths: List[str]) -> int:
    """Work in the kernel's folder, with its import path; returns this engine's pid."""
    os.chdir(cwd)
    sys.path[:0] = [p for p in paths if p not in sys.path]
    return os.getpid()


@dataclass(frozen=True)
class Place:
    """Where one engine stands in the run (sent to it with the work)."""

    rank: int
    world_size: int
    local_rank: int
    nproc_per_node: int
    master_addr: str
    master_port: int
    lang: str
    use_cuda: bool


def _engine_prepare(place: Place):
    """First thing on an engine: language, device, then where this rank stands."""
    os.environ[LANG_VARIABLE] = place.lang
    if place.use_cuda:
        import torch
        torch.cuda.set_device(place.local_rank)  # this node's GPU for the rank; before any other CUDA call
    from .distributed import resolve_environment
    return resolve_environment(rank=place.rank, world_size=place.world_size, local_rank=place.local_rank,
                               nproc_per_node=place.nproc_per_node, master_addr=place.master_addr,
                               master_port=place.master_port)


def _engine_train(config: TrainConfig, place: Place):
    env = _engine_prepare(place)
    from .train import train as train_function
    return train_function(config, env)


def _engine_run(function: Callable, args: tuple, kwargs: dict, backend: str, pg_timeout: float, place: Place):
    env = _engine_prepare(place)
    from .distributed import destroy_process_group, init_process_group
    init_process_group(env, backend, pg_timeout)
    try:
        return function(env, *args, **kwargs)
    finally:
        destroy_process_group()


# --------------------------------------------------------------------------------------
# Running on all engines and waiting, with failure detection


def _exit_code(engines: Engines, pid: int) -> Optional[int]:
    """The exit code of a finished engine (negative: killed by that signal), as ipyparallel saw it."""
    import psutil
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        for engine_set in list(engines.cluster.engines.values()):
            # Where ipyparallel's event loop runs (in a notebook), it records the exit here …
            for stopped in (getattr(engine_set, "stop_data", None) or {}).get("engines", {}).values():
                if stopped.get("pid") == pid and stopped.get("exit_code") is not None:
                    return stopped["exit_code"]
            # … elsewhere its launcher's waiting thread reaps the process and psutil keeps the code.
            for launcher in list(engine_set.launchers.values()):
                if launcher.pid == pid and launcher.process is not None:
                    waiter = getattr(launcher, "_wait_thread", None)
                    if waiter is not None:
                        waiter.join(timeout=0.5)
                    try:
                        code = launcher.process.wait(timeout=0)
                    except psutil.TimeoutExpired:
                        code = None
                    if code is not None:
                        return int(code)
        time.sleep(0.1)
    return None


def _describe_exit(engines: Engines, pid: int) -> str:
    """How an engine process ended: killed by a signal, or its exit code."""
    code = _exit_code(engines, pid)
    if code is None:
        return t("ipp.gone")
    if code < 0:
        try:
            return t("ipp.signal", name=signal.Signals(-code).name)
        except ValueError:
            pass
    return t("ipp.exit_code", code=code)


def _remote_error_text(error: BaseException) -> str:
    """``Name: first line of the message`` of an error raised on an engine."""
    name = getattr(error, "ename", type(error).__name__)
    value = str(getattr(error, "evalue", error)).strip()
    lines = [line.strip() for line in value.splitlines() if line.strip()]
    first = lines[0] if lines else ""
    return f"{name}: {first[:500].rstrip('.')}"


def _run_everywhere(engines: Engines, n: int, make_call: Callable[[int], tuple], timeout: Optional[float]) -> list:
    """Send ``make_call(rank)`` = (function, args) to the first ``n`` engines; wait for all of
    them while streaming rank 0's output; return the results in rank order or raise one
    clear error (after killing every engine) when a rank dies, raises or runs too long."""
    global _current
    client, ids, pids = engines.client, engines.ids[:n], engines.pids[:n]
    pending = {}
    for rank, eid in enumerate(ids):
        function, args = make_call(rank)
        pending[rank] = client[eid].apply_async(function, *args)
    results: Dict[int, Any] = {}
    failures: List[tuple] = []  # (order, text): dead engines first, then errors, then lost peers
    shown = {"stdout": 0, "stderr": 0}
    began = time.monotonic()
    failed_at = None
    job_checked = began

    rank0 = pending[0]

    def stream_rank0() -> None:  # print what rank 0 wrote since we last looked
        for name, target in (("stdout", sys.stdout), ("stderr", sys.stderr)):
            text = getattr(rank0, name) or ""
            if len(text) > shown[name]:
                target.write(text[shown[name]:])
                target.flush()
                shown[name] = len(text)

    while pending:
        for rank in list(pending):
            ar = pending[rank]
            if not engines.alive(rank):  # first: a dead engine is the cause, not a symptom
                del pending[rank]
                how = _slurm().describe_loss(engines) if engines.on_slurm else _describe_exit(engines, pids[rank])
                failures.append((0, t("ipp.cause_died", rank=rank, engine=ids[rank], pid=pids[rank], how=how)))
            elif ar.ready():
                del pending[rank]
                try:
                    results[rank] = ar.get()
                except Exception as error:  # noqa: BLE001 - a remote error, reported below
                    text = _remote_error_text(error)
                    # A rank that only lost its peers is a symptom of another rank's failure.
                    failures.append((2 if _looks_like_lost_peer(text) else 1,
                                     t("ipp.cause_raised", rank=rank, engine=ids[rank], error=text)))
        if not _alive(engines.cluster.controller.pid):
            failures.append((0, t("ipp.cause_controller", pid=engines.cluster.controller.pid)))
            break
        now = time.monotonic()
        if engines.on_slurm and pending and now - job_checked > JOB_CHECK_SECONDS:
            job_checked = now
            ended = _slurm().job_ended(engines)
            if ended:
                failures.append((0, ended))
                break
        stream_rank0()
        if failures and failed_at is None:
            failed_at = now
        if failed_at is not None and now - failed_at > GRACE_SECONDS:
            break
        if timeout is not None and now - began > timeout and not failures:
            failures.append((3, t("ipp.cause_timeout", timeout=timeout, ranks=sorted(pending))))
            break
        if pending:
            time.sleep(POLL_SECONDS)
    stream_rank0()

    if failures:
        # The engines may be blocked inside a collective: only killing them frees them.
        _current = None
        leftover = _shutdown(engines.cluster, engines.client, engines.processes, force=True, job_id=engines.job_id)
        failures.sort(key=lambda f: f[0])
        cause = failures[0][1]
        if len(failures) > 1:
            cause += "; " + t("ipp.also", rest="; ".join(f[1] for f in failures[1:]))
        if leftover:
            cause += "; " + t("ipp.leftover", pids=leftover)
        raise TutorialError("ipp.failed", n=n, cause=cause)
    return [results[rank] for rank in range(n)]


def _finish(keep: bool) -> None:
    if not keep:
        stop()


def train(config: Optional[TrainConfig] = None, n: Optional[int] = None, keep: bool = False,
          timeout: Optional[float] = DEFAULT_TIMEOUT, device: str = "auto", **overrides) -> list:
    """Run :func:`ddp_tutorial.train.train` on ``n`` engines (world size ``n``); return the
    ``TrainResult`` of every rank, in rank order.

    ``overrides`` change fields of ``config`` (e.g. ``epochs=1``). ``timeout``: wall-clock
    seconds for the whole run (``None``: no bound); collectives are bounded by
    ``config.timeout``. ``keep=True`` keeps the engines for the next call.
    """
    check_kernel_has_no_cuda()
    config = replace(config or TrainConfig(), **overrides)
    # The engines share this machine's files: give them absolute paths, and no progress bar
    # (rank 0's epoch lines are streamed here instead).
    config = replace(config, root=str(Path(config.root).expanduser().resolve()), progress=False,
                     json=str(Path(config.json).expanduser().resolve()) if config.json else None).validate()
    engines = start(n, device=device if config.device == "auto" else config.device)
    return _launch(engines, n, keep, timeout, lambda place: (_engine_train, (config, place)))


def _master_port(engines: Engines) -> int:
    """A free port where rank 0 listens: found on this machine, or by rank 0's engine on its node."""
    if not engines.on_slurm:
        return find_free_port(engines.master_addr)
    return engines.client[engines.ids[0]].apply_sync(find_free_port, "")


def _launch(engines, n: Optional[int], keep: bool, timeout: Optional[float], task: Callable) -> list:
    """Give every engine its :class:`Place` (rank, local rank, master address and one free port),
    run ``task(place)`` (a (function, args) pair) everywhere, and stop the engines afterwards
    unless ``keep``."""
    n = engines.size if n is None else n
    port, lang, use_cuda = _master_port(engines), language(), engines.device == "cuda"

    def place(rank: int) -> Place:
        return Place(rank=rank, world_size=n, local_rank=engines.local_rank(rank),
                     nproc_per_node=engines.per_node(rank, n), master_addr=engines.master_addr,
                     master_port=port, lang=lang, use_cuda=use_cuda)
    try:
        return _run_everywhere(engines, n, lambda rank: task(place(rank)), timeout)
    except KeyboardInterrupt:  # the stop button of the notebook
        stop(force=True)
        raise
    finally:
        if _current is not None:
            _finish(keep)


def run(function: Callable, *args, n: Optional[int] = None, keep: bool = False, backend: str = "gloo",
        timeout: Optional[float] = 300.0, pg_timeout: float = 60.0, **kwargs) -> list:
    """Run ``function(env, *args, **kwargs)`` on ``n`` engines inside one process group and
    return its results in rank order. ``env`` is the engine's
    :class:`~ddp_tutorial.distributed.DistEnv` (``env.rank``, ``env.world_size`` …).

    ``function`` is sent to the engines: import inside it what it needs (``import torch``),
    since the engines are other processes with their own namespaces. ``backend``: ``gloo``
    (default; CPU tensors) or ``nccl`` (CUDA tensors, GPU engines only).
    """
    check_kernel_has_no_cuda()
    engines = start(n)
    return _launch(engines, n, keep, timeout,
                   lambda place: (_engine_run, (function, args, kwargs, backend, pg_timeout, place)))
