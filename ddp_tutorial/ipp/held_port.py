"""Rank 0's MASTER_PORT, held on rank 0's engine from the moment it is chosen until the next call (or the
engine's end). Runs ON the engines, like :mod:`.remote` (module-level functions sent by reference).

The port is held as a store server that this engine's ``init_process_group`` then reuses. That leans on a
detail of torch's own code, the bundle's one such dependency, and all of it is behind one function,
:func:`reused_by_the_group` (checked on the torch installed by tests/test_torch_store_table.py). When torch
stops behaving so, the port is *reserved* instead (:class:`Reservation`), which works without that detail.
"""

from __future__ import annotations

import socket
from typing import Optional

_HELD_STORE: list = []   # what holds rank 0's port until the next call: the store server, or a Reservation
HOLD_TRIES = 4
PROBE_KEY = "ddp_tutorial/held_port"


def hold_master_port(addr: str) -> int:
    """Rank 0's port, held open on rank 0's engine: the store server that ``init_process_group`` of this
    engine will reuse (:func:`reused_by_the_group`).

    Choosing a free port and letting rank 0 bind it later is a race: any process on the node can take the
    port in between (a client's source port, another job's choice), and the call then fails with "port
    in use" (seen once in a full run of the suite). Held from the moment it is chosen, the port cannot be
    lost; torchrun does the same (its agent hosts the store at MASTER_PORT).

    A server that :func:`reused_by_the_group` finds in the way of a dead entry of torch's table is made
    again on its port, now entered. If torch refuses it twice on one port, torch no longer shares its
    servers so: the port is reserved instead (:class:`Reservation`). The previous call's holder is let go
    only after the new one is up, so the kernel cannot hand its port straight back.

    The server listens on ``addr`` only (127.0.0.1 for local engines), not on every interface: it stays
    up while the kernel idles, and a store answers whoever connects (:func:`_listener`)."""
    previous, port = list(_HELD_STORE), 0
    for _ in range(HOLD_TRIES):
        try:
            store = _store(addr, port, client_timeout=60.0, listener=_listener(addr, port))
        except Exception:  # noqa: BLE001 - the port let go below was taken in between: any free one
            port = 0
            continue
        if reused_by_the_group(store, addr):
            return _hold(store, previous)
        if store.port == port:  # refused twice on one port: no dead entry in the way, torch has changed
            break
        port, store = store.port, None   # its dead entry is gone now: listen on that port again, entered
    return _hold(Reservation(addr), previous)


def reused_by_the_group(store, addr: str) -> bool:
    """Will this engine's ``init_process_group``, given ``MASTER_PORT = store.port``, use ``store``'s server
    instead of listening on that port itself? Asked as it will ask: a second multi-tenant store server on
    the port, which must see a key set through ``store``.

    The torch behaviour relied on (read in torch 2.14's sources; the bundle's only use of torch's
    internals; checked on the torch installed: 1–2 by tests/test_torch_store_table.py, 3 by
    tests/test_held_port.py):

    1. rank 0's ``init_process_group`` (``env://`` and ``tcp://``) makes its store with
       ``multi_tenant=True`` (``_create_c10d_store`` in ``torch/distributed/rendezvous.py``);
    2. ``multi_tenant``, as documented: every multi-tenant ``TCPStore`` of a process on one port uses one
       server. torch finds it in a table of the process's multi-tenant servers keyed by port
       (``TCPServer::start`` and ``cachedServers_`` in ``torch/csrc/distributed/c10d/TCPStore.cpp``);
    3. the private detail: that table keeps the entry of a server that is gone (a weak pointer), and a
       server that lands on that port without asking for it (port 0) is not entered (``emplace`` keeps the
       old key). The next store asked for the port finds the dead entry, erases it and listens itself:
       "address already in use", against our own server. The answer is then False, and a server made
       again on the port is entered.

    False also whenever torch stops doing 1–2 (:func:`hold_master_port` then reserves the port)."""
    store.set(PROBE_KEY, "1")
    try:
        probe = _store(addr, store.port, client_timeout=10.0)
        return bool(probe.check([PROBE_KEY]))
    except Exception:  # noqa: BLE001 - DistNetworkError "address already in use": another server, or none
        return False


class Reservation:
    """The fallback holder: rank 0's port bound with ``SO_REUSEADDR`` and not listened on. Linux hands a
    bound port to nobody (a bind to port 0, a connection's source port), while the group's own server,
    which binds with ``SO_REUSEADDR`` too (libuv's and torch's sockets both do), can take it. It relies on
    no table of torch's; what it gives up: torch's server listens on every interface, not on ``addr`` only,
    and a program that asks for this very port could still take it first."""

    def __init__(self, addr: str):
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.socket.bind((addr, 0))
        except OSError:  # not one of this machine's addresses: the port on every interface
            self.socket.bind(("", 0))
        self.port = self.socket.getsockname()[1]

    def close(self) -> None:
        self.socket.close()


def _hold(holder, previous: list) -> int:
    """Keep ``holder`` until the next call; let the previous call's holders go now that it is up."""
    _HELD_STORE[:] = [holder]
    for old in previous:
        if isinstance(old, Reservation):
            old.close()
    return holder.port


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


def free_port() -> int:
    """A free port on this engine's node (rank 0's, for SLURM engines), not held."""
    from ..whoami import find_free_port
    return find_free_port("")
