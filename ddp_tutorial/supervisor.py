"""A process supervisor: start N local processes, watch them, name the first real failure.

Unlike a bare ``torch.multiprocessing.spawn`` it watches its children: when one fails, it
names the failed rank, stops the others (SIGTERM, then SIGKILL after a grace period) and
exits non-zero, so a broken job ends in seconds instead of hanging until its time limit.
It names the *first real* failure: a rank that exits with code 3 (it lost contact) or is
aborted by SIGABRT (NCCL's watchdog, after a collective timed out because a peer died) is a
victim; the supervisor waits a few seconds for the cause, names it, and lists the victims as
consequences, with the line number of NCCL's "Watchdog caught collective operation timeout"
in the job's error file when stderr is a file (SLURM's ``.err``).
Signals it receives (SIGUSR1 from SLURM before the time limit, SIGTERM) are passed on to
the children; Ctrl-C stops them. The children are forked from one server process that imported
torch once (:func:`rank_context`): N ranks cost one import of torch, not N. They end with this
launcher, killed or not (:func:`_end_with_the_launcher`), and so does the server.
It knows nothing of training: :mod:`ddp_tutorial.spawn` gives it the training function.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import multiprocessing.connection
import multiprocessing.forkserver
import os
import signal
import sys
import time
from typing import Callable, List, Mapping, Optional, Sequence, Tuple

from .exits import LOST_PEER as EXIT_LOST_PEER
from .exits import REQUEUE as EXIT_REQUEUE
from .failures import WATCHDOG_LINE
from .preemption import stop_listening
from .i18n import TutorialError, t
from .preemption import EARLY_STOP_VARIABLE, early_signal
from .threads import prefer_passive_openmp


GRACE_SECONDS = 5.0
CAUSE_WAIT_SECONDS = 10.0  # how long to wait for the real cause after a rank lost contact


def _die_with_parent(name: str) -> None:
    """Ask Linux to SIGKILL this process when its parent dies: no orphans. And name it (``rank3`` in
    ``top`` and ``ps -o comm``): forked from the server, its command line is the server's."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        libc.prctl(15, name.encode()[:15])  # PR_SET_NAME = 15
    except OSError:
        pass


#: Imported once, by the server the ranks are forked from: what every rank imports before its first step.
#: ``torch._dynamo``: DistributedDataParallel's constructor imports it (about 1 CPU-s per rank, measured
#: with torch 2.14); where a torch has no such module the server skips the name.
SERVER_IMPORTS = ("torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo")
#: Held (blocked) in the server and in each rank until the rank's handlers are in place: SLURM signals every
#: process of a step, and SIGUSR1's default action would end the server, and with it every rank. SIGINT too: a
#: notebook's stop button signals the kernel's whole process group, and ended a server that was importing
#: torch for the engines (ipp/forked.py); once it serves, the server ignores SIGINT (CPython's forkserver).
HELD_SIGNALS = frozenset({signal.SIGUSR1, signal.SIGTERM, signal.SIGINT})


def rank_context(function: Callable, preload: Sequence[str] = ()) -> mp.context.BaseContext:
    """Where the ranks come from: ``multiprocessing``'s fork server, started here once per launcher process,
    imports torch (and ``function``'s module, and ``preload``) and forks a rank for each request.

    A spawned rank is a fresh interpreter that imports torch by itself: 2 CPU-s each with torch's CUDA build
    here, and on a cluster N processes per node reading thousands of files from a shared file system at
    once. A forked rank starts with those modules in memory. It is still safe with CUDA: the server only
    imports (no CUDA call, no thread pool), so every rank initialises its own GPU as a spawned one does.
    What a rank takes from this process at its start — the environment, the open-files limit — is passed
    with it (:func:`_as_launched`): the server's own are those it started with."""
    prefer_passive_openmp()  # before the server imports torch: on a busy machine the ranks' OpenMP threads sleep
    context = mp.get_context("forkserver")
    modules = [*SERVER_IMPORTS, *preload]
    if function.__module__ != "__main__":  # a script's __main__ is imported by each rank, as with spawn
        modules.append(function.__module__)
    context.set_forkserver_preload(["ddp_tutorial.server_start", *modules, "ddp_tutorial.server_exit"])  # see them
    held = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)  # the server starts with them held
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    return context


def _answer(question: Callable, to) -> None:
    _die_with_parent("question")
    _end_with_the_launcher()
    to.send(question())
    to.close()


