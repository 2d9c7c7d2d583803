"""Exercises of notebooks 03 and 04, run on ipyparallel engines inside a real gloo process group:
all_reduce by hand, averaging gradients bit for bit like DDP, wrapping in DDP, the rank-0 test.

The ``_on_engine_*`` functions run on the engines; they catch the attendee's errors themselves and
send back a picklable report (so the kernel shows the attendee's line)."""

from __future__ import annotations

from ..i18n import number
from .core import Exercise, WrongAnswer, error_report, fail, raise_if_failed
from .guard import RuntimeState, as_number, put_back, shown
from .watch import Watch


ENGINES = 2  # the distributed exercises run at world size 2 (DDP's division by 2 is exact: bit for bit)


# ----------------------------------------------------------------------------------------------
# 03 · all_reduce by hand, on live engines

def distributed(worker, fn, *args, timeout: float = 180.0):
    """Run ``worker(env, fn, *args)`` on the engines; an answer that replaced one of torch's functions
    there is told so (and torch is put back, see :func:`_guarded`).

    The engines are kept for the next check (started by the first one when none were running): a check
    after the first costs a few seconds, not an engine start (issue 26). They end with ``ipp.stop()``,
    with the kernel, or when a check fails inside a collective (the runner stops them then)."""
    from .. import ipp
    results = ipp.run(_guarded, worker, fn, *args, n=ENGINES, keep=True, timeout=timeout)
    for rank, (_, replaced) in enumerate(results):
        if replaced:
            fail("ex.torch_replaced", names=", ".join(replaced), rank=rank)
    return raise_if_failed([result for result, _ in results])


# Where an attempt could replace what the graders and DDP rely on (``dist.all_reduce = …``).
_GUARDED_MODULES = ("torch", "torch.distributed", "torch.distributed.distributed_c10d", "torch.nn.functional",
                    "torch.optim")


def _guarded(env, worker, fn, *args):
    """``worker(env, fn, *args)`` on an engine, then every function or class of torch's modules (and
    every method of ``Tensor``, ``Module``, DDP) that the attendee's code replaced is put back: the
    engines are kept between checks, and one attempt's ``dist.all_reduce = lambda *a: None`` must
    not fail the next, correct one. Returns (the worker's result, the names that were replaced)."""
    import importlib

    import torch
    from torch.nn.parallel import DistributedDataParallel
    owners = [(name, importlib.import_module(name)) for name in _GUARDED_MODULES]
    owners += [(f"torch.{c.__name__}", c) for c in (torch.Tensor, torch.nn.Module)]
    owners += [("DistributedDataParallel", DistributedDataParallel)]
    before = [(label, owner, dict(vars(owner))) for label, owner in owners]
    state = RuntimeState()  # grad mode, dtype, generators, environment, folder, stdout: the next check's too
    try:
        result = worker(env, fn, *args)
    finally:
        try:
            replaced = [f"{label}.{name}" for label, owner, saved in before
                        for name in put_back(owner, saved, ignore=_torch_rewrapped)]
        finally:
            state.restore()
    return result, replaced


def _torch_rewrapped(value, old) -> bool:
    """torch's own doing, left in place: a torch function that wraps the saved one (torch wraps a few
    functions on first use, e.g. ``torch.manual_seed``), or one torch added. Any other change is put
    back — a different torch function included (``dist.all_reduce = dist.broadcast``)."""
    module = getattr(value, "__module__", None)
    if not (isinstance(module, str) and (module == "torch" or module.startswith("torch."))):
        return False
    if old is None:  # a name torch added
        return True
    inner = value
    for _ in range(8):  # the chain of functools.wraps
        inner = getattr(inner, "__wrapped__", None)
        if inner is None:
            return False
        if inner is old:
            return True
    return False


def _small_model():
    import torch
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def _rank_batch(rank, step=0, size=4):
    import torch
    generator = torch.Generator().manual_seed(1000 + 10 * rank + step)
    return torch.randn(size, 8, generator=generator), torch.randint(0, 3, (size,), generator=generator)


def _on_engine_mean(env, fn):
    import torch
    value = torch.tensor([1.5 * (env.rank + 1), 2.0 * env.rank, -1.0])
    try:
        got = fn(value.clone())
    except Exception as error:  # noqa: BLE001 - reported to the kernel as the attendee's line
        return {"attendee_error": error_report(error, fn)}
    return {"got": None if got is None else torch.as_tensor(got).tolist(), "own": value.tolist()}


def _grade_mean(fn):
    results = distributed(_on_engine_mean, fn)
    owns = [r["own"] for r in results]
    want = [sum(col) / len(owns) for col in zip(*owns)]
    total = [sum(col) for col in zip(*owns)]
    for rank, result in enumerate(results):
        got = result["got"]
        if got is None:
            fail("ex.mean_over_ranks.none", rank=rank)
        if _close(got, want):
            continue
        if _close(got, total):
            fail("ex.mean_over_ranks.sum", rank=rank, got=got, world=len(owns))
        if _close(got, result["own"]):
            fail("ex.mean_over_ranks.own", rank=rank, got=got)
        fail("ex.mean_over_ranks.wrong", rank=rank, got=got, want=want)
    return {"want": want}


