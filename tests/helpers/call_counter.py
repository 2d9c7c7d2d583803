"""Who makes the torch.distributed calls of a run, counted in the process it is installed in (a rank a test
starts, an ipyparallel engine): ``install()`` wraps

* every public function of ``torch.distributed``, recorded with its immediate caller (torch's own calls,
  DDP's broadcast at wrap time for one, are torch's and stay out);
* three things torch does for a caller, recorded with the first caller outside torch:
  ``DistributedDataParallel`` (its constructor broadcasts rank 0's weights), ``DistributedDataParallel.forward``
  with autograd on and the model training (the ``backward()`` after it all-reduces the gradients), and a
  ``TCPStore`` (a store server or client; ``init_process_group`` makes one through torch's rendezvous).

``CALLS`` holds ``[name, file]`` pairs; :func:`ours` counts those made from the package's own files."""

from __future__ import annotations

import inspect
import os
from collections import Counter

CALLS: list = []


def _first_outside(frame, torch_folder: str) -> str:
    """The file of the first frame from ``frame`` up that is neither torch's nor this counter's."""
    while frame is not None and (frame.f_code.co_filename.startswith(torch_folder)
                                 or frame.f_code.co_filename == __file__):
        frame = frame.f_back
    return frame.f_code.co_filename if frame is not None else ""


def install() -> list:
    """Wrap what is counted (once per process); returns :data:`CALLS`."""
    import importlib

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    if getattr(dist, "_counted", False):
        return CALLS
    torch_folder = os.path.dirname(torch.__file__)

    def direct(name, function):
        def counted(*args, **kwargs):
            CALLS.append([name, inspect.currentframe().f_back.f_code.co_filename])
            return function(*args, **kwargs)
        return counted

    def through_torch(name, function):
        def counted(*args, **kwargs):
            CALLS.append([name, _first_outside(inspect.currentframe().f_back, torch_folder)])
            return function(*args, **kwargs)
        return counted

    for name in dir(dist):
        value = getattr(dist, name)
        if not name.startswith("_") and inspect.isfunction(value):
            setattr(dist, name, direct(name, value))
    rendezvous = importlib.import_module("torch.distributed.rendezvous")  # (dist.rendezvous is a function)
    store = through_torch("TCPStore", dist.TCPStore)
    dist.TCPStore = rendezvous.TCPStore = store
    built, forward = DDP.__init__, DDP.forward
    DDP.__init__ = through_torch("DistributedDataParallel", built)

    def training_forward(self, *args, **kwargs):
        if self.training and torch.is_grad_enabled():
            CALLS.append(["DistributedDataParallel.forward",
                          _first_outside(inspect.currentframe().f_back, torch_folder)])
        return forward(self, *args, **kwargs)

    DDP.forward = training_forward
    dist._counted = True
    return CALLS


def calls() -> list:
    """What this process has recorded so far (sent back from an engine)."""
    return list(CALLS)


def ours(recorded) -> Counter:
    """(file relative to the package, name) of every recorded call made from the package's own code."""
    import ddp_tutorial
    package = os.path.dirname(ddp_tutorial.__file__)
    return Counter((os.path.relpath(caller, package), name) for name, caller in recorded
                   if caller.startswith(package))