def answer_in_server(question: Callable, preload: Sequence[str] = ()):
    """``question()`` asked in a process forked from the ranks' server (the one :func:`rank_context` starts), and its
    answer: what a rank will see, such as its GPUs, without importing torch in this launcher. The process ends
    at once; whatever it initialised (CUDA) stays with it, never in the server. If it gives no answer (it
    failed: its error is on stderr), the question is asked here, where its error is this launcher's."""
    context = rank_context(question, preload)
    receive, send = context.Pipe(duplex=False)
    asker = context.Process(target=_answer, args=(question, send), name="question")
    asker.start()
    send.close()
    try:
        return receive.recv()
    except EOFError:
        return question()
    finally:
        receive.close()
        asker.join()


def launched_now(environ: Optional[Mapping[str, str]] = None) -> dict:
    """What a process forked from the server takes from its launcher, as it is now: the environment (``environ``,
    or this process's), the open-files limit, the process group (see :mod:`ddp_tutorial.server_exit`)."""
    import resource
    return {"environ": dict(os.environ if environ is None else environ),
            "open_files": resource.getrlimit(resource.RLIMIT_NOFILE), "group": os.getpgrp()}


def _as_launched(launched: dict) -> None:
    """Give this rank the environment, the open-files limit and the process group of its launcher at the moment
    it was started (:func:`launched_now`). The server has a group of its own; the ranks are in the launcher's,
    so that a signal to it (a terminal's, a Jupyter kernel's SIGKILL) reaches them as it would a spawned rank."""
    import resource
    with contextlib.suppress(OSError):  # the launcher's group is gone: the rank ends with it anyway
        os.setpgid(0, launched["group"])
    for name in set(os.environ) - set(launched["environ"]):
        del os.environ[name]
    os.environ.update(launched["environ"])
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, launched["open_files"])
    except (ValueError, OSError):
        pass  # the server's limit stays: ensure_open_files checked the launcher's


def _end_with_the_launcher() -> None:
    """A rank ends when its launcher ends, even killed (SIGKILL, the OOM killer, one task's scancel). Its parent
    is the server, so ``PR_SET_PDEATHSIG`` alone would wait for the server, and the server waits for every
    holder of its "alive" pipe: the launcher and, in CPython's fork server, every rank it forked. So:

    1. this rank closes its copy of that pipe (``_forkserver_alive_fd``, a private name of CPython's
       ``multiprocessing.forkserver``, 3.8 to 3.13): the launcher's end is the server's end, and the kernel
       then kills each rank, a stopped one too (tests/test_rank_server.py fails if this stops working);
    2. a thread waits for the launcher (``multiprocessing.parent_process()``, public) and ends this rank: the
       same without the private name, except for a rank stopped at that moment (it ends when continued)."""
    import threading
    from multiprocessing import forkserver
    server = getattr(forkserver, "_forkserver", None)
    alive = getattr(server, "_forkserver_alive_fd", None)
    if isinstance(alive, int):
        os.close(alive)
        server._forkserver_alive_fd = None  # a server started from this rank is its own, as anywhere
    launcher = mp.parent_process()
    if launcher is not None:
        threading.Thread(target=lambda: (launcher.join(), os.kill(os.getpid(), signal.SIGKILL)),
                         name="end-with-launcher", daemon=True).start()


def start_as_launched(name: str, launched: dict) -> None:
    """What every process forked from the server does first (a rank here, an engine in ``ipp/forked.py``): take
    ``name``, end with its launcher (and with the server), and take the launcher's environment and open-files
    limit of the moment it was started."""
    _die_with_parent(name)
    _end_with_the_launcher()
    _as_launched(launched)


def _child_entry(local_rank: int, function: Callable, args: tuple, launched: dict) -> None:
    start_as_launched(mp.current_process().name, launched)
    from .preemption import remember_early_signal
    remember_early_signal()  # SIGUSR1 before training starts: remembered, not fatal
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops us
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_SIGNALS)  # one held since the fork arrives now
    from .entry import run_and_exit
    code = run_and_exit(function, local_rank, *args)
    # The rank's work is done and on disk (results and checkpoints are written atomically, the group
    # destroyed): leave without the interpreter's teardown, where a C++ thread of torch's can still
    # abort ("terminate called without an active exception", seen once in CI after a finished run)
    # and turn a finished rank into a SIGABRT. Nothing of a rank's waits on atexit (no queues here).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


ABORT_CODES = (-signal.SIGABRT, 128 + signal.SIGABRT)  # SIGABRT: -6 from Python, 134 from a shell
FROZEN = -signal.SIGSTOP  # a rank found stopped (SIGSTOP, Ctrl-Z) while the others lost contact: the cause


