"""The thread policy of training processes (ddp_tutorial.threads)."""

import os
import subprocess
import sys
import time

import pytest

from ddp_tutorial import threads


def test_threads_share_the_usable_cores_and_an_explicit_count_wins():
    cores = threads.available_cores()
    assert threads.threads_for(1) == cores
    assert threads.threads_for(cores) == 1
    assert threads.threads_for(4 * cores) == 1  # never 0
    assert threads.threads_for(1, requested=3) == 3


def test_passive_openmp_on_a_busy_machine_only_and_a_users_policy_wins():
    env = {}
    threads.prefer_passive_openmp(env, busy=True)
    assert env == {"OMP_WAIT_POLICY": "PASSIVE"}
    env = {}
    threads.prefer_passive_openmp(env, busy=False)  # idle: OpenMP's spinning default is faster
    assert env == {}
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    threads.prefer_passive_openmp(env, busy=True)
    assert env["OMP_WAIT_POLICY"] == "ACTIVE"


def test_busy_cores_from_two_samples():
    assert threads.busy_cores((100, 1000), (150, 1100), cores=2) == 1.0   # half the jiffies busy: 1 of 2
    assert threads.busy_cores((100, 1000), (100, 1100), cores=2) == 0.0
    assert threads.busy_cores((5, 10), (5, 10), cores=4) == 0.0           # no time passed
    busy, total = threads.cpu_times()
    assert 0 <= busy <= total


def test_a_busy_core_is_seen():
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        assert threads.others_are_busy(0.3)
    finally:
        hog.kill()
        hog.wait()


def test_a_launcher_that_prefers_it_passes_it_to_children_before_they_import_torch():
    code = ("import os, subprocess, sys\n"
            "from ddp_tutorial import threads\n"
            "applies = threads.prefer_passive_openmp(busy=True)\n"
            "child = subprocess.run([sys.executable, '-c', 'import os; print(os.environ[\"OMP_WAIT_POLICY\"])'],\n"
            "                       capture_output=True, text=True, check=True)\n"
            "print(applies, child.stdout.strip())\n")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # ddp_tutorial.threads imports no torch, so it applies to the launcher itself too
    assert done.stdout.split() == ["True", "PASSIVE"]


def test_one_process_spawn_beside_a_busy_core_trains_with_the_passive_policy(mnist_root, tmp_path):
    """`python -m ddp_tutorial.spawn --nproc-per-node 1` trains in the launcher itself, so the policy
    must be chosen before the launcher imports torch (it was not: ≈15 000 instead of ≈50 000 samples/s
    at world 1 beside one busy core). The run's JSON says which policy its process saw."""
    import json
    out = tmp_path / "run.json"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        done = subprocess.run([sys.executable, "-m", "ddp_tutorial.spawn", "--nproc-per-node", "1", "--dataset",
                               "mnist", "--root", str(mnist_root), "--epochs", "1", "--train-subset", "512",
                               "--no-eval", "--quiet", "--no-progress", "--json", str(out)],
                              env=env, capture_output=True, text=True, timeout=180)
    finally:
        hog.kill()
        hog.wait()
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["omp_wait_policy"] == "PASSIVE" and result["threads"] >= 1, result


def test_a_notebooks_first_cell_chooses_the_kernels_policy_before_torch_on_a_busy_machine(mnist_root, tmp_path):
    """Issue 49 P6: 01 trains in the Jupyter kernel, which never chose a policy (519 against the engines'
    ≈44 000 samples/s at load 28): the engines inherit PASSIVE from the kernel's environment, but the kernel's
    own OpenMP had read the variable long before. 01's first cell (notebook.setup) now chooses it before the
    kernel imports torch. What OpenMP itself took is read from libgomp's own display (OMP_DISPLAY_ENV, on the
    kernel's stderr, written when torch loads it); the run's result says the same."""
    jupyter_client = pytest.importorskip("jupyter_client")
    (tmp_path / "en").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update(OMP_DISPLAY_ENV="VERBOSE", DDP_TUTORIAL_ROOT=str(mnist_root), DDP_TUTORIAL_DATASET="mnist")
    km = jupyter_client.KernelManager(kernel_name="python3")
    log = tmp_path / "kernel.err"
    hogs = []
    with open(log, "w") as err:
        km.start_kernel(cwd=str(tmp_path / "en"), env=env, stderr=err)
    try:
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=120)
        hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"], start_new_session=True)
                for _ in range(os.cpu_count() or 1)]
        time.sleep(0.3)
        printed = []

        def hook(message):
            if message["msg_type"] == "stream":
                printed.append(message["content"]["text"])

        reply = kc.execute_interactive("from ddp_tutorial import notebook\nNB = notebook.setup()\nimport sys\n"
                                       "print('TORCH', 'torch' in sys.modules)", timeout=120, output_hook=hook)
        assert reply["content"]["status"] == "ok", reply["content"]
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()
        code = ("from ddp_tutorial.config import TrainConfig\nfrom ddp_tutorial.train import train\n"
                "from ddp_tutorial.whoami import resolve_environment\n"
                "r = train(TrainConfig(epochs=1, device='cpu', progress=False, train_subset=256, quiet=True),"
                " resolve_environment(rank=0, world_size=1))\nprint('POLICY', r.omp_wait_policy)")
        reply = kc.execute_interactive(code, timeout=240, output_hook=hook)
        assert reply["content"]["status"] == "ok", reply["content"]
        kc.stop_channels()
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
        km.shutdown_kernel(now=True)
    out = "".join(printed)
    assert "TORCH False" in out and "POLICY PASSIVE" in out, out[-2000:]
    display = log.read_text()
    assert "OPENMP DISPLAY ENVIRONMENT" in display, display[-2000:]
    assert "OMP_WAIT_POLICY = 'PASSIVE'" in display and "GOMP_SPINCOUNT = '0'" in display, display[-3000:]
