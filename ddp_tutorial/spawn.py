"""The seed's per-node parent, the training launcher: one training process per GPU on this node.

Run once per node (SLURM: ``srun --ntasks-per-node=1 python -m ddp_tutorial.spawn ...``).
It reads how many nodes take part and which one this is — ``--nnodes``/``--node-rank``, or
SLURM's ``SLURM_NPROCS``/``SLURM_PROCID`` as in the seed — and starts one training process
per GPU of this node (or ``--nproc-per-node`` CPU processes where there is no GPU). Child
``i`` has local rank ``i`` and global rank ``i + node_rank × nproc_per_node``. The children are
started and watched by :mod:`ddp_tutorial.supervisor`, which names the first real failure.
"""

# ruff: noqa: E402 - run as a program, the wait policy is chosen before the imports below import torch
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

from .threads import prefer_passive_openmp

if __name__ == "__main__":
    # `python -m ddp_tutorial.spawn`: OpenMP reads OMP_WAIT_POLICY when torch is imported (next
    # lines), and a single process trains right here, without a child: decide it first.
    prefer_passive_openmp()

from . import launch_env as names
from .config import TrainConfig, add_launch_arguments, add_train_arguments, config_from_args
from .device_rule import device_for, explained
from .entry import run_and_exit
from .i18n import TutorialError, t
from .supervisor import answer_in_server, ensure_open_files, run_processes
from .validate import check_processes
from .whoami import find_free_port, resolve_environment


# --------------------------------------------------------------------------------------
# The training child and the launcher


TRAINING_MODULES = ("ddp_tutorial.train",)  # imported once by the ranks' server (supervisor.rank_context)


def _train_child(local_rank: int, config: TrainConfig, nproc_per_node: int, node_rank: int, num_nodes: int) -> None:
    from .train import train
    env = resolve_environment(local_rank=local_rank, nproc_per_node=nproc_per_node, node_rank=node_rank,
                              num_nodes=num_nodes)
    train(config, env)


def _visible_gpus() -> int:
    """GPUs this process sees (without initialising CUDA here: the children use them)."""
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def default_nproc_per_node() -> int:
    """One process per visible GPU, or 1 on a machine without GPUs."""
    return _visible_gpus() or 1


def launch(config: TrainConfig, nproc_per_node: Optional[int] = None, num_nodes: Optional[int] = None,
           node_rank: Optional[int] = None) -> int:
    """Start this node's training processes; returns the exit code for this node."""
    config.validate()
    if nproc_per_node is not None:
        check_processes(nproc_per_node)  # a bound this machine can start (called from Python, not the CLI)
    if node_rank is None and num_nodes is None and os.environ.get(names.SLURM_PROCID, "") != "":
        probe = resolve_environment(local_rank=0, nproc_per_node=1)  # reads SLURM_PROCID / SLURM_NPROCS
        node_rank, num_nodes = probe.node_rank, probe.num_nodes
    node_rank = 0 if node_rank is None else node_rank
    num_nodes = 1 if num_nodes is None else num_nodes
    nproc_per_node = nproc_per_node if nproc_per_node is not None else default_nproc_per_node()
    if nproc_per_node < 1 or num_nodes < 1:
        raise TutorialError("env.world_size", world_size=nproc_per_node * num_nodes)
    ensure_open_files(nproc_per_node * num_nodes)  # before any child: EMFILE named, not "Failed to recv"

    if config.device != "cpu":
        # The device rule (device_rule.device_for), checked once here before any child starts: the
        # children share this node's GPUs, one each; fewer GPUs than processes is an error, never a
        # silent mix of CUDA+nccl and CPU+gloo ranks. Several children: their server counts the GPUs
        # (torch is imported there anyway), so this launcher does not import torch for it.
        visible = (answer_in_server(_visible_gpus, TRAINING_MODULES) if nproc_per_node > 1 or num_nodes > 1
                   else _visible_gpus())
        with explained():
            device_for(nproc_per_node - 1, visible, config.device, nproc_per_node, "shared")
    if not os.environ.get(names.MASTER_PORT):
        if num_nodes == 1:  # all processes on this machine: meet on loopback, on a port free right now
            os.environ.setdefault(names.MASTER_ADDR, "127.0.0.1")
            try:
                os.environ[names.MASTER_PORT] = str(find_free_port(os.environ[names.MASTER_ADDR]))
            except OSError as error:  # an exported MASTER_ADDR that is not this machine (or no host at all)
                raise TutorialError("spawn.bad_master_addr", addr=os.environ[names.MASTER_ADDR],
                                    reason=error.strerror or str(error)) from None
        elif not os.environ.get(names.SLURM_JOB_ID):  # several nodes must agree on one address and port
            raise TutorialError("spawn.no_port", nnodes=num_nodes)
    # Check the whole environment here, once, before any child starts.
    env = resolve_environment(local_rank=0, nproc_per_node=nproc_per_node, node_rank=node_rank, num_nodes=num_nodes)
    os.environ[names.MASTER_ADDR], os.environ[names.MASTER_PORT] = env.master_addr, str(env.master_port)

    if nproc_per_node == 1 and num_nodes == 1:  # one process: no child needed
        from .train import train
        return run_and_exit(train, config, env)
    return run_processes(nproc_per_node, _train_child, (config, nproc_per_node, node_rank, num_nodes),
                         node_rank=node_rank, preload=TRAINING_MODULES)


def main(argv=None) -> int:
    from .argtext import argparse_in_user_language
    with argparse_in_user_language():  # the parser too: its "options:" and "-h" lines are argparse's own
        parser = argparse.ArgumentParser(prog="python -m ddp_tutorial.spawn",
                                         description=t("spawn.module_description"))
        add_launch_arguments(parser)
        add_train_arguments(parser)
        args = parser.parse_args(argv)
    code = 0

    def go():
        nonlocal code
        code = launch(config_from_args(args), args.nproc_per_node, args.nnodes, args.node_rank)

    failure = run_and_exit(go)
    return failure or code


if __name__ == "__main__":
    sys.exit(main())
