"""Local engines forked from the ranks' server, not started as fresh interpreters.

ipyparallel starts each local engine as ``python -m ipyparallel.engine``: a new interpreter that imports
torch (and, at its first DDP, ``torch._dynamo``), about 3 CPU-s per engine here before it runs one line of
the notebook's work, and as much again on a login node's shared file system. The ranks of
:mod:`ddp_tutorial.spawn` already come from a server that imported torch once
(:func:`ddp_tutorial.supervisor.rank_context`); these launchers fork each engine from that same server, so
an engine set costs one import of torch per kernel, not one per engine.

An engine forked here is what ``ipengine`` would be: ipyparallel's own ``main`` with the same arguments, its
output in the same log file, in a session of its own (the kernel's Ctrl-C does not reach it), in the
launcher's folder, with the launcher's environment. What differs, and why it is safe:

* the server imports only (no CUDA call, no thread): each engine initialises its own GPU, as a spawned one;
* its command line is the server's: its name (``ps -o comm``) is ``ipengine``;
* it ends with the process that started it, even if that one is killed (as the ranks do,
  :func:`ddp_tutorial.supervisor.start_as_launched`), and it is not one of ``multiprocessing``'s children
  of the kernel: an engine left running (a stopped one too) never holds up the kernel's exit.
"""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
from typing import Optional

from multiprocessing import context, forkserver, popen_forkserver, spawn, util
from multiprocessing import process as mp_process

import psutil
from ipyparallel.cluster.launcher import LocalEngineLauncher, LocalEngineSetLauncher, ProcessStateError

#: What an engine imports before its first task, imported once by the server (with torch, see
#: :data:`ddp_tutorial.supervisor.SERVER_IMPORTS`); where the server was started by an earlier launch in this
#: process without them, each engine imports them itself.
ENGINE_IMPORTS = ("ipyparallel.engine.app", "ddp_tutorial.train", "ddp_tutorial.ipp.remote")
NAME = "ipengine"  # the engine's name in ps and top (its command line is the server's)
#: The Pythons whose multiprocessing :class:`_EnginePopen` follows (checked with each: tests/test_forked_engines.py
#: on 3.11, the preparation without ``__main__`` on 3.12 and 3.13); on another, ipp uses ipyparallel's own launcher.
CHECKED_PYTHONS = ((3, 11), (3, 12), (3, 13))


def start_server() -> None:
    """Start the ranks' server here (once per process) with what engines import; the engine launchers below
    fork from it."""
    from ..supervisor import rank_context
    rank_context(_engine, ENGINE_IMPORTS)


def _engine(argv: list, launched: dict, output_file: str, work_dir: str) -> None:
    """The engine, in the forked process: ``ipengine ARGV`` as ipyparallel's launcher would start it."""
    from .. import supervisor
    supervisor.start_as_launched(NAME, launched)
    os.setsid()  # its own session, as ipyparallel's launcher gives it: the kernel's Ctrl-C is not its
    with open(output_file, "ab") as out, open(os.devnull, "rb") as stdin:
        for fd, target in ((0, stdin), (1, out), (2, out)):
            os.dup2(target.fileno(), fd)
    os.chdir(work_dir or ".")
    signal.pthread_sigmask(signal.SIG_UNBLOCK, supervisor.HELD_SIGNALS)  # held in the server only
    import atexit
    atexit.unregister(os._exit)  # the server's quick exit (ddp_tutorial.server_exit): an engine's code decides
    code = 0
    try:
        sys.argv = [NAME, *argv]
        from ipyparallel.engine.app import main
        main(argv=list(argv))
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: BLE001 - written to the engine's log, as a fresh interpreter would
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        # What the engine's work registered (atexit) runs; the interpreter's teardown of torch, which saves
        # nothing, does not (as the ranks, supervisor._child_entry).
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class ForkedProcess(psutil.Process):
    """The ``psutil.Process`` ipyparallel's launcher keeps for an engine, with the exit code (negative: the signal)
    that only the engine's parent, the server, can read: multiprocessing passes it on."""

    def __init__(self, process):
        super().__init__(process.pid)
        self._process = process
        self._lock = threading.Lock()  # the launcher's waiting thread and LocalEngines.exit_code both wait

    def wait(self, timeout: Optional[float] = None):
        with self._lock:
            self._process.join(timeout)
            code = self._process.exitcode
        if code is None:
            raise psutil.TimeoutExpired(timeout, self.pid)
        return code


#: The preparation's keys that make a child of multiprocessing import the launcher's main module.
MAIN_MODULE_KEYS = ("init_main_from_name", "init_main_from_path")


class _EnginePopen(popen_forkserver.Popen):
    """A child of the fork server that does not import this program's ``__main__``.

    multiprocessing prepares every child as if it might need the launcher's main module (a rank's function can
    live there) and runs it again in the child as ``__mp_main__``: a script without ``if __name__ ==
    "__main__":`` would start its engines again inside each engine, and a script read from stdin cannot be found
    at all ("No such file or directory: '<stdin>'"). An engine needs none of it — ipyparallel's engine imports
    what the notebook's cells send — so its preparation leaves the main module out: what
    ``popen_forkserver.Popen._launch`` does (CPython 3.11–3.13, :data:`CHECKED_PYTHONS`), with
    :data:`MAIN_MODULE_KEYS` removed (tests/test_forked_engines.py fails if that stops working)."""

    def _launch(self, process_obj):
        prep_data = spawn.get_preparation_data(process_obj._name)
        for key in MAIN_MODULE_KEYS:
            prep_data.pop(key, None)
        buf = io.BytesIO()
        context.set_spawning_popen(self)
        try:
            context.reduction.dump(prep_data, buf)
            context.reduction.dump(process_obj, buf)
        finally:
            context.set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)
        parent_w = os.dup(w)  # the child's sentinel of its parent (mp.parent_process())
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _EngineProcess(context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj):
        return _EnginePopen(process_obj)


class ForkedEngineLauncher(LocalEngineLauncher):
    """One engine, forked from the server (see the module's text)."""

    def start(self):
        if self.state != "before":
            raise ProcessStateError(f"The process was already started and has state: {self.state}")
        from ..supervisor import launched_now
        launched = launched_now({**os.environ, **self.get_env()})
        argv = self.args[len(self.engine_cmd):]  # after "python -m ipyparallel.engine": the cluster's, ours
        engine = _EngineProcess(target=_engine, args=(argv, launched, self.output_file, self.work_dir), name=NAME)
        engine.start()
        # Not one of multiprocessing's children here: at this process's exit it would join them, and wait for
        # good for an engine that is stopped (SIGSTOP) or blocked; the engine ends with us instead.
        mp_process._children.discard(engine)
        self.pid = engine.pid
        self.process = ForkedProcess(engine)
        self.notify_start(self.pid)
        self._start_waiting()


class ForkedEngineSetLauncher(LocalEngineSetLauncher):
    """N engines forked from the server: ``ipyparallel.Cluster(engine_launcher_class=...)``."""

    launcher_class = ForkedEngineLauncher
