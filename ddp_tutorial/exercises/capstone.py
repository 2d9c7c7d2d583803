"""The capstone of notebook 08: the attendee turns ``cnn_single.py`` (shipped beside this module,
copied into the notebook's folder by :func:`place_script`) into ``train_ddp``, following the
checklist's numbered TODOs of the skeleton; ``ex.train_ddp.check()`` runs it on two engines, where
the attendee's function creates and closes its own process group (as under torchrun), and names
the checklist item that is missing.

What the check sees on the engines (:mod:`.watch`): every top-level forward (wrapper or model,
training or test), the optimizer's parameters, the weights at the first step, the device and the
backend; and, in the kernel: the returned dict (the contract written in the skeleton), the
samples of every step against ``DistributedSampler``'s, and the weights against one process
replaying the same samples (bit-comparable on the CPU).
"""

from __future__ import annotations

import linecache
import re
import textwrap
from pathlib import Path
from typing import Optional

from ..i18n import TutorialError, language, localize_code, number, t
from .core import Exercise, NotDone, WrongAnswer, error_report, fail, is_placeholder, raise_if_failed, short_list
from .guard import shown
from .on_engines import distributed

SCRIPT = Path(__file__).with_name("cnn_single.py")
LIMIT, EPOCHS, BATCH, LR = 256, 2, 32, 0.1   # the check's run: 256 samples, 2 epochs, 4 steps per epoch and rank
CONTRACT = ("rank", "batches", "loss", "weights")


def place_script(folder: str = ".") -> Path:
    """Copy the shipped ``cnn_single.py`` into ``folder`` (the notebook's: the engines start there,
    so ``import cnn_single`` works in the kernel and on them); return the copy's path."""
    from ..atomic import write_text
    if not SCRIPT.is_file():
        raise TutorialError("ex.train_ddp.missing", path=str(SCRIPT))
    return write_text(Path(folder) / SCRIPT.name, SCRIPT.read_text(encoding="utf-8"))


# ----------------------------------------------------------------------------------------------
# The skeleton (the placeholder) and the solution

def _skeleton(lang: Optional[str] = None) -> str:
    def say(key: str, indent: int, prefix: str = "") -> str:
        return textwrap.fill(prefix + t(key, lang=lang), width=98, initial_indent=" " * indent + "# ",
                             subsequent_indent=" " * indent + "#     ")
    doc = textwrap.fill(t("ex.train_ddp.doc", lang=lang), width=98, initial_indent='    """', subsequent_indent="    ")
    return f'''def train_ddp(env, root, limit, epochs, batch_size, lr, save="cnn_ddp.pt", num_workers=0):
{doc}
    """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    from cnn_single import SmallCNN, accuracy, dataset, load

{say("ex.your_code", 4, "")}: TODO [1]–[5]
{say("ex.train_ddp.todo1", 4, "[1] ")}
    device = ...                                  # TODO [1]
    backend = ...                                 # TODO [1]
    created = not dist.is_initialized()
    if created:
{say("ex.train_ddp.todo1_group", 8, "[1] ")}
        ...                                       # TODO [1]
    try:
        train_set = dataset(root, True, limit)    # {t("ex.train_ddp.items", lang=lang)}
{say("ex.train_ddp.todo2", 8, "[2] ")}
        sampler = ...                             # TODO [2]
        loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler,
                            num_workers=num_workers)
{say("ex.train_ddp.todo3", 8, "[3] ")}
        model = SmallCNN().to(device)
        ddp_model = ...                           # TODO [3]
        optimizer = ...                           # TODO [3]
        batches = []
        for epoch in range(epochs):
{say("ex.train_ddp.todo2_epoch", 12, "[2] ")}
            ...                                   # TODO [2]
            for images, labels, indices in loader:
                optimizer.zero_grad()
{say("ex.train_ddp.todo3_forward", 16, "[3] ")}
                outputs = ...                     # TODO [3]
                loss = torch.nn.functional.cross_entropy(outputs, labels.to(device))
                loss.backward()
                optimizer.step()
                batches.append(indices)
        result = {{"rank": env.rank, "batches": batches, "loss": loss.item(),
                  "weights": torch.cat([p.detach().flatten().cpu() for p in model.parameters()])}}
{say("ex.train_ddp.todo4", 8, "[4] ")}
        ...                                       # TODO [4]
        return result
    finally:
{say("ex.train_ddp.todo5", 8, "[5] ")}
        ...                                       # TODO [5]'''


