"""The capstone of notebook 08: the attendee turns ``cnn_single.py`` (shipped beside this module,
copied into the notebook's folder by :func:`place_script`) into ``train_ddp``, following the
checklist's numbered TODOs of the skeleton; ``ex.train_ddp.check()`` runs it on two engines, where
the attendee's function creates and closes its own process group (as under torchrun), and names
the checklist item that is missing.

What the check sees on the engines (:mod:`.watch`): every top-level forward (wrapper or model,
training or test), the optimizer's parameters, the weights at the first step, the device and the
backend; and, in the kernel: the returned dict (the contract written in the skeleton), the
samples of every step against ``DistributedSampler``'s, and the weights against one process
replaying the same samples. The check runs the function in float64 (:func:`in_float64`): two
processes × 32 samples and one process × 64 add the same numbers in a different order, and in
float32 that rounding grows over the steps to 6e-8 … 5e-5 depending on the CPU's vector unit
(issue 39; ``python -m benchmarks.proof_precision``); in float64 it stays near 1e-16, so a fixed
tolerance (:data:`EXACT`) separates rounding from a real mistake on every CPU.
"""

from __future__ import annotations

import functools
import linecache
import re
from pathlib import Path

from ..i18n import TutorialError, language, localize_code, number, t
from .capstone_code import MISTAKES, TRAIN_DDP_CODE, mistaken, skeleton  # noqa: F401 - 08 and the tests
from .core import Exercise, NotDone, WrongAnswer, error_report, fail, is_placeholder, raise_if_failed, short_list
from .guard import shown
from .on_engines import distributed

SCRIPT = Path(__file__).with_name("cnn_single.py")
LIMIT, EPOCHS, BATCH, LR = 256, 2, 32, 0.1   # the check's run: 256 samples, 2 epochs, 4 steps per epoch and rank
CONTRACT = ("rank", "batches", "loss", "weights")
# The largest weight difference that still counts as "the same" in float64, for the check and for 08's proof.
# Measured (benchmarks.proof_precision): 5.6e-17 … 6.9e-17 under ATEN_CPU_CAPABILITY=default, avx2 and
# avx512; a real mistake (a rank's batch left out of the replay) gives 1e-2 and more. 1e-12 leaves four
# orders of magnitude above the rounding and nine below the smallest mistake.
EXACT = 1e-12


def in_float64(fn):
    """``fn`` run with torch's default floating type float64 (double precision), then the type it
    found put back. ``cnn_single``'s ``load`` and ``SmallCNN`` follow the default type, so an
    unchanged ``train_ddp`` trains in float64 under it (notebook 08's proof; the check)."""
    @functools.wraps(fn)  # the same signature: ipp.run still sees the `env` first parameter
    def run(*args, **kwargs):
        import torch
        before = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_default_dtype(before)
    return run


def place_script(folder: str = ".") -> Path:
    """Copy the shipped ``cnn_single.py`` into ``folder`` (the notebook's: the engines start there,
    so ``import cnn_single`` works in the kernel and on them); return the copy's path."""
    from ..atomic import write_text
    if not SCRIPT.is_file():
        raise TutorialError("ex.train_ddp.missing", path=str(SCRIPT))
    return write_text(Path(folder) / SCRIPT.name, SCRIPT.read_text(encoding="utf-8"))


_TODO = re.compile(r"^\s*(?:[\w.]+\s*=\s*)?\.\.\.\s*#\s*TODO \[(\d)\]")


def open_todos(fn) -> list:
    """The numbers of the skeleton's TODO lines still left as ``...`` in ``fn``'s source."""
    import inspect
    try:
        lines = inspect.getsource(fn).splitlines()
    except (OSError, TypeError):
        return []
    return sorted({int(m.group(1)) for line in lines if (m := _TODO.match(line))})


# What torch says when float32 meets float64 (a .float() or dtype=torch.float32 in the attendee's function).
_FLOAT32 = re.compile(r"(?i)float.*double|double.*float")

