"""Step 2 — the data: every training process loads the staged set into memory, once.

The seed tutorial gives each process a ``DataLoader`` over ``MNIST(root, download=True)``:
every sample goes through PIL and ``ToTensor`` one by one, and every process may try to
download. Here the data is staged once beforehand (:mod:`ddp_tutorial.staging`,
``ddp-tutorial data prepare``) and :func:`load` **never downloads**: it checks the files, reads
them through torchvision (``download=False``) and keeps the whole split in memory as one
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
import torchvision.datasets

from .datasets import FOLDERS, NAMES
from .datasets import default_dataset, default_root  # noqa: F401  (re-exported for older callers)
from .staging import (ALL_FILES, check, check_name, file_names, prepare,  # noqa: F401  (re-exported)
                      prepare_command, raw_folder)

# The data sets we know, by the name used on the command line → torchvision's class (whose name
# is also its folder under the root: ROOT/FashionMNIST/raw/).
DATASETS = {name: getattr(torchvision.datasets, FOLDERS[name]) for name in NAMES}


def dataset_class(dataset: str):
    """The torchvision class for ``dataset`` (a :class:`TutorialError` for an unknown name)."""
    return DATASETS[check_name(dataset)]


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

    def first(self, n: Optional[int]) -> "InMemoryData":
        """Only the first ``n`` samples (all of them when ``n`` is None)."""
        if n is None:
            return self
        return InMemoryData(self.images[:n], self.labels[:n], self.classes, self.name)

    def to(self, device) -> "InMemoryData":
        """The same set with both tensors on ``device`` (itself when already there)."""
        device = torch.device(device)
        if self.images.device == device and self.labels.device == device:
            return self
        return InMemoryData(self.images.to(device), self.labels.to(device), self.classes, self.name)


def load(dataset: str, root: Path, train: bool = True) -> InMemoryData:
    """The train (or test) split of a staged data set, in memory. Never downloads."""
    cls = dataset_class(dataset)
    root = Path(root).expanduser()
    check(dataset, root)  # clear errors before torchvision's generic ones
    data = cls(str(root), train=train, download=False)
    return InMemoryData(images=data.data, labels=data.targets.long(), classes=list(data.classes), name=dataset)
