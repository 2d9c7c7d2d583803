"""Every rank of a notebook function's group has joined it, said through the group's store (runs ON the
engines, like :mod:`.remote`, which calls it around the function: :func:`.remote.run_on_engine`).

The group's store is reached through a private accessor of torch, :func:`group_store`, the only place it
is named; without it the ranks do not wait for each other here (the race of before issue 44)."""

from __future__ import annotations

from datetime import timedelta

JOINED_KEY = "ddp_tutorial/joined/"


def group_store():
    """The default process group's store (torch's private ``distributed_c10d._get_default_store()``: the
    rendezvous store, under the group's key prefix); None when torch no longer has that accessor
    (tests/test_torch_store_table.py says so on the torch installed)."""
    import torch.distributed as dist
    accessor = getattr(dist.distributed_c10d, "_get_default_store", None)
    return accessor() if accessor is not None else None


def joined(rank: int) -> None:
    """Say in the group's store that ``rank`` is in the group (its ``init_process_group`` has returned)."""
    store = group_store()
    if store is not None:
        store.set(f"{JOINED_KEY}{rank}", "1")


def every_rank_joined(world_size: int, timeout_seconds: float) -> None:
    """Before this rank closes the group it made: wait until every rank is in it.

    ``init_process_group`` can return on one rank while a peer is still inside its own (gloo's last
    connection of the peer's side is read after ours is made). A function that needs no collective
    (03's ``who_am_i``) then ends here at once, the group is closed under that peer, and the peer fails
    with "Connection closed by peer": a lost contact with no cause, seen on a loaded machine (issue 44).
    Not a barrier: a rank that has joined and later leaves a collective unmatched still ends its peers'
    waits at once. The group's store is new with every call (rank 0's), so no key is left from another."""
    import torch.distributed as dist
    if not dist.is_initialized():  # the function closed the group itself
        return
    store = group_store()
    if store is not None:
        store.wait([f"{JOINED_KEY}{rank}" for rank in range(world_size)], timedelta(seconds=timeout_seconds))
