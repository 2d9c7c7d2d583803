"""The sampler for notebook 02 and the exercises: each rank trains on its own share of the data set.
``train.py`` writes the same ``DistributedSampler`` itself (step 5 of its story); this module shows
a rank's share, epoch by epoch.

``torch.utils.data.DistributedSampler`` splits the indices 0 … N−1 among the
``world_size`` ranks: it shuffles them with a seed that every rank shares (plus the
epoch number, set by ``set_epoch``), pads the list by repeating a few indices until
it divides evenly, and gives rank ``r`` every ``world_size``-th index starting at
``r``. The shares are disjoint (apart from the padding) and together cover the set.

The seed tutorial hands the sampler to a ``DataLoader`` that decodes one image at a
time through PIL and ``ToTensor``. We keep the sampler — it decides *which* samples a
rank sees — but take each batch from tensors already in memory, by index, which is
about five times faster on a CPU (see ``benchmarks/``). The batches are the same
samples in the same order as the ``DataLoader`` would give.
"""

from __future__ import annotations

import torch
from torch.utils.data.distributed import DistributedSampler


def make_sampler(num_samples: int, world_size: int, rank: int, seed: int, shuffle: bool = True,
                 drop_last: bool = False) -> DistributedSampler:
    """The seed's ``DistributedSampler(train_dataset, num_replicas=world_size, rank=rank)``, as
    :mod:`ddp_tutorial.train` writes it: the sampler only needs ``len()``, so a ``range`` will do."""
    return DistributedSampler(range(num_samples), num_replicas=world_size, rank=rank,
                              shuffle=shuffle, seed=seed, drop_last=drop_last)


def epoch_indices(sampler: DistributedSampler, epoch: int) -> torch.Tensor:
    """This rank's indices for ``epoch``. ``set_epoch`` reshuffles: forget it and every
    epoch repeats the first epoch's order."""
    sampler.set_epoch(epoch)
    return torch.tensor(list(iter(sampler)), dtype=torch.long)