# What torch says when CUDA or NCCL is asked for on a machine without GPUs.
_NO_GPU = re.compile(r"NCCL is only supported with GPUs|no GPUs found|Found no NVIDIA driver|"
                     r"Torch not compiled with CUDA|No CUDA GPUs are available|CUDA driver initialization failed")


def train_function(answer):
    """The ``train_ddp`` sections 3–6 of notebook 08 run: the attendee's once its ``check()`` passed
    (this very function), else the solution (it says so), so that the notebook runs through before
    the exercise is done and never builds on a function that failed its check."""
    from . import get
    if answer is not None and not is_placeholder(answer) and get("train_ddp").passed(answer):
        return answer
    print(t("ex.train_ddp.using_solution"))
    return solution_function()


def solution_function():
    """The checklist's solution, ``train_ddp``, compiled in the notebook's language."""
    filename = "<ddp_tutorial: train_ddp solution>"
    source = localize_code(TRAIN_DDP_CODE.strip(), language()) + "\n"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"__name__": "__main__"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - the package's own solution
    return namespace["train_ddp"]


# ----------------------------------------------------------------------------------------------
# On the engines: the attendee's function with its own process group, watched

def _on_engine_capstone(env, fn, root, folder):
    import importlib.util
    import os
    import sys

    import torch
    import torch.distributed as dist

    from ..device_rule import binding_of, device_for
    from ..whoami import find_free_port
    from .watch import Watch
    if importlib.util.find_spec("cnn_single") is None:
        sys.path.append(folder)                   # no copy in the notebook's folder: the check's own
    port = [find_free_port() if env.rank == 0 else None]
    dist.broadcast_object_list(port, src=0)       # a fresh port for the attendee's own group
    dist.destroy_process_group()                  # the attendee's function creates its own, as under torchrun
    variables = {"RANK": env.rank, "WORLD_SIZE": env.world_size, "LOCAL_RANK": env.local_rank,
                 "LOCAL_WORLD_SIZE": env.local_world_size, "MASTER_ADDR": env.master_addr, "MASTER_PORT": port[0]}
    before = {name: os.environ.get(name) for name in variables}
    os.environ.update({name: str(value) for name, value in variables.items()})
    os.makedirs(folder, exist_ok=True)
    save = os.path.join(folder, f"rank{env.rank}.pt")
    torch.manual_seed(1000 + env.rank)            # each rank its own random state, as separate processes have
    try:
        with Watch() as seen:
            returned = in_float64(fn)(env, root, LIMIT, EPOCHS, BATCH, LR, save=save)
    except Exception as error:  # noqa: BLE001 - reported to the kernel as the attendee's line
        report = error_report(error, fn)
        if _NO_GPU.search(report["message"]):  # cuda/nccl written in, on a machine without GPUs
            report["hint"] = t("ex.train_ddp.no_gpu")
        elif _FLOAT32.search(report["message"]):  # a .float() or dtype=float32 written in
            report["hint"] = t("ex.train_ddp.float32")
        return {"attendee_error": report}
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    left_open = dist.is_initialized()
    if left_open:
        dist.destroy_process_group()
    saved = os.path.exists(save)
    if saved:
        os.remove(save)
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    try:
        want = device_for(env.local_rank, visible, "auto", env.local_world_size, binding_of(env))
    except TutorialError:
        want = None
    tests = [f.as_dict() for f in seen.forwards if f.step >= seen.steps]
    facts = {"left_open": left_open, "saved": saved, "want_device": want, "first": seen.first, "tests": tests,
             "wrapped": seen.wrapped,
             "around": getattr(seen.unwrapped_training(), "inner_kind", None),
             "optimizer_wrong": seen.trained_not_stepped(), "returned": type(returned).__name__}
    if isinstance(returned, dict):
        facts["keys"] = sorted(map(str, returned))
        facts["result"] = {key: returned[key] for key in (*CONTRACT, "accuracy") if key in returned}
    return facts


# ----------------------------------------------------------------------------------------------
# In the kernel: the diagnosis, one checklist item at a time

