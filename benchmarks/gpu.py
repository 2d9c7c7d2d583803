"""GPU only: what moving one batch to the device costs, and what keeping the data there saves.

A training step of the seed's MLP on a modern GPU takes well under a millisecond, so how a
batch *gets* to the GPU matters:

* from ordinary (pageable) host memory the driver first copies it into a pinned staging
  buffer — ``non_blocking=True`` cannot overlap anything then;
* from pinned (page-locked) memory the copy is one DMA transfer and can overlap compute;
* with the whole data set already on the device (Fashion-MNIST is 47 MB as uint8) a batch
  is one ``index_select`` on the GPU: no host-to-device traffic at all.

Times are measured with CUDA events (device time, not host time). ``torch.backends.cudnn``
settings (``benchmark``, ``deterministic``) do not matter here: cuDNN serves convolutions
and RNNs, and an MLP has none — its ``Linear`` layers run on cuBLAS.

    python -m benchmarks.gpu --json /tmp/gpu.json
"""

from __future__ import annotations

import argparse
import sys

import torch

from ddp_tutorial.i18n import t

from .common import write_json


def _timed(function, repeats: int) -> float:
    """Milliseconds per call of ``function``, from CUDA events around ``repeats`` calls."""
    for _ in range(10):  # warm-up: allocator, kernels
        function()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeats):
        function()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeats


def measure(batch_size: int = 128, features: int = 784, num_samples: int = 60000, repeats: int = 200) -> dict:
    device = torch.device("cuda")
    pageable = torch.rand(batch_size, features)
    pinned = pageable.pin_memory()
    on_device = torch.randint(0, 256, (num_samples, features), dtype=torch.uint8, device=device)
    indices = torch.randint(0, num_samples, (batch_size,), device=device)
    megabytes = pageable.numel() * pageable.element_size() / 1e6
    result = {
        "device": torch.cuda.get_device_name(device),
        "batch_bytes": pageable.numel() * pageable.element_size(),
        "pageable_copy_ms": _timed(lambda: pageable.to(device, non_blocking=True), repeats),
        "pinned_copy_ms": _timed(lambda: pinned.to(device, non_blocking=True), repeats),
        "on_device_batch_ms": _timed(
            lambda: on_device.index_select(0, indices).to(torch.float32).div_(255), repeats),
    }
    for kind in ("pageable", "pinned"):
        result[f"{kind}_GBps"] = megabytes / 1e3 / (result[f"{kind}_copy_ms"] / 1e3)
    result["cudnn_note"] = "cudnn settings are irrelevant for an MLP (no convolutions; Linear runs on cuBLAS)"
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(t("bench.no_gpu"), file=sys.stderr)
        return 1
    result = measure()
    if args.json:
        write_json(args.json, result)
    print_result(result)
    return 0


def print_result(result: dict) -> None:
    print(t("bench.gpu_title", bytes=result["batch_bytes"]))
    print(t("bench.gpu_line", pageable=result["pageable_copy_ms"], pinned=result["pinned_copy_ms"],
            device=result["on_device_batch_ms"]))


if __name__ == "__main__":
    sys.exit(main())
