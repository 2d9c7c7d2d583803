"""Exercises of notebooks 01 and 02: the seed's global rank, the MLP's size, sharding like
``DistributedSampler``, steps per epoch, and the ``set_epoch`` bug (graders and solutions)."""

from __future__ import annotations

import math

from ..i18n import number, t
from .core import Exercise, WrongAnswer, call, expect_int, fail, short_list
from .guard import as_int, as_int_list, shown


# ----------------------------------------------------------------------------------------------
# 01 · the seed's global rank formula, and the MLP's parameter count

def _grade_global_rank(fn):
    for node_rank, local_rank, per_node in ((0, 0, 3), (0, 2, 3), (1, 0, 3), (1, 2, 3), (2, 1, 4)):
        want = local_rank + node_rank * per_node
        got = expect_int(call(fn, node_rank, local_rank, per_node))
        if got != want:
            fail("ex.global_rank.wrong", node=node_rank, local=local_rank, per_node=per_node, got=got, want=want)
    return {"world": 6}


GLOBAL_RANK_CODE = '''
def global_rank(node_rank, local_rank, gpus_per_node):
    return local_rank + node_rank * gpus_per_node
'''


def _grade_mlp_parameters(fn):
    from ..model import DeepNeuralNetwork, count_parameters
    for layers, features, hidden, classes in ((2, 10, 5, 3), (3, 20, 7, 4), (4, 784, 128, 10)):
        want = count_parameters(DeepNeuralNetwork(layers, features, hidden, classes))
        got = expect_int(call(fn, layers, features, hidden, classes))
        if got == want:
            continue
        shape = f"{layers}, {features}, {hidden}, {classes}"
        weights_only = features * hidden + (layers - 2) * hidden * hidden + hidden * classes
        if got == weights_only:
            fail("ex.mlp_parameters.biases", shape=shape, got=got, want=number(want))
        middle_layer = hidden * hidden + hidden  # one hidden→hidden Linear, its biases included
        for counted in (layers - 1, layers - 3):  # one hidden→hidden layer too many, or too few
            if counted >= 0 and got == want + (counted - (layers - 2)) * middle_layer:
                fail("ex.mlp_parameters.layers", shape=shape, got=got, want=number(want), counted=counted,
                     middle=layers - 2, per_layer=number(middle_layer))
        fail("ex.mlp_parameters.wrong", shape=shape, got=got, want=number(want))
    return {"count": number(134794)}


MLP_PARAMETERS_CODE = '''
def mlp_parameters(num_layers, input_features, hidden, classes):
    # ⟪girdi katmanının ağırlıkları + sapmaları (bias)‖weights + biases of the input layer⟫
    first = input_features * hidden + hidden
    middle = (num_layers - 2) * (hidden * hidden + hidden)
    last = hidden * classes + classes
    return first + middle + last
'''


# ----------------------------------------------------------------------------------------------
# 02 · sharding like DistributedSampler, steps per epoch, the set_epoch bug

def _sampler_share(num_samples, world_size, rank, seed, epoch):
    from ..sampling import epoch_indices, make_sampler
    return epoch_indices(make_sampler(num_samples, world_size, rank, seed=seed), epoch).tolist()


def _grade_shard(fn):
    for n, world, seed, epoch in ((10, 3, 0, 0), (11, 4, 1, 2), (8, 4, 0, 1), (5, 3, 7, 0)):
        for rank in range(world):
            want = _sampler_share(n, world, rank, seed, epoch)  # before the attendee's code runs
            returned = call(fn, n, world, rank, seed, epoch)
            got = as_int_list(returned)
            if got is None:
                fail("ex.shard_indices.type", got=shown(returned))
            if got == want:
                continue
            block = _contiguous_block(got, n, world, seed, epoch)
            if block is not None:  # the shuffled list cut into blocks, not dealt out every world_size-th index
                fail("ex.shard_indices.blocks", rank=rank, world=world, n=n, seed=seed, epoch=epoch,
                     got=short_list(got), want=short_list(want), start=block, end=block + len(got) - 1)
            if len(got) != len(want):
                fail("ex.shard_indices.length", rank=rank, world=world, n=n, seed=seed, epoch=epoch,
                     got=short_list(got), count=len(got), want=short_list(want), want_count=len(want))
            if epoch and got == _sampler_share(n, world, rank, seed, 0):  # the generator seeded without the epoch
                fail("ex.shard_indices.no_epoch", rank=rank, world=world, n=n, seed=seed, epoch=epoch,
                     got=short_list(got), want=short_list(want), total=seed + epoch)
            fail("ex.shard_indices.wrong", rank=rank, world=world, n=n, seed=seed, epoch=epoch, got=short_list(got),
                 want=short_list(want), total=seed + epoch)
    return {}