def _grade_capstone(fn):
    todo = open_todos(fn)
    if todo == [1, 2, 3, 4, 5]:
        raise NotDone()
    if todo:
        fail("ex.train_ddp.todo", open=", ".join(f"[{n}]" for n in todo))
    return dict(diagnose(*collect(fn)), gpu=gpu_lines_note(fn))


def gpu_lines_note(fn) -> str:
    """What check() cannot test on CPU engines: the GPU lines of [1] and [3] (``set_device``, ``device_ids``),
    looked for in the function's source; a sentence naming those it does not see, else ""."""
    import inspect
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return ""
    missing = [name for name in ("set_device", "device_ids") if name not in source]
    return t("ex.train_ddp.gpu_unseen", missing=", ".join(missing)) if missing else ""


def collect(fn) -> tuple:
    """Run ``fn`` on the engines, watched: (the facts of every rank, the data root)."""
    import shutil
    import tempfile

    from ..datasets import default_root
    root = str(default_root())
    if not any((Path(root) / name / "raw").is_dir() for name in ("MNIST", "FashionMNIST")):
        raise TutorialError("ex.train_ddp.no_data", root=root)
    folder = tempfile.mkdtemp(prefix="ddp-capstone-")
    try:
        place_script(folder)
        return raise_if_failed(distributed(_on_engine_capstone, fn, root, folder, timeout=240.0)), root
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def diagnose(facts: list, root: str) -> dict:
    """Raise the diagnosis of the first checklist item the engines' ``facts`` show missing."""
    for rank, fact in enumerate(facts):
        missing = [key for key in CONTRACT if key not in fact.get("keys", ())]
        if missing:
            fail("ex.train_ddp.contract", rank=rank, got=fact["returned"], missing=", ".join(missing))
    for rank, fact in enumerate(facts):
        if fact["left_open"]:
            fail("ex.train_ddp.no_destroy", rank=rank)
    for rank, fact in enumerate(facts):
        first = fact["first"]
        if first is None:
            fail("ex.train_ddp.no_training", rank=rank)
        want = fact["want_device"]
        backend = "nccl" if want and want.startswith("cuda") else "gloo"
        if want is not None and (first["device"] != want or first["backend"] != backend):
            fail("ex.train_ddp.device", rank=rank, device=first["device"], backend=first["backend"],
                 want=want, want_backend=backend)
    for rank, fact in enumerate(facts):
        if fact["around"]:
            fail("ex.train_ddp.unwrapped", rank=rank, kind=fact["around"])
        if fact["optimizer_wrong"]:
            fail("ex.train_ddp.optimizer", rank=rank)
    _check_initial_weights(facts)
    _check_rank_seeds(facts)
    _check_samples(facts)
    for rank, fact in enumerate(facts[1:], start=1):
        if fact["tests"] or "accuracy" in fact["result"]:
            fail("ex.train_ddp.test_rank", rank=rank)
        if fact["saved"]:
            fail("ex.train_ddp.save_rank", rank=rank)
    first = facts[0]
    if "accuracy" not in first["result"]:
        fail("ex.train_ddp.no_accuracy")
    if any(test["wrapped"] for test in first["tests"]):
        fail("ex.train_ddp.test_wrapper")
    if any(test["grad"] for test in first["tests"]):
        fail("ex.train_ddp.test_grad")
    if not first["saved"]:
        fail("ex.train_ddp.no_save")
    return _check_weights(facts, root)


def _check_initial_weights(facts: list) -> None:
    import torch
    reference = _reference_model().state_dict().values()
    want = torch.cat([w.flatten() for w in reference])
    starts = [fact["first"]["weights"] for fact in facts]
    if any(not torch.equal(starts[0], start) for start in starts[1:]):
        fail("ex.train_ddp.init_differ")
    if starts[0] is None or starts[0].shape != want.shape or not torch.equal(starts[0], want):
        fail("ex.train_ddp.init")


