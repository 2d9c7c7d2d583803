"""The one device rule of every launcher (device_rule.device_for), on tables: visible GPUs × local
rank × binding. And the NCCL process-group helpers where the CPU can run them."""

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ddp_tutorial.device_rule import binding_of, choose_device, device_for
from ddp_tutorial.whoami import resolve_environment
from ddp_tutorial.i18n import TutorialError

REPO = Path(__file__).resolve().parent.parent


# (local rank, visible GPUs, requested, processes on the node, binding, SLURM_GPUS_ON_NODE) → device or error key
TABLE = [
    # --device cpu: always the CPU
    (0, 4, "cpu", 4, "shared", None, "cpu"),
    (3, 0, "cpu", 4, "task", None, "cpu"),
    # no GPU: auto → CPU for every rank; cuda → an error
    (0, 0, "auto", 1, "shared", None, "cpu"),
    (1, 0, "auto", 2, "task", None, "cpu"),
    (0, 0, "cuda", 1, "shared", None, "device.no_gpu"),
    # srun --gpus-per-task=1 (or --gpu-bind): every task sees its own GPU as device 0
    (0, 1, "auto", 4, "task", None, "cuda:0"),
    (3, 1, "cuda", 4, "task", None, "cuda:0"),
    (3, 1, "cuda", 4, "task", 4, "cuda:0"),
    # srun --gres=gpu:4 --ntasks-per-node=4 without binding: every task sees all four
    (2, 4, "cuda", 4, "task", 4, "cuda:2"),
    (0, 4, "auto", 4, "task", None, "cuda:0"),
    # --gres=gpu:2 but 4 tasks per node: 1 < visible ≤ local rank → the SLURM advice
    (2, 2, "cuda", 4, "task", 2, "dist.gpu_task_beyond"),
    (3, 2, "auto", 4, "task", None, "dist.gpu_task_beyond"),
    # … and the ranks that do have a GPU refuse too (auto never mixes backends)
    (0, 2, "auto", 4, "task", None, "dist.gpu_task_beyond"),
    (1, 2, "cuda", 4, "task", None, "dist.gpu_task_beyond"),
    # one GPU on the node for two tasks, no binding: they would share it
    (1, 1, "auto", 2, "task", 1, "dist.gpu_task_shared"),
    # the per-node parent (spawn), torchrun, local ipyparallel engines: children share the node's GPUs
    (0, 1, "auto", 1, "shared", None, "cuda:0"),
    (3, 4, "auto", 4, "shared", None, "cuda:3"),
    (1, 8, "cuda", 2, "shared", None, "cuda:1"),
    (0, 2, "auto", 4, "shared", None, "dist.gpu_shared_too_few"),   # the old code: ranks 2, 3 on CPU+gloo
    (3, 2, "cuda", 4, "shared", None, "dist.gpu_shared_too_few"),
    (1, 1, "auto", 2, "shared", None, "dist.gpu_shared_too_few"),   # two processes on one GPU
    # an unknown device name
    (0, 1, "gpu", 1, "shared", None, "device.unknown"),
]


@pytest.mark.parametrize("local_rank,visible,requested,per_node,binding,on_node,expected", TABLE)
def test_the_device_rule(local_rank, visible, requested, per_node, binding, on_node, expected):
    if expected == "cpu" or expected.startswith("cuda:"):
        assert device_for(local_rank, visible, requested, per_node, binding, on_node) == expected
    else:
        with pytest.raises(TutorialError) as error:
            device_for(local_rank, visible, requested, per_node, binding, on_node)
        assert error.value.key == expected