TRAIN_DDP_CODE = '''
def train_ddp(env, root, limit, epochs, batch_size, lr, save="cnn_ddp.pt", num_workers=0):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    from cnn_single import SmallCNN, accuracy, dataset, load

    # [1] ⟪aygıt kuralı: kendi GPU'su varsa → cuda:local_rank + nccl (tek GPU görünüyorsa: cuda:0);
    #     yoksa CPU + gloo‖the device rule: a GPU of its own → cuda:local_rank + nccl (one visible GPU: cuda:0);
    #     else CPU + gloo⟫
    if torch.cuda.is_available():
        device = torch.device("cuda", env.local_rank if torch.cuda.device_count() > 1 else 0)
        backend = "nccl"
        torch.cuda.set_device(device)
    else:
        device, backend = torch.device("cpu"), "gloo"
    created = not dist.is_initialized()
    # ⟪torchrun: env:// değişkenleri; ipp.run: grup zaten kurulu‖torchrun: the env:// variables; ipp.run: already there⟫
    if created:
        dist.init_process_group(backend)
    try:
        train_set = dataset(root, True, limit)    # ⟪öğeler: (görüntü, etiket, indis)‖items: (image, label, index)⟫
        # [2] ⟪örneklerden benim payım: her rank'te aynı karıştırma (seed),
        #     her epoch'ta yeni bir karıştırma‖my share of the samples: the same shuffle on every rank (seed),
        #     a new one every epoch⟫
        sampler = DistributedSampler(train_set, num_replicas=env.world_size, rank=env.rank, shuffle=True, seed=0)
        loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler, num_workers=num_workers)
        # [3] ⟪her rank'te aynı başlangıç ağırlıkları, DDP ile sarmalanmış;
        #     optimizer eğitilen modelin üzerinde‖the same initial weights on every rank, wrapped;
        #     the optimizer over what is trained⟫
        torch.manual_seed(0)
        model = SmallCNN().to(device)
        ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
        optimizer = torch.optim.SGD(ddp_model.parameters(), lr=lr)
        batches = []
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            for images, labels, indices in loader:
                optimizer.zero_grad()
                outputs = ddp_model(images.to(device))
                loss = torch.nn.functional.cross_entropy(outputs, labels.to(device))
                # ⟪DDP burada tüm rank'lerin gradyan ortalamasını alır‖DDP averages all ranks' gradients here⟫
                loss.backward()
                optimizer.step()
                batches.append(indices)
        result = {"rank": env.rank, "batches": batches, "loss": loss.item(),
                  "weights": torch.cat([p.detach().flatten().cpu() for p in model.parameters()])}
        # [4] ⟪test ve kayıt yalnızca 0 numaralı rank'te, modelin kendisiyle
        #     (accuracy() no_grad kullanır)‖test and save on rank 0 only, through the model itself
        #     (accuracy() uses no_grad)⟫
        if env.rank == 0:
            test_images, test_labels = load(root, False, limit)
            result["accuracy"] = accuracy(model, test_images.to(device), test_labels.to(device))
            torch.save(model.state_dict(), save)
        return result
    finally:
        # [5] ⟪bu fonksiyonun kurduğu grup kapatılır‖close the group this function created⟫
        if created:
            dist.destroy_process_group()
'''