def _check_rank_seeds(facts: list) -> None:
    """Different weights handed to DDP on different ranks (``torch.manual_seed(rank)``): DDP's
    broadcast hides it at the first step, the weights before wrapping show it."""
    import torch
    built = [fact.get("wrapped") for fact in facts]
    for rank, weights in enumerate(built[1:], start=1):
        if built[0] is not None and weights is not None and (
                weights.shape != built[0].shape or not torch.equal(weights, built[0])):
            fail("ex.train_ddp.init_rank", rank=rank)


def _reference_model():
    import torch

    from . import cnn_single
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return in_float64(cnn_single.SmallCNN)()  # as the check runs the attendee's function


def _shares(rank: int, world: int) -> list:
    """The steps of ``rank`` (lists of indices) that DistributedSampler(seed=0) with set_epoch gives."""
    from torch.utils.data.distributed import DistributedSampler
    sampler = DistributedSampler(range(LIMIT), num_replicas=world, rank=rank, shuffle=True, seed=0)
    steps = []
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        order = list(sampler)
        steps += [order[i:i + BATCH] for i in range(0, len(order), BATCH)]
    return steps


def _check_samples(facts: list) -> None:
    world = len(facts)
    for rank, fact in enumerate(facts):
        got = [[int(i) for i in batch] for batch in fact["result"]["batches"]]
        want = _shares(rank, world)
        per_epoch = len(want) // EPOCHS
        epochs = [sum(got[e * per_epoch:(e + 1) * per_epoch], []) for e in range(EPOCHS)]
        if len(got) == len(want) and epochs[1] == epochs[0]:
            fail("ex.train_ddp.set_epoch", rank=rank, order=short_list(epochs[0]))
        if got != want:
            fail("ex.train_ddp.sampler", rank=rank, got=short_list(sum(got, [])), count=len(sum(got, [])),
                 want=short_list(sum(want, [])), want_count=len(sum(want, [])))


def replay(root: str, limit: int, lr: float, batches_of_ranks: list):
    """One process trained on the union of every rank's batch at every step (SGD, seed 0, the first
    ``limit`` training images): its final weights, flat, in torch's default type (:func:`in_float64`)."""
    import torch

    from . import cnn_single
    images, labels = cnn_single.load(root, True, limit)
    with torch.random.fork_rng(devices=[]):  # the caller's random state stays as it was
        torch.manual_seed(0)
        one = cnn_single.SmallCNN()
    optimizer = torch.optim.SGD(one.parameters(), lr=lr)
    for batches in zip(*batches_of_ranks):
        batch = torch.cat([torch.as_tensor(b) for b in batches])
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(one(images[batch]), labels[batch]).backward()
        optimizer.step()
    return torch.cat([p.detach().flatten() for p in one.parameters()])


def _check_weights(facts: list, root: str) -> dict:
    import torch

    weights = [fact["result"]["weights"] for fact in facts]
    size = sum(p.numel() for p in _reference_model().parameters())
    for rank, w in enumerate(weights):
        if not isinstance(w, torch.Tensor) or w.dim() != 1 or w.numel() != size:
            fail("ex.train_ddp.weights_contract", rank=rank, got=shown(w), size=number(size))
    if any(not torch.equal(weights[0], w) for w in weights[1:]):
        fail("ex.train_ddp.differ")
    want = in_float64(replay)(root, LIMIT, LR, [fact["result"]["batches"] for fact in facts])
    gap = (weights[0] - want).abs().max().item() if weights[0].shape == want.shape else float("inf")
    if gap > EXACT:
        fail("ex.train_ddp.replay", gap=f"{gap:.2g}", lr=LR)
    return {"world": len(facts), "steps": len(facts[0]["result"]["batches"]),
            "accuracy": number(facts[0]["result"]["accuracy"], decimals=2), "gap": f"{gap:.0e}"}


EXERCISES = (
    Exercise(
        "train_ddp", "08", _grade_capstone, TRAIN_DDP_CODE,
        WrongAnswer(mistaken("set_epoch"), "ex.train_ddp.set_epoch"),
        stub=skeleton, distributed=True),
)