@pytest.mark.parametrize("binding", ["task", "shared"])
def test_auto_never_mixes_backends_on_a_node(binding):
    """For every node shape, either all local ranks get a GPU, or all get the CPU, or all refuse:
    each rank decides alone, and the decisions agree before anyone reaches the rendezvous."""
    for visible, per_node in itertools.product(range(0, 6), range(1, 7)):
        outcomes = set()
        for local_rank in range(per_node):
            try:
                outcomes.add(device_for(local_rank, visible, "auto", per_node, binding).split(":")[0])
            except TutorialError:
                outcomes.add("error")
        assert len(outcomes) == 1, (binding, visible, per_node, outcomes)


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_the_advice_matches_the_binding(lang, monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
    with pytest.raises(TutorialError) as task:
        device_for(2, 2, "cuda", 4, "task")
    text = str(task.value)
    assert "--gpus-per-task=1" in text and "--gres=gpu:4" in text and "2" in text
    assert ("SLURM gave this task 2 GPUs but its local rank is 2" in text) == (lang == "en")
    with pytest.raises(TutorialError) as shared:
        device_for(0, 2, "auto", 4, "shared")
    text = str(shared.value)
    assert "--nproc-per-node 2" in text and "--gres=gpu:4" in text and "--device cpu" in text
    assert "--gpus-per-task" not in text
    assert ("GPU'su olmalı" in text) == (lang == "tr")


@pytest.mark.parametrize("scheme_environ,extra,expected", [
    ({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1", "MASTER_PORT": "5"}, {}, "task"),
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_PORT": "5"}, {}, "shared"),           # torchrun
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_PORT": "5"},
     {"SLURM_GPUS_PER_TASK": "2"}, "shared"),                # torchrun's children share their task's GPUs
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_PORT": "5"},
     {"DDP_TUTORIAL_GPU_BINDING": "task"}, "task"),          # a wrapper that sets CUDA_VISIBLE_DEVICES itself
    ({}, {}, "shared"),
])
def test_binding_of_the_launch_scheme(scheme_environ, extra, expected):
    environ = {**scheme_environ, **extra}
    env = resolve_environment(environ=environ)
    assert binding_of(env, environ) == expected


def test_an_ipyparallel_engine_started_by_srun_with_one_gpu_per_task_is_task_bound():
    environ = {"SLURM_GPUS_PER_TASK": "1"}
    env = resolve_environment(rank=1, world_size=2, local_rank=1, nproc_per_node=2, master_port=5, environ=environ)
    assert binding_of(env, environ) == "task"
    assert binding_of(env, {}) == "shared"


def test_choose_device_on_this_machine():
    env = resolve_environment(environ={})
    assert choose_device("cpu", env).type == "cpu"
    if not torch.cuda.is_available():
        assert choose_device("auto", env).type == "cpu"
        with pytest.raises(TutorialError):
            choose_device("cuda", env)


def _python(code: str, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("TORCH_NCCL_ASYNC_ERROR_HANDLING",)}
    environ.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env=environ)


NCCL_ATTEMPT = """
import os, torch
from ddp_tutorial.ipp.remote import join
from ddp_tutorial.whoami import resolve_environment
from ddp_tutorial.i18n import TutorialError
env = resolve_environment(environ={})
device = torch.device("cuda", 0) if torch.cuda.is_available() else None
try:
    join(env, "nccl", 20, device)
    print("INIT-OK")
except TutorialError as error:
    print("INIT-FAILED", error.key)
print("ASYNC=" + os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "unset"))
"""


def test_nccl_keeps_torchs_async_error_handling_and_says_a_setup_error_is_nccls():
    """torch's default TORCH_NCCL_ASYNC_ERROR_HANDLING (3: tear down without ncclCommAbort, which can
    itself hang) is left alone; an NCCL start-up failure is NCCL's setup, not MASTER_ADDR."""
    done = _python(NCCL_ATTEMPT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ASYNC=unset" in done.stdout, done.stdout
    if not torch.cuda.is_available():  # "ProcessGroupNCCL is only supported with GPUs"
        assert "INIT-FAILED pg.nccl_setup" in done.stdout, done.stdout


NCCL_WORLD_ONE = """
import torch, torch.distributed as dist
from ddp_tutorial.ipp.remote import join
from ddp_tutorial.preemption import StopRequest
from ddp_tutorial.train import control_group, stop_vote
from ddp_tutorial.whoami import resolve_environment
from ddp_tutorial.device_rule import choose_device, choose_backend
env = resolve_environment(environ={})
device = choose_device("cuda", env)
backend = choose_backend("auto", device)
assert backend == "nccl", backend
join(env, backend, 60, device)
group = control_group(backend, 60)        # train.py's gloo side group beside nccl
assert dist.get_backend(group) == "gloo"
assert not stop_vote(StopRequest(), group)   # the stop vote: a CPU tensor on the gloo side group
x = torch.ones(4, device=device)
dist.all_reduce(x)                        # the gradients' way: nccl on the GPU
dist.barrier(group=group)
assert x.sum().item() == 4
dist.destroy_process_group()
print("OK", device)
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_nccl_world_one_with_device_id_a_gloo_side_group_and_a_device_barrier():
    done = _python(NCCL_WORLD_ONE, MASTER_ADDR="127.0.0.1")
    assert done.returncode == 0 and "OK cuda:0" in done.stdout, done.stdout + done.stderr
