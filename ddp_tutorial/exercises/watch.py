"""What the attendee's training did, seen through torch's global hooks (on an engine): the module
every top-level forward went through (the DDP wrapper or the model itself), with or without
autograd, the parameters it used, and the parameters every ``optimizer.step()`` updated.

The checks of ``train_ddp_steps`` (04) and of the capstone ``train_ddp`` (08) name a forward
through the unwrapped model, a test on the wrong rank, or an optimizer over the wrong parameters
from these facts, instead of guessing from weights that disagree."""

from __future__ import annotations

from typing import List, Optional


class Forward:
    """One top-level forward call: ``kind`` (the class called), ``wrapped`` (a DDP wrapper),
    ``grad`` (autograd on), ``step`` (how many optimizer steps came before it: a forward after the
    last step is a test) and the ids of the parameters of the model behind it."""

    def __init__(self, module, grad: bool, step: int):
        from torch.nn.parallel import DistributedDataParallel as DDP
        self.wrapped = isinstance(module, DDP)
        inner = module.module if self.wrapped else module
        self.kind = type(inner).__name__ if not self.wrapped else "DistributedDataParallel"
        self.inner_kind = type(inner).__name__
        self.grad = grad
        self.step = step
        self.parameters = {id(p) for p in inner.parameters()}

    def as_dict(self) -> dict:
        return {"kind": self.kind, "inner_kind": self.inner_kind, "wrapped": self.wrapped, "grad": self.grad}


class Watch:
    """``with Watch() as seen: fn(...)``: ``seen.forwards`` (every top-level :class:`Forward`),
    ``seen.stepped`` (ids of the parameters some ``optimizer.step()`` updated), ``seen.first``
    (the first training forward's model weights, device and backend, taken before it ran) and
    ``seen.wrapped`` (the weights of the first model handed to DDP, before DDP copied rank 0's
    weights over them: different ranks' different seeds show there, not at the first step)."""

    def __init__(self):
        self.forwards: List[Forward] = []
        self.stepped: set = set()
        self.steps = 0
        self.first: Optional[dict] = None
        self.wrapped = None
        self._depth = 0
        self._handles: list = []
        self._init = None

    def __enter__(self) -> "Watch":
        from torch.nn.modules import module as modules
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.optim.optimizer import register_optimizer_step_pre_hook
        self._handles = [modules.register_module_forward_pre_hook(self._before),
                         modules.register_module_forward_hook(self._after, always_call=True),
                         register_optimizer_step_pre_hook(self._step)]
        self._init = original = DDP.__init__
        watch = self

        def init(ddp, module, *args, **kwargs):  # the weights as the attendee built them, then DDP's own
            if watch.wrapped is None:
                watch.wrapped = _flat(module)
            original(ddp, module, *args, **kwargs)

        DDP.__init__ = init
        return self

    def __exit__(self, *exc) -> None:
        from torch.nn.parallel import DistributedDataParallel as DDP
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._init is not None:
            DDP.__init__ = self._init
            self._init = None

    def _before(self, module, inputs) -> None:
        import torch
        if self._depth == 0:
            call = Forward(module, torch.is_grad_enabled(), self.steps)
            self.forwards.append(call)
            if call.grad and self.first is None:
                self.first = _first_facts(module)
        self._depth += 1

    def _after(self, module, inputs, output) -> None:
        self._depth = max(0, self._depth - 1)

    def _step(self, optimizer, args, kwargs) -> None:
        self.steps += 1
        self.stepped |= {id(p) for group in optimizer.param_groups for p in group["params"]}

    # What the checks ask --------------------------------------------------------------------
    def training(self) -> List[Forward]:
        """The forwards an optimizer step followed: training, not a test."""
        return [f for f in self.forwards if f.grad and f.step < self.steps]

    def unwrapped_training(self) -> Optional[Forward]:
        """The first training forward that went around the DDP wrapper (None: all through it)."""
        return next((f for f in self.training() if not f.wrapped), None)

    def trained_not_stepped(self) -> bool:
        """The model that training ran forward is not the one the optimizer updates."""
        trained = set().union(*(f.parameters for f in self.training())) if self.training() else set()
        return bool(self.steps) and bool(trained) and not trained <= self.stepped


def _flat(module):
    import torch
    parameters = list(module.parameters())
    return torch.cat([p.detach().flatten().cpu() for p in parameters]) if parameters else None


def _first_facts(module) -> dict:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    inner = module.module if isinstance(module, DDP) else module
    parameters = list(inner.parameters())
    return {"weights": torch.cat([p.detach().flatten().cpu() for p in parameters]) if parameters else None,
            "device": str(parameters[0].device) if parameters else "cpu",
            "backend": dist.get_backend() if dist.is_initialized() else None}
