"""End to end: the training function and its three launchers, with real processes and gloo."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_tutorial.config import TrainConfig
from ddp_tutorial.train import train

PY = sys.executable
TORCHRUN = str(Path(PY).with_name("torchrun"))


def run(args, env=None, timeout=240, check=True):
    environ = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        if env is None or name not in env:
            environ.pop(name, None)
    done = subprocess.run(args, capture_output=True, text=True, env=environ, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{args} exited {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def small(root, *extra):
    return ["--dataset", "mnist", "--root", str(root), "--epochs", "1", "--threads", "1", *extra]


@pytest.fixture
def one_thread():
    """``threads`` for a run inside pytest's own process: one intra-op thread, as the CLI runs here get (--threads 1).
    A world-1 run's own default is every core (2 on the CI machine), whose idle threads spin between steps: 2.3
    CPU-s more for one 4096-sample epoch on the loaded 2-core machine, and nothing these checks look at (the weights
    are compared between runs of one thread count). Afterwards pytest's process gets its thread count back."""
    import torch
    before = torch.get_num_threads()
    yield 1
    torch.set_num_threads(before)


def test_train_function_in_process(mnist_root, one_thread):
    result = train(TrainConfig(dataset="mnist", root=str(mnist_root), epochs=1, quiet=True, threads=one_thread))
    assert result.world_size == 1 and result.num_parameters == 134_794
    assert result.steps_per_epoch == 32                      # 4096 / 128
    assert result.test_accuracy > 80
    again = train(TrainConfig(dataset="mnist", root=str(mnist_root), epochs=1, quiet=True, threads=one_thread))
    assert again.weights_sha256 == result.weights_sha256     # same seed, same weights
    other = train(TrainConfig(dataset="mnist", root=str(mnist_root), epochs=1, seed=1, quiet=True,
                              evaluate=False, threads=one_thread))
    assert other.weights_sha256 != result.weights_sha256
    assert other.test_accuracy is None


def test_cli_world_2_writes_the_json_contract(mnist_root, tmp_path):
    out = tmp_path / "out.json"
    done = run([PY, "-m", "ddp_tutorial", "train", "--nproc-per-node", "2", "--scale-lr",
                *small(mnist_root, "--json", str(out))])
    result = json.loads(out.read_text())
    for key in ("world_size", "epochs", "test_accuracy", "train_seconds", "samples_per_second", "dataset",
                "backend", "seed", "lr"):
        assert key in result, key
    assert result["world_size"] == 2 and result["backend"] == "gloo" and result["dataset"] == "mnist"
    assert len(result["epochs"]) == 1 and result["test_accuracy"] > 80
    assert result["lr"] == pytest.approx(2e-3)                # --scale-lr: lr × world size
    assert result["samples_per_second"] > 0 and result["train_seconds"] > 0
    assert len(result["rank_losses"][0]) == 2
    # The seed's lines: one loss line per rank, and rank 0's test accuracy.
    assert "loss at rank 0 is" in done.stdout and "loss at rank 1 is" in done.stdout
    assert "Accuracy of the network on the 512 test images" in done.stdout


def test_messages_speak_turkish(mnist_root):
    done = run([PY, "-m", "ddp_tutorial", "train", "--nproc-per-node", "1", *small(mnist_root)],
               env={"DDP_TUTORIAL_LANG": "tr"})
    assert "numaralı düğümdür" in done.stdout
    assert "rank 0 kaybı" in done.stdout
    assert "512 test görüntüsünde ağın doğruluğu" in done.stdout


def test_every_launcher_gives_the_same_model(mnist_root, tmp_path):
    """`ddp-tutorial train` at world 4, the seed's per-node parent as 2 nodes × 2 processes (SLURM
    variables as srun sets them) and torchrun with 4 processes: the same seed, bit-identical weights."""
    from ddp_tutorial.whoami import find_free_port

    results = {}
    run([PY, "-m", "ddp_tutorial", "train", "--nproc-per-node", "4",
         *small(mnist_root, "--json", str(tmp_path / "cli.json"))])
    results["cli"] = tmp_path / "cli.json"

    # srun -N 2 -n 2 python -m ddp_tutorial.spawn --nproc-per-node 2: SLURM_PROCID names the node.
    job = {"SLURM_JOB_ID": str(40000 + os.getpid() % 1000), "SLURM_NPROCS": "2", "SLURM_NTASKS": "2",
           "SLURM_JOB_NODELIST": "localhost", "SLURM_STEP_ID": "0"}  # srun's step, not the batch script
    nodes = []
    for node in range(2):
        env = dict(os.environ, PYTHONUNBUFFERED="1", SLURM_PROCID=str(node), SLURM_LOCALID="0",
                   SLURM_NODEID=str(node), **job)
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(name, None)
        nodes.append(subprocess.Popen(
            [PY, "-m", "ddp_tutorial.spawn", "--nproc-per-node", "2",
             *small(mnist_root, "--json", str(tmp_path / "spawn.json"))],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=240)[0] for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], outputs
    assert "This is node 1 of 2" in outputs[1]
    results["spawn"] = tmp_path / "spawn.json"

    port = str(find_free_port())
    run([TORCHRUN, "--nproc-per-node", "4", "--master-addr", "127.0.0.1", "--master-port", port,
         "-m", "ddp_tutorial.train", *small(mnist_root, "--json", str(tmp_path / "torchrun.json"))])
    results["torchrun"] = tmp_path / "torchrun.json"

    loaded = {name: json.loads(path.read_text()) for name, path in results.items()}
    assert {r["world_size"] for r in loaded.values()} == {4}
    assert {r["launcher"] for r in loaded.values()} == {"spawn", "torchrun"}
    assert loaded["spawn"]["num_nodes"] == 2
    assert len({r["weights_sha256"] for r in loaded.values()}) == 1, loaded
    assert len({r["test_accuracy"] for r in loaded.values()}) == 1


