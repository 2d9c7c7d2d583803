"""Imported only by the server the ranks are forked from (:func:`ddp_tutorial.supervisor.rank_context` lists it
last among the server's imports): when its launcher and its ranks are gone, the server leaves at once, and
leaves nothing behind.

Without it the server would end as any Python program does, tearing down the torch it imported for the ranks:
1–2 CPU-s (measured with torch 2.14 and ``torch._dynamo`` loaded), while the job or the next test goes on. It
has nothing to save: it only imports and forks.

A launcher that ends normally removes the socket the server listens on, and the ``/tmp/pymp-…`` folder
``multiprocessing`` made for it. A launcher that is killed (SIGKILL: a Jupyter kernel killed with its process
group, the OOM killer) cannot: the server, which outlives it by a moment in a process group of its own, removes
them (one folder was left in ``/tmp`` per killed launcher, about 60 per run of the test suite). What kills
every process at once (SLURM ending a job step: its whole cgroup) leaves them, as it leaves any program's.
"""

import atexit
import contextlib
import os
import time
from multiprocessing import forkserver

from .collector import resume

_SERVER, _LAUNCHER = os.getpid(), os.getppid()


def _launcher_gone(wait: float = 1.0) -> bool:
    """Has the server a new parent? A killed launcher closes its end of the server's pipe (which ends the
    server) a moment before the kernel gives the server to another parent: wait for that, a little."""
    deadline = time.monotonic() + wait
    while os.getppid() == _LAUNCHER and time.monotonic() < deadline:
        time.sleep(0.005)
    return os.getppid() != _LAUNCHER


def _remove_the_listening_socket() -> None:
    """The server's socket and its folder, when its launcher is dead (the server has a new parent); a process
    forked from the server (it runs these functions too: a forked engine does) and a server stopped by a live
    launcher leave them alone."""
    if os.getpid() != _SERVER or not _launcher_gone():
        return
    address = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_address", None)
    if not isinstance(address, str) or not address.startswith("/"):  # none, or Linux's abstract namespace
        return
    with contextlib.suppress(OSError):
        os.unlink(address)
    folder = os.path.dirname(address)
    if os.path.basename(folder).startswith("pymp-"):
        with contextlib.suppress(OSError):
            os.rmdir(folder)  # only when empty: anything else of the launcher's stays


# The server has imported what the ranks need, with the cycle collector off (server_start.py): frozen, and the
# collector on again for the ranks it forks.
resume()

# Its own process group: a signal to the launcher's group (a Jupyter kernel killed, with its group, by SIGKILL)
# ends the launcher and the ranks (they join its group, supervisor._as_launched), and the server, left alone,
# still ends when they are gone, and removes its socket.
os.setpgid(0, 0)

# atexit runs its functions in reverse order: the socket first, then the exit, before torch's own teardown.
atexit.register(os._exit, 0)
atexit.register(_remove_the_listening_socket)
