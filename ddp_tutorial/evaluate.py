"""Step 9 of the story — the rank-0 test: accuracy on the 10 000 test images.

Testing is not time critical, so — as in the seed — only rank 0 does it while the others
wait. Two details the seed missed:

* ``torch.no_grad()``: no autograd graph is built, which saves memory and time;
* the *unwrapped* module (``ddp_model.module``): a forward pass through the DDP wrapper on
  one rank alone can wait for the other ranks (buffer broadcast, unused-parameter
  bookkeeping); the plain model holds the same weights and talks to nobody.
"""

from __future__ import annotations

import torch


@torch.no_grad()
def evaluate(model: torch.nn.Module, data, device: torch.device, batch_size: int = 1000) -> float:
    """Percentage of correctly classified images of ``data`` (an in-memory data set)."""
    was_training = model.training
    model.eval()
    correct = 0
    for start in range(0, len(data), batch_size):
        idx = torch.arange(start, min(start + batch_size, len(data)), device=data.labels.device)
        images, labels = data.batch(idx)
        scores = model(images.to(device, non_blocking=True))
        predicted = scores.argmax(dim=1)
        correct += (predicted == labels.to(device, non_blocking=True)).sum().item()
    model.train(was_training)
    return 100.0 * correct / len(data)
