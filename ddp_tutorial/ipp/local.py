"""Local engines: N ipyparallel engines on this machine, one per GPU or N CPU engines."""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import time
import uuid
from typing import Optional

from ..i18n import TutorialError, t
from ..threads import prefer_passive_openmp
from ..validate import check_processes
from . import engines as es
from . import remote
from .progress import Registering
from .watchdog import Guard


SWEEP_SECONDS = 2.0  # after an interrupted start: how long nothing new must appear


def gpu_count() -> int:
    """GPUs of this machine, counted without initialising CUDA in this process."""
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _family(cluster, engines: bool = True) -> list:
    """psutil handles of the controller and its descendants (ipyparallel's schedulers), and of the
    engines and their nannies (``engines``): everything this cluster started on this machine."""
    controller = getattr(cluster, "controller", None)
    pids = [controller.pid] if controller is not None and getattr(controller, "pid", None) else []
    return es.with_helpers(pids + (es.launcher_pids(cluster) if engines else []))


def _stop_everything(cluster, client) -> None:
    """Stop a cluster whose start failed or was interrupted. In a kernel, ipyparallel runs the start
    in its own thread, which goes on after the stop button: sweep until nothing new appears."""
    es.shutdown(cluster, client, _family(cluster), force=True)
    quiet_since = time.monotonic()
    deadline = quiet_since + SWEEP_SECONDS * 4
    while time.monotonic() - quiet_since < SWEEP_SECONDS and time.monotonic() < deadline:
        time.sleep(0.2)
        if es.still_running(_family(cluster)):
            es.kill(_family(cluster))
            quiet_since = time.monotonic()


# Every engine of a set, and every process its calls start (a script's helper in a session of its own,
# reparented to init once the engine goes), carries this variable with the set's own value.
MARKER_VARIABLE = "DDP_TUTORIAL_ENGINE_SET"


def new_marker() -> str:
    return f"{os.getpid()}-{uuid.uuid4().hex}"


def marked(marker: str) -> list:
    """psutil handles of this machine's processes whose environment carries ``marker`` (Linux's
    /proc/PID/environ: the environment a process started with; only our own processes are readable)."""
    import psutil
    needle = f"\0{MARKER_VARIABLE}={marker}\0".encode()
    found = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in b"\0" + f.read() + b"\0":
                    found.append(psutil.Process(int(name)))
        except (OSError, psutil.Error):
            pass
    return found


class LocalEngines(es.EngineSet):
    """Engines that are processes of this machine: alive means their pid is."""

    controller_processes: list = []  # the controller and its schedulers, found at the start
    marker: str = ""                 # the value of MARKER_VARIABLE in the engines' environment

    def started_by_calls(self, descendants: bool = True) -> list:
        """What the calls started on the engines and left running: the processes that carry the set's
        marker (a helper whose engine is gone has ppid 1) and, with ``descendants``, the engines' children
        now (a helper started with an environment of its own)."""
        import psutil
        found = marked(self.marker) if self.marker else []
        for process in self.processes if descendants else []:
            try:
                if process.is_running():  # the same process as at the start, not a reused pid
                    found += process.children(recursive=True)
            except psutil.Error:
                pass
        known = {p.pid for p in self.processes + self.controller_processes}
        return [p for p in found if p.pid not in known]

    def stop(self, force: bool = False) -> list:
        """Stop the engines and the controller, then what the calls started on the engines; a controller
        that died leaves its schedulers as orphans (ppid 1): they are killed too, before the watchdog is
        released."""
        started = self.started_by_calls()
        leftover = es.shutdown(self.cluster, self.client, self.processes, force=force)
        leftover += es.kill(self.controller_processes + started + self.started_by_calls(descendants=False))
        if self.guard is not None:
            self.guard.release()
        return leftover

    def describe_loss(self, rank: int) -> str:
        code = self.exit_code(self.pids[rank])
        if code is None:
            return t("ipp.gone")
        if code < 0:
            try:
                return t("ipp.signal", name=signal.Signals(-code).name)
            except ValueError:
                pass
        return t("ipp.exit_code", code=code)

    def exit_code(self, pid: int) -> Optional[int]:
        """The exit code of a finished engine (negative: killed by that signal), as ipyparallel saw it."""
        import psutil
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            for engine_set in list(self.cluster.engines.values()):
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


class EngineExited(RuntimeError):
    """An engine process ended before every engine registered (its log's reason as the text)."""


#: An engine log's line that says why: a record at level ERROR or above, or the last line of a traceback.
WHY = re.compile(r"\b(?:ERROR|CRITICAL|FATAL) \| (\S.*)|^(\w+(?:Error|Exception): .*)")


def engine_log_tail(cluster) -> str:
    """Why an engine of ``cluster`` stopped, as its log says ("Registration timed out after 5.0 seconds",
    "ModuleNotFoundError: …"), else the log's last line; "" without a log. Read before the cluster is
    stopped: ipyparallel removes the logs of engines it stops."""
    import glob
    profile, cluster_id = getattr(cluster, "profile_dir", ""), getattr(cluster, "cluster_id", "")
    if not profile or not cluster_id:
        return ""
    last, why = "", ""
    for path in sorted(glob.glob(os.path.join(profile, "log", f"ipengine-{cluster_id}-*.log"))):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = [line.strip() for line in f if line.strip()]
        except OSError:
            continue
        last = lines[-1] if lines else last
        for line in lines:
            found = WHY.search(line)
            if found and not why:  # the first reason: what follows it is often its consequence
                why = found.group(1) or found.group(2)
    return (why or last)[:300]


