"""Rank 0's MASTER_PORT, held on rank 0's engine from the moment it is chosen until the next call (or the
engine's end): the store server that this engine's ``init_process_group`` reuses. Runs ON the engines, like
:mod:`.remote` (module-level functions sent by reference)."""

from __future__ import annotations

import socket
from typing import Optional

_HELD_STORE: list = []   # rank 0's store server, held from the port's choice to the next call (or the engine's end)
HOLD_TRIES = 4


def hold_master_port(addr: str) -> int:
    """Rank 0's port, held open on rank 0's engine: the store server that ``init_process_group`` of this
    engine will reuse (torch's stores are multi-tenant in a process: same port, same server).

    Choosing a free port and letting rank 0 bind it later is a race: any process on the node can take the
    port in between (a client's source port, another job's choice), and the call then fails with "port
    in use" (seen once in a full run of the suite). Held from the moment it is chosen, the port cannot be
    lost; torchrun does the same (its agent hosts the store at MASTER_PORT).

    torch's table of multi-tenant servers keeps an entry for a port after its server is gone, and a new
    server on that port is not entered (``emplace`` keeps the old key). When the kernel hands this engine a
    port that an earlier call used, ``init_process_group`` finds the dead entry, tries to listen itself
    and fails with "port in use" against our own server (a CI run: every capstone test). So the held
    port is tried here as ``init_process_group`` will try it; a failed try removes the dead entry, and the
    server is made again on that port, now entered. The previous call's server is let go only after the new
    one is up, so the kernel cannot hand its port straight back.

    The server listens on ``addr`` only (127.0.0.1 for local engines), not on every interface: it stays
    up while the kernel idles, and a store answers whoever connects (:func:`_listener`)."""
    previous, port = list(_HELD_STORE), 0
    for _ in range(HOLD_TRIES):
        try:
            store = _store(addr, port, client_timeout=60.0, listener=_listener(addr, port))
        except Exception:  # noqa: BLE001 - the port let go below was taken in between: any free one
            port = 0
            continue
        if _reused(addr, store.port):
            _HELD_STORE[:] = [store]
            del previous
            return store.port
        port, store = store.port, None   # its dead entry is gone now: listen on that port again, entered
    raise RuntimeError(f"no port could be held for rank 0 at {addr} ({HOLD_TRIES} tries)")


def _listener(addr: str, port: int) -> Optional[socket.socket]:
    """A listening socket bound to ``addr`` alone, for the store server to take over (torch's own server
    listens on every interface); None when ``addr`` is not one of this machine's (then torch's)."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    try:
        return socket.create_server((addr, port), family=family, backlog=128)
    except OSError:
        return None


def _store(addr: str, port: int, client_timeout: float, listener: Optional[socket.socket] = None):
    """A multi-tenant store server on ``port``; with ``listener``, on that socket (the server owns it then:
    it closes it when it ends)."""
    from datetime import timedelta

    import torch.distributed as dist
    options = dict(is_master=True, wait_for_workers=False, multi_tenant=True,
                   timeout=timedelta(seconds=client_timeout))
    if listener is None:
        return dist.TCPStore(addr, port, **options)
    try:
        store = dist.TCPStore(addr, listener.getsockname()[1], master_listen_fd=listener.fileno(), **options)
    except BaseException:
        listener.close()
        raise
    listener.detach()
    return store


def _reused(addr: str, port: int) -> bool:
    """Does a multi-tenant server on ``port`` come back from torch's table as ``init_process_group`` asks
    for it (the held one), rather than a new listen on a port we already hold?"""
    try:
        _store(addr, port, client_timeout=10.0)
    except Exception:  # noqa: BLE001 - DistNetworkError "address already in use": a dead entry, now removed
        return False
    return True


def free_port() -> int:
    """A free port on this engine's node (rank 0's, for SLURM engines), not held."""
    from ..whoami import find_free_port
    return find_free_port("")
