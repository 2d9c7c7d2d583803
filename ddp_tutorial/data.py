"""Step 3 of the story — the data: every training process loads the staged set into memory, once.

The seed tutorial gives each process a ``DataLoader`` over ``MNIST(root, download=True)``:
every sample goes through PIL and ``ToTensor`` one by one, and every process may try to
download. Here the data is staged once beforehand (:mod:`ddp_tutorial.staging`,
``ddp-tutorial data prepare``) and :func:`load` **never downloads**: it checks the files, reads
the raw IDX bytes straight into a tensor (:mod:`ddp_tutorial.idx`; the same tensors torchvision's ``MNIST`` class gives,
without importing torchvision: 2 s less start-up per process) and keeps the whole split as one
``uint8`` tensor, from which :meth:`InMemoryData.batch` cuts batches by index — the same numbers
``ToTensor`` gives (``x / 255``), without a Python loop over samples. On a GPU,
:meth:`InMemoryData.to` moves the whole split to the device (47 MB as uint8), so batches are cut
there with no host-to-device copy per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

import torch

from .datasets import CLASSES
from .staging import (ALL_FILES, check, file_names, prepare, prepare_command,  # noqa: F401  (re-exported)
                      raw_folder)
from .idx import HEIGHT, IMAGE_HEADER, LABEL_HEADER, WIDTH, read_idx


@dataclass
class InMemoryData:
    """A whole split in memory: ``images`` uint8 [N, 28, 28], ``labels`` int64 [N]."""

    images: torch.Tensor
    labels: torch.Tensor
    classes: List[str]
    name: str

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_features(self) -> int:
        """Inputs of the model: 28 × 28 = 784 pixels."""
        return self.images.shape[1] * self.images.shape[2]

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def batch(self, indices: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The samples at ``indices``: float32 [B, 784] in [0, 1] and int64 labels [B].

        One ``index_select`` on the uint8 tensor, then one conversion for the whole batch, on
        whatever device the data lives on.
        """
        indices = torch.as_tensor(indices, dtype=torch.long, device=self.images.device)
        images = self.images.index_select(0, indices).reshape(len(indices), -1)
        return images.to(torch.float32).div_(255), self.labels.index_select(0, indices)

    def to(self, device) -> "InMemoryData":
        """The same set with both tensors on ``device`` (itself when already there)."""
        device = torch.device(device)
        if self.images.device == device and self.labels.device == device:
            return self
        return InMemoryData(self.images.to(device), self.labels.to(device), self.classes, self.name)


def load(dataset: str, root: Path, train: bool = True, first: Optional[int] = None) -> InMemoryData:
    """The train (or test) split of a staged data set, in memory: its ``first`` samples when given
    (``--train-subset``), else all of them. Never downloads."""
    root = Path(root).expanduser()
    check(dataset, root)  # clear errors for an unknown name, missing or damaged files, before reading them
    folder = raw_folder(dataset, root)
    image_file, label_file = file_names("train" if train else "t10k")
    labels = read_idx(folder / label_file, header=LABEL_HEADER).long()
    images = read_idx(folder / image_file, header=IMAGE_HEADER).view(len(labels), HEIGHT, WIDTH)
    return InMemoryData(images=images[:first], labels=labels[:first], classes=list(CLASSES[dataset]), name=dataset)
