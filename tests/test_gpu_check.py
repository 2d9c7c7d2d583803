"""benchmarks/gpu.py, the prepared GPU check, on the CPU path: it says plainly that there is no GPU,
runs the same code small and quick, and writes what it promises (CI keeps it from rotting)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from idx_files import write_mnist_like

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # benchmarks/ sits beside the package in the repository; it is not installed

from benchmarks import gpu  # noqa: E402


def test_the_cuda_tests_are_found_by_their_skip_condition():
    ids = gpu.cuda_tests()
    assert "tests/test_ipp.py::test_gpu_engines_train_on_their_gpus_while_the_kernel_stays_off_cuda" in ids
    for node in ids:
        path, name = node.split("::")
        assert f"def {name}(" in (REPO / path).read_text()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path; a GPU machine runs the real check")
@pytest.mark.timeout(900)  # ≈30-60 s on an idle 2-core machine (four fresh interpreters); minutes under load
def test_gpu_check_on_the_cpu_path(tmp_path):
    root = write_mnist_like(tmp_path / "data", "mnist", n_train=512, n_test=128, seed=0)
    out = tmp_path / "gpu.json"
    env = dict(os.environ, PYTHONUNBUFFERED="1", DDP_TUTORIAL_LANG="en")
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu", "--dataset", "mnist", "--root", str(root),
                           "--train-subset", "512", "--samples", "1024", "--json", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=850)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no GPU: CPU path only" in done.stdout
    report = json.loads(out.read_text())
    assert report["gpu"] is False and report["device"] == "cpu"
    batches = report["batches"]
    assert batches["pageable_ms"] > 0 and batches["on_device_ms"] > 0 and "pinned_ms" not in batches
    step = report["ddp_step"]
    assert step["backend"] == "gloo" and step["ddp_step_ms"] > 0 and step["plain_step_ms"] > 0
    for variant in ("package", "seed"):
        assert report[variant]["samples_per_second"] > 0, report[variant]
        assert report[variant]["samples"] == 512 and report[variant]["device"] == "cpu"
    pair, kill = report["pair"], report["pair_kill"]  # two ranks as two hosts (gloo here), run twice
    assert pair["ok"] and pair["backend"] == "gloo" and pair["bit_identical"], pair
    assert kill["ok"] and kill["codes"][0] == 3, kill  # the survivor of a killed rank: exit 3, no hang
    assert report["facts"]["torch"] == torch.__version__
    tests = report["tests"]  # the CUDA tests ran, and skipped here
    assert tests["ids"] == gpu.cuda_tests() and tests["returncode"] == 0
    assert "skipped" in tests["summary"] and "failed" not in tests["summary"]
