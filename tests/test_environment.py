"""Rank, local rank, world size, node and master address/port for every launch scheme."""

import socket

import pytest
import torch

from ddp_tutorial.device_rule import choose_backend, choose_device
from ddp_tutorial.whoami import derive_port, find_free_port, resolve_environment
from ddp_tutorial.i18n import TutorialError


def test_explicit_arguments_win_over_the_environment():
    env = resolve_environment(rank=3, world_size=4, nproc_per_node=2, master_addr="h", master_port=1234,
                              environ={"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
    assert (env.rank, env.local_rank, env.world_size, env.node_rank, env.num_nodes) == (3, 1, 4, 1, 2)
    assert (env.master_addr, env.master_port, env.scheme) == ("h", 1234, "explicit")


def test_torchrun_variables():
    environ = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1",
               "MASTER_ADDR": "n1", "MASTER_PORT": "29500",
               # torchrun started by srun on each node: SLURM's own variables describe the node task.
               "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"}
    env = resolve_environment(environ=environ)
    assert env.scheme == "torchrun"
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size, env.node_rank, env.num_nodes) == (
        5, 1, 8, 4, 1, 2)
    assert (env.master_addr, env.master_port) == ("n1", 29500)


def test_slurm_one_task_per_device():
    environ = {"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_NPROCS": "6", "SLURM_LOCALID": "2",
               "SLURM_NODEID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_TASKS_PER_NODE": "3(x2)",
               "SLURM_JOB_NODELIST": "palamut[7-8]", "SLURM_JOB_ID": "123456"}
    env = resolve_environment(environ=environ)
    assert env.scheme == "slurm"
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size, env.node_rank, env.num_nodes) == (
        5, 2, 6, 3, 1, 2)
    assert env.master_addr == "palamut7"
    assert env.master_port == 15000 + 123456 % 15000


def test_the_seeds_per_node_parent_scheme():
    # srun -N 2 -n 2: one task per node; each parent spawns 3 processes (3 GPUs per node).
    environ = {"SLURM_NPROCS": "2", "SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "0",
               "SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_JOB_ID": "77"}
    ranks = [resolve_environment(local_rank=i, nproc_per_node=3, environ=environ) for i in range(3)]
    assert [e.rank for e in ranks] == [3, 4, 5]          # rank = local + node × processes-per-node
    assert {e.world_size for e in ranks} == {6}
    assert {e.node_rank for e in ranks} == {1}
    assert {e.scheme for e in ranks} == {"spawn"}
    assert {e.master_addr for e in ranks} == {"gpu01"}


def test_single_process_without_any_launcher_gets_a_free_port():
    env = resolve_environment(environ={})
    assert (env.rank, env.world_size, env.scheme, env.master_addr) == (0, 1, "single", "127.0.0.1")
    assert 1 <= env.master_port <= 65535


def test_port_derivation_separates_jobs_sharing_a_node():
    ports = {derive_port(job) for job in range(1000, 1000 + 15000)}
    assert len(ports) == 15000 and min(ports) >= 15000 and max(ports) < 30000   # below the ephemeral range
    assert derive_port(42) == derive_port(42 + 15000)     # the documented collision bound


def test_free_port_is_free():
    port = find_free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


@pytest.mark.parametrize("environ,needle", [
    ({"RANK": "0", "WORLD_SIZE": "2"}, "LOCAL_RANK"),                                   # torchrun, incomplete
    ({"RANK": "two", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "RANK='two'"),                # not a number
    ({"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_PORT": "1"}, "rank 2"),  # rank ≥ world size
    ({"RANK": "0", "WORLD_SIZE": "0", "LOCAL_RANK": "0"}, "at least 1"),                  # world size 0
    ({"RANK": "0", "WORLD_SIZE": "-3", "LOCAL_RANK": "0"}, "at least 1"),                 # negative
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_NPROCS": "2", "SLURM_LOCALID": "0"}, "SLURM_NPROCS=2"),
    ({"SLURM_PROCID": "x", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0"}, "SLURM_PROCID"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "abc"}, "SLURM_JOB_ID"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "MASTER_PORT"),                 # nowhere to meet
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_PORT": "http"}, "MASTER_PORT"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_PORT": "70000"}, "MASTER_PORT"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "2", "MASTER_PORT": "5"}, "local rank"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "1",
      "SLURM_JOB_NODELIST": "gpu[01-"}, "host list"),
])
def test_inconsistent_or_malformed_environments_are_clear_errors(environ, needle):
    with pytest.raises(TutorialError) as error:
        resolve_environment(environ=environ)
    assert needle in str(error.value)


def test_spawn_scheme_rejects_a_node_rank_outside_the_node_count():
    with pytest.raises(TutorialError, match="node rank"):
        resolve_environment(local_rank=0, nproc_per_node=2, environ={"SLURM_PROCID": "2", "SLURM_NPROCS": "2"})


def test_backend_auto_is_gloo_on_cpu_and_nccl_needs_cuda():
    env = resolve_environment(environ={})
    device = choose_device("auto", env)
    if not torch.cuda.is_available():
        assert device.type == "cpu"
        with pytest.raises(TutorialError, match="CUDA"):
            choose_device("cuda", env)
    cpu = torch.device("cpu")
    assert choose_backend("auto", cpu) == "gloo"
    with pytest.raises(TutorialError, match="nccl"):
        choose_backend("nccl", cpu)
    with pytest.raises(TutorialError, match="mpi"):
        choose_backend("mpi", cpu)


def test_launch_env_is_the_one_list_of_launcher_variables():
    """The who-am-I, device and launcher modules name launcher variables only through launch_env."""
    import re
    from pathlib import Path

    from ddp_tutorial import launch_env
    package = Path(launch_env.__file__).parent
    for module in ("whoami.py", "device_rule.py", "process_group.py", "spawn.py", "supervisor.py"):
        code = (package / module).read_text()
        quoted = set(re.findall(r'"((?:SLURM|MASTER|CUDA|NCCL|TORCH_NCCL|LOCAL|WORLD|GROUP)_[A-Z_]*|RANK)"', code))
        assert not quoted, f"{module} spells {sorted(quoted)} itself: use launch_env"
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NNODES", "SLURM_NODEID",
                 "SLURM_JOB_NODELIST", "SLURM_JOB_ID", "SLURM_TASKS_PER_NODE"):
        assert getattr(launch_env, name) == name


