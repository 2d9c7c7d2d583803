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
DEFAULT_DATASET = "mnist"              # the seed's; needs internet once (then it is staged)
OFFLINE_DATASET = "fashion-mnist"      # Debian's dataset-fashion-mnist package: no internet needed
DEBIAN_FASHION_MNIST = "/usr/share/datasets/fashion-mnist"

ROOT_VARIABLE = "DDP_TUTORIAL_ROOT"
DATASET_VARIABLE = "DDP_TUTORIAL_DATASET"


def default_root() -> Path:
    """``$DDP_TUTORIAL_ROOT``, else ``~/.cache/ddp-tutorial/data``."""
    value = os.environ.get(ROOT_VARIABLE)
    return Path(value).expanduser() if value else Path.home() / ".cache" / "ddp-tutorial" / "data"


def default_dataset() -> str:
    """``$DDP_TUTORIAL_DATASET``, else ``mnist``."""
    return os.environ.get(DATASET_VARIABLE) or DEFAULT_DATASET