def _engine_launcher():
    """ipyparallel's launcher of this machine's engines: forked from the ranks' server, which imported torch once
    for all of them (:mod:`.forked`), where that was checked (Linux, CPython 3.11–3.13); elsewhere ipyparallel's
    own, a fresh interpreter per engine."""
    if sys.platform != "linux":
        return "local"
    from . import forked
    if sys.version_info[:2] not in forked.CHECKED_PYTHONS:
        return "local"
    forked.start_server()
    return forked.ForkedEngineSetLauncher


DEVICES = ("auto", "cuda", "cpu")
# CPU engines see no GPU (set for them only, never in the kernel): on a 1-GPU session two CPU engines would
# otherwise both pick cuda:0 by the device rule (ipp.train, 08's train_ddp) and refuse to share it.
CPU_ENGINE_ENVIRONMENT = {"CUDA_VISIBLE_DEVICES": ""}


def engine_kind(n: Optional[int], device: str, gpus: int) -> tuple:
    """(engines, "cuda" | "cpu") for ``n`` engines asked on ``device`` where ``gpus`` GPUs are visible:
    ``auto`` is one engine per GPU when there are enough GPUs, else CPU engines (a 0- or 1-GPU session
    still runs every notebook); ``cuda`` with too few GPUs is refused, naming the call that works."""
    if device not in DEVICES:
        raise TutorialError("device.unknown", device=device)
    if device == "cpu":
        gpus = 0
    if device == "cuda" and not gpus:
        raise TutorialError("ipp.no_gpu_engines", n=n or 2)
    n = (gpus or 2) if n is None else n
    es.check_count(n)
    if device == "cuda" and n > gpus:
        raise TutorialError("ipp.too_many_gpu_engines", n=n, gpus=gpus)
    return n, "cuda" if gpus and n <= gpus else "cpu"


def start(n: Optional[int] = None, device: str = "auto") -> LocalEngines:
    """Start ``n`` local engines, or reuse the kept ones when there are enough (see ipp.start)."""
    gpus = gpu_count() if device in ("auto", "cuda") else 0
    n, kind = engine_kind(n, device, gpus)
    check_processes(n, option="n")  # engines on this machine: as many as it can start (F01)

    prefer_passive_openmp()  # the engines inherit the kernel's environment
    kept = es.current()
    if isinstance(kept, LocalEngines):
        healthy = kept.controller_alive() and all(kept.alive(r) for r in range(kept.size))
        if healthy and kept.device == kind and kept.size >= n:
            return kept  # quietly: the notebooks' checked outputs must not show pids
    es.stop()
    if kind == "cpu" and gpus:  # one line, in the user's language: why there are no GPU engines
        print(t("ipp.cpu_instead", n=n, gpus=gpus), flush=True)

    import ipyparallel

    began = time.perf_counter()
    # ERROR: ipyparallel logs an engine's whole output as a warning whenever it exits with a
    # non-zero code, which ipyparallel 9's engines do even on a clean shutdown; our own
    # messages say what went wrong, and the logs stay in the profile's log folder.
    cluster = ipyparallel.Cluster(n=n, log_level=logging.ERROR, engine_launcher_class=_engine_launcher())
    client = None
    guard = None
    registered = [0]
    marker = new_marker()
    try:
        with Registering(n, lambda: registered[0]):
            # ipyparallel's start_cluster, with the engines' own environment (CPU engines see no GPU)
            cluster.start_controller_sync()
            time.sleep(cluster.delay or 0)
            environment = {MARKER_VARIABLE: marker, **(CPU_ENGINE_ENVIRONMENT if kind == "cpu" else {})}
            cluster.start_engines_sync(n, environment=environment, engine_args=list(es.ENGINE_ARGS))
            # Guarded from now on: a kernel killed while the engines register takes them along.
            guard = Guard([p.pid for p in _family(cluster)], files=[cluster.cluster_file])
            client = cluster.connect_client_sync()
            deadline = time.monotonic() + es.START_TIMEOUT
            while len(client.ids) < n:  # our own wait: the display shows the count as it grows
                registered[0] = len(client.ids)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{registered[0]} of {n} engines registered")
                if len(es.still_running([p for p in _family(cluster) if p.pid in es.launcher_pids(cluster)])) < n:
                    raise EngineExited(engine_log_tail(cluster) or t("ipp.gone"))  # at once, with its reason
                time.sleep(0.1)
            registered[0] = len(client.ids)
        ids = sorted(client.ids)[:n]
        # Rank r runs on the r-th engine in this list, whatever its engine id. Each engine
        # works in the notebook's folder and can import what the notebook imports.
        pids = [client[eid].apply_sync(remote.join_kernel, os.getcwd(), list(sys.path)) for eid in ids]
        processes = es.with_helpers(es.launcher_pids(cluster))
        controller = _family(cluster, engines=False)  # the controller and its schedulers
        guard.update([p.pid for p in processes + controller])
    except BaseException as error:  # the stop button (KeyboardInterrupt) too: stop what was started
        why = engine_log_tail(cluster)  # before the stop, which removes the engines' logs
        _stop_everything(cluster, client)
        if guard is not None:
            guard.release()
        if not isinstance(error, Exception):
            raise
        if isinstance(error, EngineExited):
            raise TutorialError("ipp.engine_exited", detail=str(error)) from None
        detail = f"{error}; {why}" if why else str(error)
        raise TutorialError("ipp.start_failed", n=n, timeout=es.START_TIMEOUT, detail=detail[:400]) from None
    engines = LocalEngines(cluster=cluster, client=client, ids=ids, pids=pids, device=kind, processes=processes,
                           guard=guard)
    engines.controller_processes = controller
    engines.marker = marker
    client[ids].apply_async(remote.warm_up)  # imports, while the notebook goes on
    es.keep(engines)
    print(t("ipp.started", n=n, seconds=time.perf_counter() - began, pids=pids, device=kind), flush=True)
    return engines
