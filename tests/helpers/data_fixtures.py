"""Data sets shared by the tests: a tiny learnable MNIST-like set and Debian's Fashion-MNIST."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from idx_files import write_mnist_like

FASHION_SOURCE = Path("/usr/share/datasets/fashion-mnist")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def mnist_root(tmp_path_factory) -> Path:
    """A staged MNIST root (4096 train / 512 test learnable images) — trains to ≈100 % in one epoch."""
    root = tmp_path_factory.mktemp("mnist")
    write_mnist_like(root, "mnist", n_train=4096, n_test=512, seed=0)
    return root


@pytest.fixture(scope="session")
def fashion_root(tmp_path_factory) -> Path:
    """Genuine Fashion-MNIST staged from Debian's dataset-fashion-mnist package, via the CLI."""
    if not FASHION_SOURCE.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{FASHION_SOURCE} is missing: .ci/run must install dataset-fashion-mnist")
        pytest.skip(f"{FASHION_SOURCE} is missing (apt-get install dataset-fashion-mnist)")
    root = tmp_path_factory.mktemp("fashion")
    subprocess.run([sys.executable, "-m", "ddp_tutorial", "data", "prepare", "--dataset", "fashion-mnist",
                    "--root", str(root), "--from", str(FASHION_SOURCE)], check=True, timeout=300)
    return root