def test_fashion_mnist_reaches_84_percent_at_world_2(fashion_root, tmp_path):
    """The issue's acceptance run: Debian's genuine Fashion-MNIST, 2 processes, 2 epochs."""
    out = tmp_path / "fashion.json"
    run([PY, "-m", "ddp_tutorial", "train", "--dataset", "fashion-mnist", "--root", str(fashion_root),
         "--nproc-per-node", "2", "--epochs", "2", "--json", str(out)], timeout=600)
    result = json.loads(out.read_text())
    assert result["test_accuracy"] >= 84.0, result
    assert result["epochs"][1] < result["epochs"][0]


def test_resume_at_world_4_is_bit_identical(mnist_root, tmp_path):
    """With 3+ ranks the all-reduce's summation order depends on DDP's bucket layout, which DDP
    re-packs after its first step; a resumed run must not round differently (Resume.settle_ddp_buckets)."""
    common = ["--dataset", "mnist", "--root", str(mnist_root), "--nproc-per-node", "4", "--threads", "1",
              "--batch-size", "64", "--lr", "3e-4", "--train-subset", "3000", "--no-eval", "--quiet"]
    full, part = tmp_path / "full.json", tmp_path / "part.json"
    run([PY, "-m", "ddp_tutorial", "train", *common, "--epochs", "3", "--json", str(full)])
    run([PY, "-m", "ddp_tutorial", "train", *common, "--epochs", "1", "--checkpoint-dir", str(tmp_path / "ck")])
    run([PY, "-m", "ddp_tutorial", "train", *common, "--epochs", "3", "--checkpoint-dir", str(tmp_path / "ck"),
         "--resume", "--json", str(part)])
    a, b = json.loads(full.read_text()), json.loads(part.read_text())
    assert b["resumed_from"] == {"epoch": 1, "step": 0}
    assert a["weights_sha256"] == b["weights_sha256"]
    assert a["epochs"] == pytest.approx(b["epochs"], abs=1e-9)


@pytest.mark.parametrize("requested, device, recorded", [("auto", "cuda:0", "nccl"), ("gloo", "cuda:0", "gloo"),
                                                         ("auto", "cpu", "gloo")])
def test_a_world_1_result_records_the_backend_the_run_printed(requested, device, recorded):
    """At world 1 there is no process group; the JSON still names the backend train.py printed ("device cuda:0,
    backend nccl"), not gloo for every run without a group (seen on the first GPU run, an H200). CUDA is not
    touched: RunRecord only records the device."""
    import torch
    from ddp_tutorial.model import DeepNeuralNetwork, count_parameters
    from ddp_tutorial.checkpoint import Position
    from ddp_tutorial.meter import RunRecord
    from ddp_tutorial.whoami import resolve_environment
    env = resolve_environment(rank=0, world_size=1, master_addr="127.0.0.1", master_port=29500)
    model = DeepNeuralNetwork(2, 784, 16, 10)
    from ddp_tutorial.device_rule import choose_backend
    config = TrainConfig(backend=requested, evaluate=False)
    backend = choose_backend(requested, torch.device(device))  # as train.py's step 2, which it prints
    record = RunRecord(config, env, print, model, count_parameters(model), 1e-3, torch.device(device), backend,
                       640, Position())
    assert record.result.backend == recorded and record.result.device == device


def test_sgd_is_an_option_recorded_and_kept_on_resume(mnist_root, tmp_path, one_thread):
    """--optimizer sgd (momentum 0.9) trains, the result says so, and a checkpoint made with one
    optimizer is not resumed with the other (its state would not fit): a clear message."""
    from ddp_tutorial.i18n import TutorialError
    base = dict(dataset="mnist", root=str(mnist_root), epochs=1, quiet=True, checkpoint_dir=str(tmp_path / "c"),
                threads=one_thread)
    sgd = train(TrainConfig(optimizer="sgd", lr=0.05, **base))
    adam = train(TrainConfig(epochs=1, quiet=True, dataset="mnist", root=str(mnist_root), threads=one_thread))
    assert sgd.optimizer == "sgd" and adam.optimizer == "adam"
    assert sgd.weights_sha256 != adam.weights_sha256 and sgd.test_accuracy > 80
    with pytest.raises(TutorialError) as caught:
        train(TrainConfig(resume=True, **dict(base, epochs=2)))
    assert "optimizer_kind=sgd" in str(caught.value) and "--optimizer" in str(caught.value)
