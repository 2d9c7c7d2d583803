"""What runs ON the engines. These functions are sent to the engines by reference: the engines
import ``ddp_tutorial`` themselves, so they must stay importable module-level functions.

* :func:`join_kernel` / :func:`where`: work in the kernel's folder, with its import path;
* :func:`warm_up`: import torch and the training code once per engine, right after the start,
  while the notebook goes on (the first ``ipp.train`` does not pay for it);
* :func:`train_on_engine` / :func:`run_on_engine`: one rank's work, given its :class:`Place`;
* rank 0's progress bar is published to the kernel (ipyparallel's ``publish_data``) instead of
  drawn on the engine, where nobody would see it; the kernel draws it (:mod:`.progress`);
* the data set is loaded once per engine and kept for later cells (keyed by data set, root,
  split and the files' modification times).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from dataclasses import dataclass
from typing import Callable, List, Optional


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


def join_kernel(cwd: str, paths: List[str]) -> int:
    """Work in the kernel's folder, with its import path; returns this engine's pid."""
    if os.path.isdir(cwd):
        os.chdir(cwd)
    sys.path[:0] = [p for p in paths if p not in sys.path]
    return os.getpid()


def address_towards(host: Optional[str], port: int = 9) -> Optional[str]:
    """This machine's IPv4 address on the route to ``host`` (no packet is sent: a UDP socket is only
    *connected*, which makes the kernel pick the source address); None for loopback or no route."""
    if not host or host == "*":
        return None
    try:
        target = socket.gethostbyname(host)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, port))
            mine = s.getsockname()[0]
    except OSError:
        return None
    return None if mine.startswith("127.") or mine == "0.0.0.0" else mine


def own_address(towards: Optional[str]) -> str:
    """The address the other nodes reach this engine on: its address on the route to ``towards`` (the
    notebook's controller, on the cluster's internal network — the engine reached it from here);
    else what its host name resolves to, if that is not loopback; else the host name itself."""
    mine = address_towards(towards)
    if mine:
        return mine
    name = socket.gethostname()
    try:
        resolved = socket.gethostbyname(name)
    except OSError:
        return name
    return name if resolved.startswith("127.") else resolved


def interface_for(address: str) -> Optional[str]:
    """The interface rule (the sbatch templates' too, ``ddp_tutorial.slurm.render.IFNAME_RULE``): the
    network interface holding this machine's address on the way to ``address`` (rank 0's) — for rank
    0 itself, the one holding ``address``. None when it cannot be told (then gloo/NCCL choose), and never
    loopback (``lo``, 127.*: review N9): the other nodes cannot reach rank 0 there."""
    mine = address_towards(address) or address
    if mine.startswith("127."):
        return None
    try:
        import psutil  # installed with ipyparallel
        for name, addresses in psutil.net_if_addrs().items():
            if name != "lo" and any(a.family == socket.AF_INET and a.address == mine for a in addresses):
                return name
    except (ImportError, OSError):
        return None
    return None


IFNAME_VARIABLE = "DDP_TUTORIAL_IFNAME"


def interfaces_with_address() -> List[str]:
    """This machine's network interfaces that hold an IPv4 or IPv6 address (what gloo can use)."""
    import psutil  # installed with ipyparallel
    families = (socket.AF_INET, socket.AF_INET6)
    return sorted(name for name, addresses in psutil.net_if_addrs().items()
                  if any(a.family in families for a in addresses))


def check_interface(name: str) -> None:
    """Refuse ``DDP_TUTORIAL_IFNAME`` naming no interface of this machine with an address, in one line
    that names the variable (gloo's own text is an ``enforce fail`` deep in its sources)."""
    try:
        present = interfaces_with_address()
    except (ImportError, OSError):
        return
    if name not in present:
        from ..i18n import t
        raise RuntimeError(t("ipp.bad_ifname", variable=IFNAME_VARIABLE, name=name, host=socket.gethostname(),
                             names=", ".join(present)))


def use_interface(master_addr: str) -> Optional[str]:
    """Set GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME by :func:`interface_for` for a rank 0 on another
    node, unless set (``DDP_TUTORIAL_IFNAME`` sets both, once checked: :func:`check_interface`); nothing
    for a rank 0 on this machine."""
    chosen = os.environ.get(IFNAME_VARIABLE)
    if chosen:
        check_interface(chosen)
    else:
        if master_addr.startswith("127.") or master_addr == "localhost":
            return None
        chosen = interface_for(master_addr)
    if chosen:
        for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            os.environ.setdefault(name, chosen)
    return chosen