def _close(a, b, tolerance=1e-6):
    try:
        return len(a) == len(b) and all(abs(float(x) - float(y)) <= tolerance for x, y in zip(a, b))
    except (TypeError, ValueError):
        return False


MEAN_CODE = '''
def mean_over_ranks(tensor):
    import torch.distributed as dist
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)  # ⟪artık her rank toplamı tutuyor‖every rank now holds the sum⟫
    return tensor / dist.get_world_size()
'''


def _on_engine_average(env, fn):
    import copy
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = _small_model()
    reference = copy.deepcopy(model)
    images, labels = _rank_batch(env.rank)
    torch.nn.functional.cross_entropy(model(images), labels).backward()
    local = [p.grad.clone() for p in model.parameters()]
    try:
        fn(model)
    except Exception as error:  # noqa: BLE001 - reported to the kernel as the attendee's line
        return {"attendee_error": error_report(error, fn)}
    mine = [p.grad.clone() for p in model.parameters()]
    ddp = DDP(reference)
    torch.nn.functional.cross_entropy(ddp(images), labels).backward()
    return {"local": local, "mine": mine, "ddp": [p.grad.clone() for p in reference.parameters()]}


def _grade_average(fn):
    import torch
    results = distributed(_on_engine_average, fn)
    world = len(results)
    for rank, result in enumerate(results):
        mine, ddp, local = result["mine"], result["ddp"], result["local"]
        if all(torch.equal(a, b) for a, b in zip(mine, ddp)):
            continue
        if all(torch.equal(a, b) for a, b in zip(mine, local)):
            fail("ex.average_gradients.unchanged", rank=rank)
        if all(torch.allclose(a, b * world) for a, b in zip(mine, ddp)):
            fail("ex.average_gradients.sum", rank=rank, world=world)
        if all(torch.allclose(a * world, b) for a, b in zip(mine, local)):
            fail("ex.average_gradients.no_all_reduce", rank=rank, world=world)
        gap = max(float((a - b).abs().max()) for a, b in zip(mine, ddp))
        if gap < 1e-5:
            fail("ex.average_gradients.not_exact", rank=rank, gap=f"{gap:.1e}")
        fail("ex.average_gradients.wrong", rank=rank, gap=f"{gap:.3g}")
    return {"count": sum(p.numel() for p in results[0]["mine"])}


AVERAGE_CODE = '''
def average_gradients(model):
    import torch.distributed as dist
    world = dist.get_world_size()
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad, op=dist.ReduceOp.SUM)
        parameter.grad /= world
'''


# ----------------------------------------------------------------------------------------------
# 04 · DDP wrap and k steps; the rank-0 test through .module under no_grad

STEPS = 3


def _weights(module):
    import torch
    return torch.cat([p.detach().flatten() for p in module.parameters()])


def _on_engine_train(env, fn, lr):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    out = {}
    for steps in (1, STEPS):
        batches = [_rank_batch(env.rank, step) for step in range(steps)]
        try:
            with Watch() as seen:
                returned = fn(_small_model(), batches, lr)
        except Exception as error:  # noqa: BLE001 - reported to the kernel as the attendee's line
            return {"attendee_error": error_report(error, fn)}
        around = seen.unwrapped_training()
        if returned is None:
            return {"none": True}
        module = returned.module if isinstance(returned, DDP) else returned
        weights = _weights(module)
        everyone = [torch.empty_like(weights) for _ in range(env.world_size)]
        dist.all_gather(everyone, weights)
        reference = DDP(_small_model())
        optimizer = torch.optim.SGD(reference.parameters(), lr=lr)
        for images, labels in batches:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(reference(images), labels).backward()
            optimizer.step()
        out[steps] = {"is_ddp": isinstance(returned, DDP), "type": type(returned).__name__,
                      "same": all(torch.equal(everyone[0], w) for w in everyone),
                      "gap": float((weights - _weights(reference.module)).abs().max()),
                      "around": around.inner_kind if around is not None else None}
    return out


def _grade_train(fn):
    results = distributed(_on_engine_train, fn, 0.1)
    for rank, result in enumerate(results):
        if result.get("none"):
            fail("ex.train_ddp_steps.none", rank=rank)
    for steps in (1, STEPS):
        result = results[0][steps]
        if result["is_ddp"] and result["around"]:
            fail("ex.train_ddp_steps.unwrapped_forward", kind=result["around"])
        if not result["same"]:
            fail("ex.train_ddp_steps.differ", steps=steps, kind=result["type"])
        if result["gap"] > 1e-6 and steps > 1 and results[0][1]["gap"] <= 1e-6:
            fail("ex.train_ddp_steps.accumulates", steps=steps, gap=f"{result['gap']:.3g}")
        if result["gap"] > 1e-6:
            fail("ex.train_ddp_steps.wrong", steps=steps, gap=f"{result['gap']:.3g}")
        if not result["is_ddp"]:
            fail("ex.train_ddp_steps.not_ddp", kind=result["type"])
    return {"steps": STEPS, "world": len(results)}