def _contiguous_block(got, n, world, seed, epoch):
    """Where ``got`` starts when it is a contiguous block of epoch ``epoch``'s shuffled list (padded or not):
    the commonest sharding mistake, ``order[rank * per:(rank + 1) * per]``; ``None`` otherwise. The list is
    the sampler's own: rank r's share is its positions r, r + world, r + 2·world, … (a block of one index
    is also every world-size-th, so only blocks of two or more count)."""
    if len(got) < 2:
        return None
    shares = [_sampler_share(n, world, rank, seed, epoch) for rank in range(world)]
    padded = [shares[i % world][i // world] for i in range(len(shares[0]) * world)]
    for order in (padded, padded[:n]):
        for per in {math.ceil(n / world), n // world, len(got)}:
            for start in range(0, len(order), per or 1):
                if order[start:start + per] == got:
                    return start
    return None


SHARD_CODE = '''
def shard_indices(num_samples, world_size, rank, seed, epoch):
    import math
    import torch
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)  # ⟪her rank'te aynı karıştırma‖every rank: the same shuffle⟫
    order = torch.randperm(num_samples, generator=generator).tolist()
    total = math.ceil(num_samples / world_size) * world_size
    order += order[: total - num_samples]  # ⟪dolgu: listenin başından tekrar‖padding: repeat from the start⟫
    # ⟪rank konumundan başlayarak her world_size'ıncı öğe‖every world_size-th from rank⟫
    return order[rank:total:world_size]
'''


def _grade_padding(answer):
    if type(answer) is not dict or set(answer) != {"per_rank", "repeated"}:
        fail("ex.padding_answer.type", got=shown(answer, 80))
    shares = [_sampler_share_unshuffled(11, 4, rank) for rank in range(4)]
    flat = sum(shares, [])
    per_rank, repeated = len(shares[0]), sorted({i for i in flat if flat.count(i) > 1})
    if as_int(answer["per_rank"]) != per_rank:
        fail("ex.padding_answer.per_rank", got=shown(answer["per_rank"]))
    got = as_int_list(answer["repeated"])
    if got is None:
        fail("ex.padding_answer.type", got=shown(answer, 80))
    got = sorted(got)
    if got != repeated:
        fail("ex.padding_answer.repeated", got=got, per_rank=per_rank, total=per_rank * 4)
    return {"shares": "; ".join(f"rank {rank}: {share}" for rank, share in enumerate(shares))}


def _sampler_share_unshuffled(num_samples, world_size, rank):
    from ..sampling import epoch_indices, make_sampler
    return epoch_indices(make_sampler(num_samples, world_size, rank, seed=0, shuffle=False), 0).tolist()


PADDING_CODE = '''
# ⟪rank başına ceil(11 / 4) = 3 indis‖ceil(11 / 4) = 3 each⟫
# ⟪12 − 11 = 1 dolgu indisi: 0 indisi bir kez daha‖12 − 11 = 1 padded: index 0 again⟫
padding_answer = {"per_rank": 3, "repeated": [0]}
'''


def _padding_stub(lang=None):
    """The exercise cell of padding_answer: a value to fill in."""
    return ('padding_answer = None  # ' + t("ex.padding_answer.your_code", lang=lang))


def _grade_steps(fn):
    for n, world, batch in ((60_000, 1, 128), (60_000, 6, 128), (60_000, 7, 128), (10, 3, 2), (11, 4, 3)):
        want = math.ceil(math.ceil(n / world) / batch)
        got = expect_int(call(fn, n, world, batch))
        if got != want:
            fail("ex.steps_per_epoch.wrong", n=number(n), world=world, batch=batch, got=got, want=want)
    return {"steps": 79}


STEPS_CODE = '''
def steps_per_epoch(num_samples, world_size, batch_size):
    import math
    # ⟪örnekleyici payları dolguyla eşitler‖the sampler pads to whole shares⟫
    per_rank = math.ceil(num_samples / world_size)
    return math.ceil(per_rank / batch_size)  # ⟪son, küçük parti de bir adımdır‖a last, smaller batch is a step too⟫
'''


def _grade_epoch_orders(fn):
    from ..sampling import make_sampler
    sampler = make_sampler(40, 2, 1, seed=0)
    want = [_sampler_share(40, 2, 1, 0, epoch) for epoch in range(3)]
    returned = call(fn, sampler, 3)
    got = [as_int_list(order) for order in returned] if type(returned) in (list, tuple) else [None]
    if any(order is None for order in got):
        fail("ex.epoch_orders.type", got=shown(returned))
    if len(got) != 3:
        fail("ex.epoch_orders.count", got=len(got))
    for epoch in range(1, 3):
        if got[epoch] == got[0] and want[epoch] != want[0]:
            fail("ex.epoch_orders.repeat", epoch=epoch, got=short_list(got[epoch]))
    for epoch in range(3):
        if got[epoch] != want[epoch]:
            fail("ex.epoch_orders.wrong", epoch=epoch, got=short_list(got[epoch]), want=short_list(want[epoch]))
    return {}


EPOCH_ORDERS_CODE = '''
def epoch_orders(sampler, epochs):
    orders = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)  # ⟪düzeltme: her epoch'ta yeni bir karıştırma‖the fix: a new shuffle every epoch⟫
        orders.append(list(iter(sampler)))
    return orders
'''


EXERCISES = (
    Exercise(
        "global_rank", "01", _grade_global_rank, GLOBAL_RANK_CODE,
        WrongAnswer("def global_rank(node_rank, local_rank, gpus_per_node):\n    return node_rank + local_rank",
                    "ex.global_rank.wrong")),
    Exercise(
        "mlp_parameters", "01", _grade_mlp_parameters, MLP_PARAMETERS_CODE,
        WrongAnswer("def mlp_parameters(num_layers, input_features, hidden, classes):\n    return input_features "
                    "* hidden + (num_layers - 2) * hidden * hidden + hidden * classes", "ex.mlp_parameters.biases")),
    Exercise(
        "padding_answer", "02", _grade_padding, PADDING_CODE,
        WrongAnswer('padding_answer = {"per_rank": 2, "repeated": []}', "ex.padding_answer.per_rank"),
        stub=_padding_stub),
    Exercise(
        "shard_indices", "02", _grade_shard, SHARD_CODE,
        WrongAnswer("def shard_indices(num_samples, world_size, rank, seed, epoch):\n    import torch\n"
                    "    g = torch.Generator(); g.manual_seed(seed + epoch)\n"
                    "    return torch.randperm(num_samples, generator=g).tolist()[rank::world_size]",
                    "ex.shard_indices.length")),
    Exercise(
        "steps_per_epoch", "02", _grade_steps, STEPS_CODE,
        WrongAnswer("def steps_per_epoch(num_samples, world_size, batch_size):\n"
                    "    return num_samples // world_size // batch_size", "ex.steps_per_epoch.wrong")),
    Exercise(
        "epoch_orders", "02", _grade_epoch_orders, EPOCH_ORDERS_CODE,
        WrongAnswer("def epoch_orders(sampler, epochs):\n    return [list(iter(sampler)) for epoch in range(epochs)]",
                    "ex.epoch_orders.repeat")),
)