def where(cwd: str, paths: List[str], towards: Optional[str] = None) -> dict:
    """:func:`join_kernel`, and where this engine runs (a SLURM task: node, task id, local id) and
    the address the other nodes reach it on (:func:`own_address`; ``towards``: the controller)."""
    environ = os.environ
    return {
        "pid": join_kernel(cwd, paths),
        "host": environ.get("SLURMD_NODENAME") or socket.gethostname(),
        "address": own_address(towards),
        "procid": int(environ.get("SLURM_PROCID", "-1")),
        "localid": int(environ.get("SLURM_LOCALID", "-1")),
        "job_id": environ.get("SLURM_JOB_ID"),
    }


def warm_up() -> None:
    """Import what every rank needs (torch, the training code) once, ahead of the first call; with the cycle
    collector off, then frozen (collector.py: an engine lives on with these objects until it ends)."""
    from .. import collector
    with collector.loading():
        from .. import train  # noqa: F401 - imports torch, the model, the data code
        import torch._dynamo  # noqa: F401 - building the DDP wrapper imports it (and sympy) on first use: 1.4 s
    _install_data_cache()


# --------------------------------------------------------------------------------------
# The data set, once per engine


_DATA_CACHE: dict = {}


def _files_stamp(root) -> tuple:
    """Modification times of the files under the data root: a new staging invalidates the cache."""
    stamp = []
    for folder, _, names in os.walk(os.path.expanduser(str(root))):
        for name in names:
            try:
                stamp.append((name, os.stat(os.path.join(folder, name)).st_mtime_ns))
            except OSError:
                pass
    return tuple(sorted(stamp))


def forget_data() -> int:
    """Empty this engine's data cache (the next call loads from disk again); how many it held."""
    held = len(_DATA_CACHE)
    _DATA_CACHE.clear()
    return held


def _install_data_cache() -> None:
    """Make ``ddp_tutorial.data.load`` remember what it loaded, in this engine process only.
    The training code calls ``data.load`` by attribute, so later cells reuse the tensors."""
    from .. import data
    if getattr(data.load, "engine_cache", False):
        return
    original = data.load

    def load(dataset, root, train=True, first=None):
        key = (dataset, os.path.abspath(os.path.expanduser(str(root))), bool(train), first, _files_stamp(root))
        if key not in _DATA_CACHE:
            _DATA_CACHE.clear() if len(_DATA_CACHE) >= 4 else None
            _DATA_CACHE[key] = original(dataset, root, train=train, first=first)
        return _DATA_CACHE[key]

    load.engine_cache = True
    load.__doc__ = original.__doc__
    data.load = load


# --------------------------------------------------------------------------------------
# Rank 0's progress bar, published to the kernel