def is_stopped(pid: Optional[int]) -> bool:
    """Is this process stopped (state T: SIGSTOP, Ctrl-Z, a debugger)? It cannot answer its peers, nor
    handle SIGTERM, until it is continued. Linux's /proc; elsewhere never."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def is_consequence(code: Optional[int]) -> bool:
    """An exit that follows *another* rank's failure: lost contact (3), or SIGABRT — what NCCL's
    watchdog does to a survivor whose collective timed out (TORCH_NCCL_ASYNC_ERROR_HANDLING, torch's default)."""
    return code == EXIT_LOST_PEER or code in ABORT_CODES


def first_failure(events: Sequence[Tuple[int, int]]) -> Tuple[Optional[Tuple[int, int]], List[Tuple[int, int]]]:
    """From (local rank, exit code) in the order the processes ended: (the first real failure,
    the consequences). When every failure is a consequence, the first one is named (the cause is
    on another node) and is not among the consequences. A pure function."""
    failed = [(rank, code) for rank, code in events if code not in (0, None, EXIT_REQUEUE)]
    if not failed:
        return None, []
    real = [e for e in failed if not is_consequence(e[1])]
    cause = real[0] if real else failed[0]
    return cause, [e for e in failed if e != cause and is_consequence(e[1])]


def stderr_file() -> Optional[str]:
    """The file this process's stderr goes to (a SLURM job's ``.err`` file), if it is a file."""
    try:
        path = os.readlink("/proc/self/fd/2")
    except OSError:
        return None
    return path if os.path.isfile(path) else None


def locate(path: Optional[str], needle: str) -> Optional[int]:
    """The number (from 1) of the first line of ``path`` containing ``needle``; None if none."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                if needle in line:
                    return number
    except OSError:
        return None
    return None


def _where_watchdog() -> str:
    path = stderr_file()
    line = locate(path, WATCHDOG_LINE)
    if line is not None:
        return t("spawn.watchdog_at", path=path, line=line, needle=WATCHDOG_LINE)
    return t("spawn.watchdog_search", needle=WATCHDOG_LINE)


def _describe(code: int, short: bool = False) -> str:
    if code in ABORT_CODES:
        return t("spawn.aborted_short" if short else "spawn.aborted", where=_where_watchdog())
    if code == FROZEN:
        return t("spawn.frozen")
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return t("spawn.signal", name=name)
    if code == EXIT_LOST_PEER:
        return t("spawn.lost_peer", code=code)
    return t("spawn.exit_code", code=code)


#: Open files one training process needs beyond its sockets to the other ranks (torch's libraries,
#: the data, the supervisor's pipes, gloo's event loop); measured: 4 ranks fail below ≈30 in all.
OPEN_FILES_BASE = 32


def ensure_open_files(world_size: int) -> None:
    """Each process of a run keeps a socket to every other rank (the rendezvous store on rank 0, gloo's
    pairs): under a low ``ulimit -n`` torch fails deep inside ("Failed to init uv loop", "Failed to
    recv", an import) and EMFILE is never named. Raise the soft limit up to the hard one (the
    children inherit it), or refuse before anything starts, naming the limit and the way out."""
    import resource
    needed = OPEN_FILES_BASE + 2 * world_size
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if world_size < 2 or soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard == resource.RLIM_INFINITY or hard >= needed:
        ceiling = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(needed, ceiling), hard))
        return
    raise TutorialError("open_files.too_few", limit=soft, hard=hard, needed=needed, world_size=world_size)


def run_processes(nprocs: int, function: Callable, args: tuple = (), node_rank: int = 0,
                  rank_of: Optional[Callable[[int], int]] = None, preload: Sequence[str] = ()) -> int:
    """Start ``function(local_rank, *args)`` in ``nprocs`` processes and supervise them (``preload``: modules
    the ranks need, imported once for all of them, see :func:`rank_context`).

    Returns 0 when all succeed, ``EXIT_REQUEUE`` when they stopped for a requeue, otherwise the
    exit code of the first real failure (1 when it was killed by a signal; 3 when this node's
    processes only lost contact with a failed rank elsewhere, or were aborted by NCCL's watchdog).
    """
    rank_of = rank_of or (lambda local: local + node_rank * nprocs)
    context = rank_context(function, preload)
    passed = early_signal()  # SLURM's warning came while this launcher imported: the children start stopped
    if passed:
        os.environ[EARLY_STOP_VARIABLE] = "1"
    children: List[mp.Process] = []
    try:
        for local_rank in range(nprocs):
            child = context.Process(target=_child_entry, args=(local_rank, function, args, launched_now()),
                                    name=f"rank{rank_of(local_rank)}")
            child.start()
            children.append(child)
    finally:
        os.environ.pop(EARLY_STOP_VARIABLE, None)

    received: List[int] = []

    def forward(signum, _frame):
        received.append(signum)
        for c in children:
            if c.exitcode is None and c.pid:
                try:
                    os.kill(c.pid, signum)
                except ProcessLookupError:
                    pass

    # Ctrl-C (SIGINT) is not forwarded: it raises KeyboardInterrupt here, and `finally` stops the children.
    previous = {s: signal.signal(s, forward) for s in (signal.SIGUSR1, signal.SIGTERM)}
    if early_signal() and not passed:  # it came while the children started: pass it on now
        forward(signal.SIGUSR1, None)
    code = None
    try:
        code = _supervise(children, node_rank, rank_of, lambda: signal.SIGTERM in received)
        return code
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if code == EXIT_REQUEUE or signal.SIGUSR1 in received:
            stop_listening()  # a second warning must not kill us on the way out (nor leak into later shells)
        _stop(children)


def _supervise(children: Sequence[mp.Process], node_rank: int, rank_of: Callable[[int], int],
               terminated: Callable[[], bool] = lambda: False) -> int:
    pending = {c.sentinel: (i, c) for i, c in enumerate(children)}
    while pending:
        ready = multiprocessing.connection.wait(list(pending), timeout=1.0)
        for sentinel in ready:
            local_rank, child = pending.pop(sentinel)
            child.join()
            code = child.exitcode
            if code == 0:
                continue
            if code == EXIT_REQUEUE:
                # The others reach the same step boundary and stop too: wait for them.
                codes = [c.join(timeout=60) or c.exitcode for c in children]
                if all(c == EXIT_REQUEUE or c == 0 for c in codes):
                    print(t("spawn.preempted", node=node_rank, code=EXIT_REQUEUE), file=sys.stderr, flush=True)
                    return EXIT_REQUEUE
            if terminated():  # this launcher was told to stop (scancel, a time limit): no rank is to blame
                print(t("spawn.terminated", node=node_rank, n=len(children)), file=sys.stderr, flush=True)
                _stop(children)
                return 128 + signal.SIGTERM
            events = [(local_rank, code)]
            if is_consequence(code):
                # This rank stopped only because another one failed (lost contact, or NCCL's watchdog
                # aborted it). If that one is ours, it is exiting too: wait a little and name it
                # instead (found by tests/test_faults.py).
                cause = _wait_for_cause(pending, CAUSE_WAIT_SECONDS)
                if cause is not None:
                    events.append(cause)
            events += [(i, c.exitcode) for i, c in enumerate(children)
                       if c.exitcode not in (None, 0) and all(i != e[0] for e in events)]
            (local_rank, code), consequences = first_failure(events)
            others = sum(1 for c in children if c.exitcode is None)
            print(t("spawn.child_failed", rank=rank_of(local_rank), local_rank=local_rank, node=node_rank,
                    how=_describe(code), others=others), file=sys.stderr, flush=True)
            elsewhere = is_consequence(code)  # no process of this node failed on its own
            for victim, victim_code in consequences:
                how = _describe(victim_code, short=True)
                if elsewhere:
                    print(t("spawn.also_victim", rank=rank_of(victim), local_rank=victim, how=how),
                          file=sys.stderr, flush=True)
                else:
                    print(t("spawn.consequence", rank=rank_of(victim), local_rank=victim, how=how,
                            cause=rank_of(local_rank)), file=sys.stderr, flush=True)
            if elsewhere:
                print(t("spawn.cause_elsewhere", node=node_rank), file=sys.stderr, flush=True)
            _stop(children)
            if code in ABORT_CODES:
                return EXIT_LOST_PEER
            return code if code > 0 else 1
    return 0


def _wait_for_cause(pending: dict, seconds: float) -> Optional[tuple]:
    """(local rank, exit code) of the first child in ``pending`` to fail for a reason of its own
    (not 0, not lost contact, not a watchdog abort) within ``seconds``; None if there is none."""
    deadline = time.monotonic() + seconds
    while pending and time.monotonic() < deadline:
        for sentinel, (local_rank, child) in list(pending.items()):
            if is_stopped(child.pid):  # frozen: it will not fail on its own, and it is what the others lost
                del pending[sentinel]
                return local_rank, FROZEN
        left = min(0.5, max(0.0, deadline - time.monotonic()))
        for sentinel in multiprocessing.connection.wait(list(pending), timeout=left):
            local_rank, child = pending.pop(sentinel)
            child.join()
            if child.exitcode not in (0, EXIT_REQUEUE) and not is_consequence(child.exitcode):
                return local_rank, child.exitcode
    return None


def _stop(children: Sequence[mp.Process]) -> None:
    """SIGTERM the children still running, SIGKILL them after a grace period, reap them all. A stopped
    child gets SIGKILL at once: it would hold its SIGTERM until continued, for the whole grace period."""
    alive = [c for c in children if c.exitcode is None]
    for child in alive:
        if is_stopped(child.pid):
            child.kill()
        else:
            child.terminate()
    deadline = time.monotonic() + GRACE_SECONDS
    for child in alive:
        child.join(timeout=max(0.0, deadline - time.monotonic()))
    for child in alive:
        if child.exitcode is None:
            child.kill()
            child.join()
