"""The capstone's code (notebook 08): the skeleton the attendee fills in (the placeholder, with the
checklist's numbered TODOs in the notebook's language), the checklist's solution, and its typical
mistakes, each the solution with a few lines changed (their diagnoses: ``ex.train_ddp.<name>``).
The check itself is :mod:`.capstone`."""

from __future__ import annotations

import textwrap
from typing import Optional

from ..i18n import t


def skeleton(lang: Optional[str] = None) -> str:
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

    # [1] ⟪cihaz kuralı: kendi GPU'su varsa → cuda:local_rank + nccl (tek GPU görünüyorsa: cuda:0);
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
