"""What every engine set has in common: the :class:`EngineSet` interface, the one kept set, and
the process helpers (alive, kill, shut down) that the local and the SLURM engine sets share.

An engine set is a running ipyparallel cluster — a controller, N engines, a client — plus the
answers the runner needs while it waits: is rank r's engine still there (:meth:`EngineSet.alive`),
how was it lost (:meth:`EngineSet.describe_loss`), has the whole set ended (:meth:`EngineSet.ended`),
and how to stop it (:meth:`EngineSet.stop`). :mod:`.local` and :mod:`.slurm` implement it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, List, Optional

from ..whoami import find_free_port
from ..i18n import TutorialError, t


START_TIMEOUT = 120.0   # seconds for the engines to register with the controller
# ipyparallel's engine waits 5 s for the controller's answer to its registration, then exits: a controller
# slowed by a busy machine (a login node, a CI runner) once left a kernel waiting START_TIMEOUT for engines
# that were long gone. The engines wait as long as the kernel does.
ENGINE_ARGS = (f"--IPEngine.timeout={START_TIMEOUT:.0f}",)


def check_kernel_has_no_cuda() -> None:
    """Refuse to launch when this process (the notebook kernel) has initialised CUDA."""
    import sys
    torch = sys.modules.get("torch")  # not imported at all: certainly no CUDA
    if torch is not None and torch.cuda.is_initialized():
        raise TutorialError("ipp.kernel_cuda")


def check_count(n) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise TutorialError("ipp.bad_n", n=n)


# --------------------------------------------------------------------------------------
# Processes, by psutil handle (a handle remembers its process's start time: killing it later
# can never hit an unrelated process that reused the pid)


def alive(pid: int) -> bool:
    import psutil  # installed with ipyparallel
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def with_helpers(pids: List[int]) -> List[Any]:
    """psutil handles of ``pids`` and of all their descendants (each engine starts a "nanny")."""
    import psutil
    processes = []
    for pid in pids:
        try:
            process = psutil.Process(pid)
            processes += [process] + process.children(recursive=True)
        except psutil.NoSuchProcess:
            pass
    return processes


def still_running(processes: List[Any]) -> List[Any]:
    import psutil
    running = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                running.append(process)
        except psutil.NoSuchProcess:
            pass
    return running


def kill(processes: List[Any], wait: float = 10.0) -> List[int]:
    """SIGKILL ``processes`` and wait until they are gone; returns the pids still there."""
    import psutil
    for process in still_running(processes):
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and still_running(processes):
        time.sleep(0.05)
    return [process.pid for process in still_running(processes)]


def launcher_pids(cluster) -> List[int]:
    """The engine pids ipyparallel's launchers know (used when the engines never answered)."""
    pids = []
    for engine_set in getattr(cluster, "engines", {}).values():
        pids += [launcher.pid for launcher in getattr(engine_set, "launchers", {}).values() if launcher.pid > 0]
    return pids


def shutdown(cluster, client, processes: List[Any], force: bool = False) -> List[int]:
    """Stop the engines (``force``: SIGKILL them first), then the controller; make sure that
    no engine nor helper process is left. Returns the pids that would not go."""
    if force:
        kill(processes)
    if client is not None:
        try:
            if not force:  # ask the engines to exit cleanly (exit code 0, no alarming logs)
                client.shutdown(targets="all", block=True)
                deadline = time.monotonic() + 5.0
                while time.monotonic() < deadline and still_running(processes):
                    time.sleep(0.05)
            client.close()
        except Exception:  # noqa: BLE001 - the engines may already be gone
            pass
    try:
        cluster.stop_cluster_sync()  # the controller (and any engine left: SIGTERM, then SIGKILL;
    except Exception:  # noqa: BLE001   SLURM engines: scancel of their job)
        pass
    return kill(processes)


# --------------------------------------------------------------------------------------
# The interface


PORT_ANSWER_SECONDS = 30.0   # rank 0's engine answers "which port" in milliseconds when it is well


@dataclass
class EngineSet:
    """A running cluster: the controller, the engines (in rank order) and a client."""

    cluster: Any           # ipyparallel.Cluster
    client: Any            # ipyparallel.Client
    ids: List[int]         # engine ids, in rank order
    pids: List[int]        # the engines' process ids, in rank order (on their own hosts)
    device: str            # "cuda" (one GPU per engine) or "cpu"
    processes: List[Any] = field(default_factory=list)  # psutil handles: the engines, helpers, controller
    master_addr: str = "127.0.0.1"     # where rank 0 listens: this machine, or rank 0's node
    guard: Any = None                  # the watchdog that ends the engines when the kernel dies

    @property
    def size(self) -> int:
        return len(self.ids)

    def local_rank(self, rank: int) -> int:
        """``rank``'s place on its node (local engines: all on this machine)."""
        return rank

    def per_node(self, rank: int, n: int) -> int:
        """How many of the first ``n`` ranks share ``rank``'s node (local engines: all of them)."""
        return n

    def controller_alive(self) -> bool:
        return alive(self.cluster.controller.pid)

    def alive(self, rank: int) -> bool:
        """Is the engine of ``rank`` still there?"""
        return alive(self.pids[rank])

    def describe_loss(self, rank: int) -> str:
        """How the engine of ``rank`` was lost (an exit code, a signal, a job state)."""
        return t("ipp.gone")

    def is_stopped(self, rank: int) -> bool:
        """Is the engine of ``rank`` stopped (SIGSTOP, Ctrl-Z)? Its peers then wait for it in vain."""
        from ..supervisor import is_stopped
        return is_stopped(self.pids[rank])

    def ended(self) -> Optional[str]:
        """A failure text when the whole set has ended under us (a SLURM job), else ``None``."""
        return None

    def master_port(self) -> int:
        """Rank 0's port, chosen and held open by rank 0's engine until its process group takes it
        (:func:`held_port.hold_master_port`: no other process can take it in between)."""
        from . import held_port
        reply = self.client[self.ids[0]].apply_async(held_port.hold_master_port, self.master_addr)
        try:
            return int(reply.get(timeout=PORT_ANSWER_SECONDS))
        except Exception:  # noqa: BLE001 - engine 0 stopped, lost or busy: the run names it; a port from here
            return find_free_port(self.master_addr)

    def stop(self, force: bool = False) -> List[int]:
        """Stop every engine and the controller; returns the pids that would not go."""
        leftover = shutdown(self.cluster, self.client, self.processes, force=force)
        if self.guard is not None:
            self.guard.release()
        return leftover

    def stopped_text(self) -> str:
        return t("ipp.stopped")


_kept: Optional[EngineSet] = None


def current() -> Optional[EngineSet]:
    """The running engine set kept by an earlier call (``keep=True``), if any."""
    return _kept


def keep(engines: Optional[EngineSet]) -> None:
    global _kept
    _kept = engines


def stop(force: bool = False) -> None:
    """Stop the kept engine set (controller and engines), if there is one; ``force``: SIGKILL the
    engines at once (they may be blocked in a collective)."""
    global _kept
    engines, _kept = _kept, None
    if engines is not None:
        engines.stop(force=force)
        print(engines.stopped_text(), flush=True)


def stop_silently() -> None:
    """At the kernel's exit: SIGKILL the kept engines, print nothing (atexit)."""
    global _kept
    engines, _kept = _kept, None
    if engines is not None:
        try:
            engines.stop(force=True)
        except Exception:  # noqa: BLE001 - the interpreter is going away
            pass
