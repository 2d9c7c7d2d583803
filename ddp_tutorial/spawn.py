"""Step 9 — the seed's per-node parent: one process per GPU on this node.

Run once per node (SLURM: ``srun --ntasks-per-node=1 python -m ddp_tutorial.spawn ...``).
It reads how many nodes take part and which one this is — ``--nnodes``/``--node-rank``, or
SLURM's ``SLURM_NPROCS``/``SLURM_PROCID`` as in the seed — and starts one training process
per GPU of this node (or ``--nproc-per-node`` CPU processes where there is no GPU). Child
``i`` has local rank ``i`` and global rank ``i + node_rank × nproc_per_node``.

Unlike a bare ``torch.multiprocessing.spawn`` it watches its children: when one fails, it
names the failed rank, stops the others (SIGTERM, then SIGKILL after a grace period) and
exits non-zero, so a broken job ends in seconds instead of hanging until its time limit.
Signals it receives (SIGUSR1 from SLURM before the time limit, SIGTERM) are passed on to
the children; Ctrl-C stops them. Children die with it if it is killed (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import argparse
import ctypes
import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import sys
import time
from typing import Callable, List, Optional, Sequence

from .config import TrainConfig, add_train_arguments, config_from_args
from .distributed import EXIT_LOST_PEER, find_free_port, resolve_environment
from .i18n import TutorialError, t
from .preemption import EXIT_REQUEUE


GRACE_SECONDS = 5.0
CAUSE_WAIT_SECONDS = 10.0  # how long to wait for the real cause after a rank lost contact


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies: no orphans."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except OSError:
        pass


def _child_entry(local_rank: int, function: Callable, args: tuple) -> None:
    _die_with_parent()
    from .preemption import remember_early_signal
    remember_early_signal()  # SIGUSR1 before training starts: remembered, not fatal
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops us
    from .train import run_and_exit
    sys.exit(run_and_exit(function, local_rank, *args))


def _describe(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return t("spawn.signal", name=name)
    if code == EXIT_LOST_PEER:
        return t("spawn.lost_peer", code=code)
    return t("spawn.exit_code", code=code)


def run_processes(nprocs: int, function: Callable, args: tuple = (), node_rank: int = 0,
                  rank_of: Optional[Callable[[int], int]] = None) -> int:
    """Start ``function(local_rank, *args)`` in ``nprocs`` fresh processes and supervise them.

    Returns 0 when all succeed, ``EXIT_REQUEUE`` when they stopped for a requeue, otherwise the
    exit code of the first failure (1 when it was killed by a signal).
    """
    rank_of = rank_of or (lambda local: local + node_rank * nprocs)
    context = mp.get_context("spawn")  # fresh interpreters: safe with CUDA, same on every OS
    children: List[mp.Process] = []
    for local_rank in range(nprocs):
        child = context.Process(target=_child_entry, args=(local_rank, function, args), name=f"rank{rank_of(local_rank)}")
        child.start()
        children.append(child)

    def forward(signum, _frame):
        for c in children:
            if c.exitcode is None and c.pid:
                try:
                    os.kill(c.pid, signum)
                except ProcessLookupError:
                    pass

    # Ctrl-C (SIGINT) is not forwarded: it raises KeyboardInterrupt here, and `finally` stops the children.
    previous = {s: signal.signal(s, forward) for s in (signal.SIGUSR1, signal.SIGTERM)}
    try:
        return _supervise(children, node_rank, rank_of)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _stop(children)


def _supervise(children: Sequence[mp.Process], node_rank: int, rank_of: Callable[[int], int]) -> int:
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
            if code == EXIT_LOST_PEER:
                # This rank stopped only because another one failed. If that one is ours, it is
                # exiting too: wait a little and name it instead (found by tests/test_faults.py).
                cause = _wait_for_cause(pending, CAUSE_WAIT_SECONDS)
                if cause is not None:
                    local_rank, code = cause
            others = sum(1 for c in children if c.exitcode is None)
            print(t("spawn.child_failed", rank=rank_of(local_rank), local_rank=local_rank, node=node_rank,
                    how=_describe(code), others=others), file=sys.stderr, flush=True)
            _stop(children)
            return code if code > 0 else 1
    return 0


def _wait_for_cause(pending: dict, seconds: float) -> Optional[tuple]:
    """(local rank, exit code) of the first child in ``pending`` to fail for a reason of its own
    (not 0, not lost contact) within ``seconds``; None if there is none."""
    deadline = time.monotonic() + seconds
    while pending and time.monotonic() < deadline:
        left = max(0.0, deadline - time.monotonic())
        for sentinel in multiprocessing.connection.wait(list(pending), timeout=left):
            local_rank, child = pending.pop(sentinel)
            child.join()
            if child.exitcode not in (0, EXIT_LOST_PEER, EXIT_REQUEUE):
                return local_rank, child.exitcode
    return None


def _stop(children: Sequence[mp.Process]) -> None:
    """SIGTERM the children still running, SIGKILL them after a grace period, reap them all."""
    alive = [c for c in children if c.exitcode is None]
    for child in alive:
        child.terminate()
    deadline = time.monotonic() + GRACE_SECONDS
    for child in alive:
        child.join(timeout=max(0.0, deadline - time.monotonic()))
    for child in alive:
        if child.exitcode is None:
            child.kill()
            child.join()


# --------------------------------------------------------------------------------------
# The training child and the launcher


def _train_child(local_rank: int, config: TrainConfig, nproc_per_node: int, node_rank: int, num_nodes: int) -> None:
    from .train import train
    env = resolve_environment(local_rank=local_rank, nproc_per_node=nproc_per_node, node_rank=node_rank,
                              num_nodes=num_nodes)
    train(config, env)


def default_nproc_per_node() -> int:
    """One process per visible GPU, or 1 on a machine without GPUs."""
    import torch
    return torch.cuda.device_count() or 1


def launch(config: TrainConfig, nproc_per_node: Optional[int] = None, num_nodes: Optional[int] = None,
           node_rank: Optional[int] = None) -> int:
    """Start this node's training processes; returns the exit code for this node."""
    config.validate()
    if node_rank is None and num_nodes is None and os.environ.get("SLURM_PROCID", "") != "":
        probe = resolve_environment(local_rank=0, nproc_per_node=1)  # reads SLURM_PROCID / SLURM_NPROCS
        node_rank, num_nodes = probe.node_rank, probe.num_nodes
    node_rank = 0 if node_rank is None else node_rank
    num_nodes = 1 if num_nodes is None else num_nodes
    nproc_per_node = nproc_per_node if nproc_per_node is not None else default_nproc_per_node()
    if nproc_per_node < 1 or num_nodes < 1:
        raise TutorialError("env.world_size", world_size=nproc_per_node * num_nodes)

    if not os.environ.get("MASTER_PORT"):
        if num_nodes == 1:  # all processes on this machine: meet on loopback, on a port free right now
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ["MASTER_PORT"] = str(find_free_port(os.environ["MASTER_ADDR"]))
        elif not os.environ.get("SLURM_JOB_ID"):  # several nodes must agree on one address and port
            raise TutorialError("spawn.no_port", nnodes=num_nodes)
    # Check the whole environment here, once, before any child starts.
    env = resolve_environment(local_rank=0, nproc_per_node=nproc_per_node, node_rank=node_rank, num_nodes=num_nodes)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = env.master_addr, str(env.master_port)

    if nproc_per_node == 1 and num_nodes == 1:  # one process: no child needed
        from .train import run_and_exit, train
        return run_and_exit(train, config, env)
    return run_processes(nproc_per_node, _train_child, (config, nproc_per_node, node_rank, num_nodes),
                         node_rank=node_rank)


def add_launch_arguments(parser: argparse.ArgumentParser, nodes: bool = True) -> None:
    g = parser.add_argument_group("launch")
    g.add_argument("--nproc-per-node", type=int, default=None,
                   help="training processes on this node (default: one per GPU, 1 without GPUs)")
    if nodes:
        g.add_argument("--nnodes", type=int, default=None, help="number of nodes (default: $SLURM_NPROCS or 1)")
        g.add_argument("--node-rank", type=int, default=None, help="this node's number (default: $SLURM_PROCID or 0)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddp_tutorial.spawn",
                                     description="Per-node parent: one training process per GPU (the seed's scheme).")
    add_launch_arguments(parser)
    add_train_arguments(parser)
    args = parser.parse_args(argv)
    from .train import run_and_exit
    code = 0

    def go():
        nonlocal code
        code = launch(config_from_args(args), args.nproc_per_node, args.nnodes, args.node_rank)

    failure = run_and_exit(go)
    return failure or code


if __name__ == "__main__":
    sys.exit(main())
