"""Tiny, valid, *learnable* MNIST-like IDX files for the tests.

No machine here can download MNIST, so the tests write their own files in the
same IDX format torchvision reads:

* images: ``>IIII`` header (magic 2051, count, 28, 28), then ``count * 784`` bytes;
* labels: ``>II`` header (magic 2049, count), then ``count`` bytes.

Each class is a bright 7×7 square at its own place on a 4×4 grid of the image,
drawn over dim noise, so even a small MLP learns the task in one short epoch
(the end-to-end training tests rely on that to stay fast). Measured with the seed's
MLP (4 layers, 128 hidden, Adam 1e-3): the default 4096 training images, i.e. 16
steps of 256 (2 ranks × 128), give ≈100 % test accuracy after one epoch; 1024
images (4 such steps) are too few to pass 80 % reliably.

    from idx_files import write_mnist_like
    root = write_mnist_like(tmp_path)                 # tmp_path/MNIST/raw/...
    src = write_mnist_like(tmp_path / "src", gz=True)  # a directory of four .gz files
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

from ddp_tutorial.datasets import FOLDERS  # noqa: F401  (name → torchvision folder: one source of truth)
from ddp_tutorial.staging import IMAGE_MAGIC, LABEL_MAGIC  # noqa: F401

# Top-left corner (row, column) of each class's square: 10 of the 16 cells of a 4×4 grid.
_CELLS = [(r * 7, c * 7) for r, c in
          [(0, 0), (0, 2), (1, 1), (1, 3), (2, 0), (2, 2), (3, 1), (3, 3), (0, 3), (3, 0)]]


def make_images(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """uint8 [N, 28, 28]: dim noise (0–60) plus a bright square (180–255) where the class says."""
    n = len(labels)
    images = rng.integers(0, 61, size=(n, 28, 28), dtype=np.uint8)
    for k, (r, c) in enumerate(_CELLS):
        rows = np.flatnonzero(labels == k)
        images[rows, r:r + 7, c:c + 7] = rng.integers(180, 256, size=(len(rows), 7, 7), dtype=np.uint8)
    return images


def image_bytes(images: np.ndarray) -> bytes:
    return struct.pack(">IIII", IMAGE_MAGIC, len(images), 28, 28) + images.astype(np.uint8).tobytes()


def label_bytes(labels: np.ndarray) -> bytes:
    return struct.pack(">II", LABEL_MAGIC, len(labels)) + labels.astype(np.uint8).tobytes()


def write_mnist_like(root: Path, dataset: str = "mnist", n_train: int = 4096, n_test: int = 512,
                     seed: int = 0, gz: bool = False) -> Path:
    """Write the four IDX files of a small MNIST-like set and return where they are.

    ``gz=False``: staged the way torchvision expects them,
    ``ROOT/<MNIST|FashionMNIST>/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte``; returns ``root``.
    ``gz=True``: the four ``*.gz`` files directly in ``root`` (like Debian's
    ``/usr/share/datasets/fashion-mnist``), ready for ``prepare(from_dir=root)``; returns ``root``.
    Labels cycle through 0…9 (balanced classes) in a shuffled order.
    """
    root = Path(root)
    target = root if gz else root / FOLDERS[dataset] / "raw"
    target.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.permutation(np.arange(n) % 10).astype(np.uint8)
        files = {f"{split}-images-idx3-ubyte": image_bytes(make_images(labels, rng)),
                 f"{split}-labels-idx1-ubyte": label_bytes(labels)}
        for name, payload in files.items():
            if gz:
                # mtime=0: the same seed gives byte-identical files.
                with open(target / f"{name}.gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
                    f.write(payload)
            else:
                (target / name).write_bytes(payload)
    return root
