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
    0 itself, the one holding ``address``. None when it cannot be told (then gloo/NCCL choose)."""
    mine = address_towards(address) or address
    try:
        import psutil  # installed with ipyparallel
        for name, addresses in psutil.net_if_addrs().items():
            if any(a.family == socket.AF_INET and a.address == mine for a in addresses):
                return name
    except (ImportError, OSError):
        return None
    return None


def use_interface(master_addr: str) -> Optional[str]:
    """Set GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME by :func:`interface_for` for a rank 0 on another
    node, unless set (``DDP_TUTORIAL_IFNAME`` sets both); nothing for a rank 0 on this machine."""
    chosen = os.environ.get("DDP_TUTORIAL_IFNAME")
    if not chosen:
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
    """Import what every rank needs (torch, the training code) once, ahead of the first call."""
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

    def load(dataset, root, train=True):
        key = (dataset, os.path.abspath(os.path.expanduser(str(root))), bool(train), _files_stamp(root))
        if key not in _DATA_CACHE:
            _DATA_CACHE.clear() if len(_DATA_CACHE) >= 4 else None
            _DATA_CACHE[key] = original(dataset, root, train=train)
        return _DATA_CACHE[key]

    load.engine_cache = True
    load.__doc__ = original.__doc__
    data.load = load


# --------------------------------------------------------------------------------------
# Rank 0's progress bar, published to the kernel


def _publishing_bar():
    """A tqdm that draws nothing here and publishes (epoch, steps done, steps) to the kernel."""
    from ipyparallel.datapub import publish_data
    from tqdm.std import tqdm

    class PublishingBar(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs.update(file=open(os.devnull, "w"), mininterval=0.25)  # noqa: SIM115 - closed in close()
            super().__init__(*args, **kwargs)

        def display(self, msg=None, pos=None):
            publish_data({"progress": [str(self.desc), int(self.n), int(self.total or 0)]})
            return True

        def close(self):
            if not self.disable:
                self.display()
            super().close()
            self.fp.close()

    return PublishingBar


_ORIGINAL_BAR: list = []


def _show_progress_in_kernel() -> None:
    import tqdm.auto
    if not _ORIGINAL_BAR:
        _ORIGINAL_BAR.append(tqdm.auto.tqdm)
    tqdm.auto.tqdm = _publishing_bar()


def _draw_nothing() -> None:
    """``progress=False``: the engine's own tqdm again (runstate shows no bar then)."""
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


def run_on_engine(function: Callable, args: tuple, kwargs: dict, backend: str, pg_timeout: float, place: Place):
    env = prepare(place)
    if place.rank == 0:  # a tqdm.auto bar of the user's function on rank 0 is drawn in the kernel too
        _show_progress_in_kernel()
    import torch.distributed as dist

    from ..device_rule import choose_device
    from ..process_group import join
    join(env, backend, pg_timeout, choose_device("cuda", env) if backend == "nccl" else None)
    try:
        return function(env, *args, **kwargs)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def free_port() -> int:
    """A free port on this engine's node (rank 0's, for SLURM engines)."""
    from ..whoami import find_free_port
    return find_free_port("")