# The typical mistakes of the checklist: (what the solution's text becomes, the diagnosis it gets).
MISTAKES = {
    "set_epoch": (("            sampler.set_epoch(epoch)\n", ""),),
    "test_rank": (("        if env.rank == 0:\n            test_images", "        if True:\n            test_images"),),
    "unwrapped": (("outputs = ddp_model(images.to(device))", "outputs = model(images.to(device))"),),
    "optimizer": (("torch.optim.SGD(ddp_model.parameters(), lr=lr)",
                   "torch.optim.SGD(SmallCNN().parameters(), lr=lr)"),),
    "no_destroy": (("        if created:\n            dist.destroy_process_group()", "        pass"),),
    "init": (("        torch.manual_seed(0)\n        model = SmallCNN()", "        model = SmallCNN()"),),
    "init_rank": (("        torch.manual_seed(0)\n        model = SmallCNN()",
                   "        torch.manual_seed(env.rank)\n        model = SmallCNN()"),),
    "weights_contract": (('"weights": torch.cat([p.detach().flatten().cpu() for p in model.parameters()])}\n',
                          '"weights": None}\n'),),
    "save_rank": (("            torch.save(model.state_dict(), save)\n", ""),
                  ("        return result\n", "        torch.save(model.state_dict(), save)\n        return result\n")),
}


def mistaken(name: str) -> str:
    """The solution with the typical mistake ``name`` of :data:`MISTAKES` (diagnosis ``ex.train_ddp.<name>``)."""
    code = TRAIN_DDP_CODE
    for old, new in MISTAKES[name]:
        code = code.replace(old, new)
    return code


_TODO = re.compile(r"^\s*(?:[\w.]+\s*=\s*)?\.\.\.\s*#\s*TODO \[(\d)\]")


def open_todos(fn) -> list:
    """The numbers of the skeleton's TODO lines still left as ``...`` in ``fn``'s source."""
    import inspect
    try:
        lines = inspect.getsource(fn).splitlines()
    except (OSError, TypeError):
        return []
    return sorted({int(m.group(1)) for line in lines if (m := _TODO.match(line))})


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
            returned = fn(env, root, LIMIT, EPOCHS, BATCH, LR, save=save)
    except Exception as error:  # noqa: BLE001 - reported to the kernel as the attendee's line
        report = error_report(error, fn)
        if _NO_GPU.search(report["message"]):  # cuda/nccl written in, on a machine without GPUs
            report["hint"] = t("ex.train_ddp.no_gpu")
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
    return diagnose(*collect(fn))


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
        return cnn_single.SmallCNN()


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


def _check_weights(facts: list, root: str) -> dict:
    import torch

    from . import cnn_single
    weights = [fact["result"]["weights"] for fact in facts]
    size = sum(p.numel() for p in _reference_model().parameters())
    for rank, w in enumerate(weights):
        if not isinstance(w, torch.Tensor) or w.dim() != 1 or w.numel() != size:
            fail("ex.train_ddp.weights_contract", rank=rank, got=shown(w), size=number(size))
    if any(not torch.equal(weights[0], w) for w in weights[1:]):
        fail("ex.train_ddp.differ")
    images, labels = cnn_single.load(root, True, LIMIT)
    one = _reference_model()
    optimizer = torch.optim.SGD(one.parameters(), lr=LR)
    for batches in zip(*(fact["result"]["batches"] for fact in facts)):
        batch = torch.cat([torch.as_tensor(b) for b in batches])
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(one(images[batch]), labels[batch]).backward()
        optimizer.step()
    want = torch.cat([p.detach().flatten() for p in one.parameters()])
    gap = (weights[0] - want).abs().max().item() if weights[0].shape == want.shape else float("inf")
    if gap > 1e-5:
        fail("ex.train_ddp.replay", gap=f"{gap:.2g}", lr=LR)
    return {"world": len(facts), "steps": len(facts[0]["result"]["batches"]),
            "accuracy": number(facts[0]["result"]["accuracy"], decimals=2), "gap": f"{gap:.0e}"}


EXERCISES = (
    Exercise(
        "train_ddp", "08", _grade_capstone, TRAIN_DDP_CODE,
        WrongAnswer(mistaken("set_epoch"), "ex.train_ddp.set_epoch"),
        stub=_skeleton, distributed=True),
)