def _publishing_bar():
    """A tqdm that draws nothing here and publishes every bar of this call to the kernel.

    What is published is the whole history of this call's bars, ``{"bars": [[desc, done, total], …]}``,
    the last one still moving: the kernel looks every ``POLL_SECONDS`` and sees only the newest message,
    so an epoch that starts and ends between two looks would otherwise never be drawn there."""
    from ipyparallel.datapub import publish_data
    from tqdm.std import tqdm

    class PublishingBar(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs.update(file=open(os.devnull, "w"), mininterval=0.25)  # noqa: SIM115 - closed in close()
            self.entry = None
            super().__init__(*args, **kwargs)

        def display(self, msg=None, pos=None):
            if self.entry is None:
                self.entry = len(_BARS)
                _BARS.append(None)
            _BARS[self.entry] = [str(self.desc), int(self.n), int(self.total or 0)]
            publish_data({"bars": list(_BARS)})
            return True

        def close(self):
            if not self.disable:
                self.display()
            super().close()
            self.fp.close()

    return PublishingBar


_ORIGINAL_BAR: list = []
_BARS: list = []  # this call's bars on rank 0, in order: [desc, done, total]


def _show_progress_in_kernel() -> None:
    import tqdm.auto
    if not _ORIGINAL_BAR:
        _ORIGINAL_BAR.append(tqdm.auto.tqdm)
    _BARS.clear()  # a new call: a new history (the engine is reused between calls)
    tqdm.auto.tqdm = _publishing_bar()


def _draw_nothing() -> None:
    """``progress=False``: the engine's own tqdm again (meter.RunRecord shows no bar then)."""
    import tqdm.auto
    if _ORIGINAL_BAR:
        tqdm.auto.tqdm = _ORIGINAL_BAR[0]


# --------------------------------------------------------------------------------------
# One rank's work


def prepare(place: Place):
    """First thing on an engine: language, device, then where this rank stands."""
    from ..i18n import LANG_VARIABLE
    os.environ[LANG_VARIABLE] = place.lang
    use_interface(place.master_addr)  # before any process group: gloo and NCCL read it then
    from ..device_rule import choose_device
    from ..whoami import resolve_environment
    env = resolve_environment(rank=place.rank, world_size=place.world_size, local_rank=place.local_rank,
                              nproc_per_node=place.nproc_per_node, master_addr=place.master_addr,
                              master_port=place.master_port)
    if place.use_cuda:  # this rank's GPU by the one device rule (a task may see only its own GPU)
        choose_device("cuda", env)
    return env


def train_on_engine(config, place: Place):
    env = prepare(place)
    warm_up()
    if place.rank == 0 and config.progress:
        _show_progress_in_kernel()
    elif place.rank == 0:
        _draw_nothing()
    from ..train import train
    return train(config, env)


def launcher_environment(place: Place, slurm_names: bool = False, gpus_on_node: bool = False) -> dict:
    """What torchrun tells each process (and, with ``slurm_names``, what srun tells each task), for this
    engine's :class:`Place`: the names of :mod:`ddp_tutorial.launch_env`. ``gpus_on_node``: the code reads
    ``SLURM_GPUS_ON_NODE`` with ``[]``, so CPU engines set it too
    (:func:`ddp_tutorial.script_check.reads_gpus_on_node`)."""
    from .. import launch_env as names
    per_node = max(place.nproc_per_node, 1)
    values = {names.RANK: place.rank, names.LOCAL_RANK: place.local_rank, names.WORLD_SIZE: place.world_size,
              names.LOCAL_WORLD_SIZE: place.nproc_per_node, names.GROUP_RANK: place.rank // per_node,
              names.MASTER_ADDR: place.master_addr, names.MASTER_PORT: place.master_port}
    if slurm_names:
        nodes = -(-place.world_size // per_node)
        values.update({names.SLURM_PROCID: place.rank, names.SLURM_LOCALID: place.local_rank,
                       names.SLURM_NTASKS: place.world_size, names.SLURM_NPROCS: place.world_size,
                       names.SLURM_NTASKS_PER_NODE: place.nproc_per_node, names.SLURM_NNODES: nodes,
                       names.SLURM_NODEID: place.rank // per_node,
                       names.SLURM_CPUS_PER_TASK: max(1, (os.cpu_count() or 1) // per_node)})
        if place.use_cuda or gpus_on_node:  # GPU engines: one GPU each, as --gres gives a node's tasks; on CPU
            values[names.SLURM_GPUS_ON_NODE] = place.nproc_per_node  # engines only for code that cannot run without it
    return {key: str(value) for key, value in values.items()}


def _working_directory() -> Optional[str]:
    try:
        return os.getcwd()
    except OSError:  # the folder was removed under us: nothing to go back to
        return None


class LauncherEnvironment:
    """Set the launcher's variables and ``sys.argv`` for one call, and put back what was there after it,
    with the working directory (the engines are reused between calls: nothing of one call may leak into
    the next; a script's ``os.chdir`` would send a later call's relative paths elsewhere). The process
    group the function leaves open is destroyed, as the end of a torchrun process would."""

    def __init__(self, place: Place, argv: Optional[List[str]], slurm_names: bool = False,
                 gpus_on_node: bool = False):
        self.values = launcher_environment(place, slurm_names, gpus_on_node)
        self.argv = argv

    def __enter__(self):
        self.saved = {key: os.environ.get(key) for key in self.values}
        self.saved_argv = list(sys.argv)
        self.saved_cwd = _working_directory()
        os.environ.update(self.values)
        if self.argv is not None:
            sys.argv[:] = list(self.argv)
        return self

    def __exit__(self, *exc):
        import torch.distributed as dist
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        finally:
            for key, value in self.saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            sys.argv[:] = self.saved_argv
            if self.saved_cwd is not None and _working_directory() != self.saved_cwd:
                try:
                    os.chdir(self.saved_cwd)
                except OSError:  # removed meanwhile: stay where the call left us
                    pass
        return False


def _group_made_twice(error: BaseException) -> bool:
    return isinstance(error, (ValueError, RuntimeError)) and "default process group twice" in str(error)


def join(env, backend: str, timeout_seconds: float, device=None) -> None:
    """The process group of a notebook function's ranks (:func:`run_on_engine`): ``dist.init_process_group``
    with the story's clear errors and bounded wait (:func:`ddp_tutorial.process_group.rendezvous_errors`), as
    train.py makes its own on its page."""
    from datetime import timedelta

    import torch.distributed as dist

    from ..process_group import rendezvous_errors
    with rendezvous_errors(env, timeout_seconds):
        dist.init_process_group(backend, init_method=env.init_method, rank=env.rank, world_size=env.world_size,
                                timeout=timedelta(seconds=timeout_seconds), device_id=device)


def run_on_engine(function: Callable, args: tuple, kwargs: dict, backend: str, pg_timeout: float, place: Place,
                  group: bool = True, argv: Optional[List[str]] = None, slurm_names: bool = False,
                  gpus_on_node: bool = False):
    """One rank of :func:`ddp_tutorial.ipp.run`. ``group=True`` (the notebooks' functions): the process
    group is made here and ``function(env, *args, **kwargs)`` runs inside it. ``group=False`` (a
    torchrun-style function): ``function(*args, **kwargs)`` with the launcher's variables set and no
    group — it makes and closes its own, as under torchrun. Either way the variables and ``sys.argv`` are
    put back afterwards."""
    env = prepare(place)
    if place.rank == 0:  # a tqdm.auto bar of the user's function on rank 0 is drawn in the kernel too
        _show_progress_in_kernel()
    from ..i18n import t
    with LauncherEnvironment(place, argv, slurm_names, gpus_on_node):
        if not group:
            return function(*args, **kwargs)
        from ..device_rule import choose_device
        from .joined import every_rank_joined, joined
        join(env, backend, pg_timeout, choose_device("cuda", env) if backend == "nccl" else None)
        joined(place.rank)
        try:
            result = function(env, *args, **kwargs)
        except (ValueError, RuntimeError) as error:
            if _group_made_twice(error):
                raise RuntimeError(t("ipp.group_made_twice", error=str(error).splitlines()[0])) from None
            raise
        every_rank_joined(place.world_size, pg_timeout)
        return result


def run_script_on_engine(path: str, argv: List[str], place: Place, slurm_names: bool, gpus_on_node: bool = False):
    """One rank of :func:`ddp_tutorial.ipp.run_script`: the script file run as ``python path args…`` would
    run it (``__name__ == "__main__"``, ``sys.argv``, its folder first on the import path), with the
    launcher's variables set; its exit code: 0 → None, anything else → an error naming it."""
    import runpy
    prepare(place)
    from ..i18n import t
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)
    real_exit = os._exit

    def leave(code: int = 0) -> None:
        """``os._exit`` of the script's own thread (the end that avoids the teardown abort, docs/own-script.md)
        ends the script here, not the engine."""
        if threading.current_thread() is threading.main_thread():
            raise SystemExit(code)
        real_exit(code)

    os._exit = leave
    try:
        with LauncherEnvironment(place, [path, *argv], slurm_names, gpus_on_node):
            try:
                runpy.run_path(path, run_name="__main__")
            except SystemExit as stop:
                code = stop.code
                if isinstance(code, int) and code != 0:
                    raise RuntimeError(t("ipp.script_exit", path=path, code=int(code))) from None
                if code is not None and not isinstance(code, int):  # sys.exit("text"): Python's exit code 1
                    raise RuntimeError(t("ipp.script_exit_text", path=path, text=str(code))) from None
    finally:
        os._exit = real_exit
        if sys.path and sys.path[0] == folder:
            del sys.path[0]
        sys.stdout.flush()
        sys.stderr.flush()
    return None