TRAIN_CODE = '''
def train_ddp_steps(model, batches, lr):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    ddp_model = DDP(model)                                # ⟪CPU/gloo: device_ids verilmez‖CPU/gloo: no device_ids⟫
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=lr)
    for images, labels in batches:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp_model(images), labels)
        loss.backward()  # ⟪DDP gradyanların ortalamasını burada alır‖DDP averages the gradients here⟫
        optimizer.step()
    return ddp_model
'''


def _on_engine_eval(env, fn):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = _small_model()
    ddp = DDP(model)
    seen = {"wrapper": 0, "grad": []}
    ddp.register_forward_pre_hook(lambda module, inputs: seen.__setitem__("wrapper", seen["wrapper"] + 1))
    model.register_forward_pre_hook(lambda module, inputs: seen["grad"].append(torch.is_grad_enabled()))
    generator = torch.Generator().manual_seed(7)
    images, labels = torch.randn(200, 8, generator=generator), torch.randint(0, 3, (200,), generator=generator)
    with torch.no_grad():
        want = (model(images).argmax(dim=1) == labels).float().mean().item() * 100
    seen["grad"].clear()
    try:
        got = fn(ddp, images, labels, env.rank)
    except Exception as error:  # noqa: BLE001 - reported to the kernel as the attendee's line
        return {"attendee_error": error_report(error, fn)}
    number = as_number(got)  # strict: a str or a tensor of several values is not an accuracy
    got = None if got is None else number if number is not None else shown(got)
    return {"got": got, "want": want, "wrapper": seen["wrapper"], "grad": any(seen["grad"]),
            "calls": len(seen["grad"]), "grad_left_off": not torch.is_grad_enabled()}


def _grade_eval(fn):
    results = distributed(_on_engine_eval, fn)
    first = results[0]
    for rank, result in enumerate(results):
        if result.get("grad_left_off"):  # torch.set_grad_enabled(False): the next training step would fail
            fail("ex.evaluate_rank0.grad_left_off", rank=rank)
    for rank, result in enumerate(results[1:], start=1):
        if result["got"] is not None or result["calls"]:
            fail("ex.evaluate_rank0.other_rank", rank=rank)
    if first["got"] is None:
        fail("ex.evaluate_rank0.none")
    if first["wrapper"]:
        fail("ex.evaluate_rank0.wrapper")
    if first["grad"]:
        fail("ex.evaluate_rank0.grad")
    if isinstance(first["got"], str) or abs(first["got"] - first["want"]) > 1e-4:
        if not isinstance(first["got"], str) and abs(first["got"] * 100 - first["want"]) < 1e-3:
            fail("ex.evaluate_rank0.fraction", got=first["got"], want=number(first["want"], decimals=2))
        fail("ex.evaluate_rank0.wrong", got=first["got"], want=number(first["want"], decimals=2))
    return {"acc": number(first["want"], decimals=2)}


EVAL_CODE = '''
def evaluate_rank0(ddp_model, images, labels, rank):
    import torch
    if rank != 0:
        return None                                       # ⟪yalnızca rank 0 test eder‖only rank 0 tests⟫
    with torch.no_grad():                                 # ⟪hesap grafiği yok, gradyan yok‖no graph, no gradients⟫
        # ⟪.module: sarmalayıcı değil, modelin kendisi‖.module: the model, not the wrapper⟫
        predictions = ddp_model.module(images).argmax(dim=1)
    return (predictions == labels).float().mean().item() * 100
'''


EXERCISES = (
    Exercise(
        "mean_over_ranks", "03", _grade_mean, MEAN_CODE,
        WrongAnswer("def mean_over_ranks(tensor):\n    import torch.distributed as dist\n"
                    "    dist.all_reduce(tensor)\n    return tensor", "ex.mean_over_ranks.sum"),
        distributed=True),
    Exercise(
        "average_gradients", "03", _grade_average, AVERAGE_CODE,
        WrongAnswer("def average_gradients(model):\n    import torch.distributed as dist\n"
                    "    for p in model.parameters():\n        dist.all_reduce(p.grad)", "ex.average_gradients.sum"),
        distributed=True),
    Exercise(
        "train_ddp_steps", "04", _grade_train, TRAIN_CODE,
        WrongAnswer("def train_ddp_steps(model, batches, lr):\n    import torch\n"
                    "    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n"
                    "    for images, labels in batches:\n        optimizer.zero_grad()\n"
                    "        torch.nn.functional.cross_entropy(model(images), labels).backward()\n"
                    "        optimizer.step()\n    return model", "ex.train_ddp_steps.differ"),
        distributed=True),
    Exercise(
        "evaluate_rank0", "04", _grade_eval, EVAL_CODE,
        WrongAnswer("def evaluate_rank0(ddp_model, images, labels, rank):\n    import torch\n"
                    "    if rank != 0:\n        return None\n    with torch.no_grad():\n"
                    "        return (ddp_model(images).argmax(1) == labels).float().mean().item() * 100",
                    "ex.evaluate_rank0.wrapper"),
        distributed=True),
)
