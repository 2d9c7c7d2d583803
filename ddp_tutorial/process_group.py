"""Step 4 of the story — the process group: torch's own calls, with clear errors and no endless wait.

:mod:`ddp_tutorial.train` calls torch itself (``dist.init_process_group`` inside
:func:`rendezvous_errors`), as any DDP script does; so does the notebooks' ``ipp.run`` on the engines
(:func:`ddp_tutorial.ipp.remote.join`). This module holds only what surrounds those calls:

* :func:`rendezvous_errors` turns torch's errors into one line that says what to do (the port is
  taken; nobody answered within the timeout; NCCL could not set itself up — with NCCL's own "Last
  error" line, which is the real reason), and bounds the wait: torch's store timeout does not
  hold when the endpoint accepts the connection and then never answers (a frozen rank 0, another
  program on the port), so a watchdog ends the process with the timeout message instead;
* :func:`abort_process_group` — after a lost peer on NCCL, the communicators are aborted, not
  destroyed: ``destroy_process_group`` first waits for the collectives still queued on the GPU, and
  the one waiting for the dead rank never ends.

Torch's default ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` (3 since torch 2.2: a failed or timed-out
collective tears the process down without ``ncclCommAbort``, which can itself hang) is kept.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading

import torch.distributed as dist

from . import exits
from .i18n import TutorialError, t
from .supervisor import ensure_open_files
from .whoami import DistEnv

WATCHDOG_GRACE_SECONDS = 5.0   # torch's own timeout gets this long to speak first
ABORT_WAIT_SECONDS = 10.0      # an abort that does not return within this is left behind (we exit)


@contextlib.contextmanager
def rendezvous_errors(env: DistEnv, timeout_seconds: float):
    """Around ``init_process_group`` (and the side group): our message instead of torch's, within
    ``timeout_seconds`` (+ a short grace) whatever the endpoint does."""
    fields = dict(rank=env.rank, world_size=env.world_size, addr=env.master_addr, port=env.master_port)
    done = threading.Event()

    def give_up():
        if done.wait(timeout_seconds + WATCHDOG_GRACE_SECONDS):
            return
        stuck = TutorialError("pg.timeout", timeout=timeout_seconds, detail=t("pg.no_answer"), **fields)
        print(f"{t('error.prefix')} (rank {env.rank}): {stuck}", file=sys.stderr, flush=True)
        os._exit(exits.USER_ERROR)  # the rendezvous is stuck in C++: nothing else can end it

    ensure_open_files(env.world_size)  # a torchrun/srun rank: no launcher of ours checked ulimit -n
    check_master_address(env)
    threading.Thread(target=give_up, name="rendezvous-watchdog", daemon=True).start()
    try:
        yield
    except Exception as error:  # noqa: BLE001 - torch raises DistNetworkError / DistStoreError / DistBackendError / …
        raise translate(error, env, timeout_seconds) from None
    finally:
        done.set()


def check_master_address(env: DistEnv) -> None:
    """A MASTER_ADDR that no name server knows is final at once: say so, instead of torch's retries
    until the timeout (twice over, with a DNS typo)."""
    try:
        socket.getaddrinfo(env.master_addr, env.master_port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        if error.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)):
            raise TutorialError("pg.unknown_host", addr=env.master_addr, rank=env.rank,
                                world_size=env.world_size, reason=error.strerror) from None


#: torch's whole message when the other end closed the connection during the store's first exchange.
CLOSED_AT_ONCE = ("broken pipe", "connection reset by peer")


def translate(error: BaseException, env: DistEnv, timeout_seconds: float) -> TutorialError:
    """The message for a failed rendezvous, from torch's exception (a pure function of its text and type)."""
    fields = dict(rank=env.rank, world_size=env.world_size, addr=env.master_addr, port=env.master_port)
    text = str(error)
    lowered = text.lower()
    if "address already in use" in lowered or "errno 98" in lowered or "eaddrinuse" in lowered:
        return TutorialError("pg.port_in_use", addr=env.master_addr, port=env.master_port)
    if "too many open files" in lowered or "emfile" in lowered or "failed to init uv loop" in lowered:
        return TutorialError("pg.too_many_files", limit=open_files_limit(), rank=env.rank)
    if "ping failed" in lowered or "invalid value returned from server" in lowered:
        return TutorialError("pg.not_torch", addr=env.master_addr, port=env.master_port, rank=env.rank)
    if isinstance(error, dist.DistNetworkError) and first_line(text).lower() in CLOSED_AT_ONCE:
        # torch's first message to the store (its ping) met a closed socket: whatever accepted the
        # connection hung up at once. Against a program that answers in its own protocol (an HTTP
        # server) this is what torch says most times, "Ping failed" only now and then.
        return TutorialError("pg.closed_at_once", addr=env.master_addr, port=env.master_port, rank=env.rank)
    if "nccl" in lowered and not isinstance(error, dist.DistStoreError):
        # NCCL's first line is "NCCL error in: …, unhandled system error"; the reason is on "Last error:".
        return TutorialError("pg.nccl_setup", detail=nccl_reason(text), rank=env.rank, world_size=env.world_size)
    if "timed out" in lowered or "timeout" in lowered or isinstance(error, TimeoutError):
        return TutorialError("pg.timeout", timeout=timeout_seconds, detail=first_line(text), **fields)
    return TutorialError("pg.failed", detail=first_line(text), **fields)


def open_files_limit() -> str:
    """This process's limit on open files (``ulimit -n``), as text."""
    import resource
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return "unlimited" if soft == resource.RLIM_INFINITY else str(soft)


def nccl_reason(text: str) -> str:
    """NCCL's "Last error:" line (the cause) when there is one, else the first line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.lower().startswith("last error"):
            rest = line.split(":", 1)[1].strip()
            return (rest or (lines[i + 1] if i + 1 < len(lines) else ""))[:300] or first_line(text)
    return first_line(text)


def first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else text[:300]


def abort_process_group() -> None:
    """Abort every communicator of this process (NCCL), without waiting for stuck collectives.

    Used after a lost peer instead of ``destroy_process_group``. ``_abort_process_group`` is
    torch's own (experimental) abort path; it runs in a daemon thread so that even an abort that
    hangs cannot keep the process: the caller exits right after (:mod:`ddp_tutorial.entry`)."""
    abort = getattr(dist.distributed_c10d, "_abort_process_group", None)
    if abort is None or not dist.is_initialized():
        return

    def run():
        with contextlib.suppress(Exception):
            abort()

    worker = threading.Thread(target=run, name="nccl-abort", daemon=True)
    worker.start()
    worker.join(ABORT_WAIT_SECONDS)
