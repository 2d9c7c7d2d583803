"""The DistributedSampler contract the training relies on, and our batching by index."""

import torch
from torch.utils.data import DataLoader, TensorDataset

from ddp_tutorial.sampling import epoch_indices, make_sampler


def shares(n, world, epoch=0, seed=0):
    return [epoch_indices(make_sampler(n, world, r, seed), epoch).tolist() for r in range(world)]


def test_shares_are_disjoint_and_cover_the_set():
    parts = shares(1000, 4)
    assert all(len(p) == 250 for p in parts)
    flat = [i for p in parts for i in p]
    assert sorted(flat) == list(range(1000))


def test_padding_is_counted_when_the_set_does_not_divide():
    n, world = 1003, 4
    parts = shares(n, world)
    assert all(len(p) == 251 for p in parts)        # ceil(1003 / 4)
    flat = [i for p in parts for i in p]
    assert set(flat) == set(range(n))               # everything is covered
    assert len(flat) - n == 1                       # one index repeated as padding


def test_set_epoch_changes_the_order_but_not_the_split_size():
    e0, e1 = shares(600, 2, epoch=0), shares(600, 2, epoch=1)
    assert e0 != e1
    assert sorted(e0[0] + e0[1]) == sorted(e1[0] + e1[1]) == list(range(600))
    assert shares(600, 2, epoch=1) == e1            # same epoch, same order: reproducible


class Tiny:
    def __init__(self, n):
        self.images = torch.arange(n * 784, dtype=torch.float32).reshape(n, 784)
        self.labels = torch.arange(n) % 10

    def batch(self, idx):
        return self.images[idx], self.labels[idx]


def test_index_batches_match_a_dataloader_over_the_same_sampler():
    n, world, rank, bs = 300, 3, 1, 32
    data = Tiny(n)
    ours = [data.batch(b) for b in torch.split(epoch_indices(make_sampler(n, world, rank, 5), 2), bs)]
    sampler = make_sampler(n, world, rank, 5)
    sampler.set_epoch(2)
    loader = DataLoader(TensorDataset(data.images, data.labels), batch_size=bs, sampler=sampler)
    theirs = list(loader)
    assert len(ours) == len(theirs) == 4            # 100 samples: 32, 32, 32, 4
    for (a, b), (c, d) in zip(ours, theirs):
        assert torch.equal(a, c) and torch.equal(b, d)
