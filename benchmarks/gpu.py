"""The GPU check: one script that runs the package's CUDA path end to end, ready for a GPU machine.

    python -m benchmarks.gpu --dataset fashion-mnist --root /path/to/data --json runs/gpu.json

On a CUDA machine it records, in well under 8 minutes on one GPU:

1. ``package`` — ``ddp_tutorial.train`` at world 1 through its launcher (NCCL, data on the device);
2. ``seed`` — the seed tutorial's pipeline (:mod:`benchmarks.seed_pipeline`) on the same GPU;
3. ``batches`` — what training does to get one batch, batch assembly included and the indices varied
   (walking through an epoch's permutation): cut on the host and copied from pageable memory, cut
   into pinned memory and copied, or cut on the device from data already there
   (:meth:`ddp_tutorial.data.InMemoryData.batch` on ``InMemoryData.to(device)``);
4. ``ddp_step`` — one DDP training step at world 1 (NCCL; gloo on the CPU) with the device batch,
   beside the same step without DDP;
5. ``tests`` — the test suite's CUDA tests, which skip on a machine without a GPU (found by their
   ``skipif(not torch.cuda.is_available())`` or a ``cuda`` marker);
6. ``facts`` — torch, its CUDA version and architecture list, the driver and each GPU's compute
   capability (``nvidia-smi``), and whether this torch can use these GPUs (:func:`ddp_tutorial.gpu.check`);
7. ``pair`` — two ranks as two "hosts" (``RANK`` 0 and 1, one process each, through
   ``python -m ddp_tutorial.train``): NCCL with one GPU each, or on a one-GPU machine both on ``cuda:0``
   with a different ``NCCL_HOSTID`` each (NCCL then treats them as two hosts instead of refusing a
   duplicate GPU); gloo on the CPU. Run twice: ``bit_identical`` compares the two runs' weights;
8. ``pair_kill`` — the same pair, rank 1 SIGKILLed while it trains: the survivor must end with exit
   code 3 ("lost contact") within its ``--timeout``, not hang (the seconds it took are recorded).

Without a GPU it says so plainly ("no GPU: CPU path only") and runs the same code on the CPU, small
and quick (``--quick`` is then the default), so the script cannot rot: tests/test_gpu_check.py runs
it in CI. Device times are measured with CUDA events; ``torch.backends.cudnn`` settings do not matter
(an MLP has no convolutions; ``Linear`` runs on cuBLAS).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch

from ddp_tutorial import datasets
from ddp_tutorial.data import InMemoryData
from ddp_tutorial.whoami import find_free_port
from ddp_tutorial.i18n import TutorialError, number, t
from ddp_tutorial.model import DeepNeuralNetwork

from .common import machine, write_json
from ddp_tutorial.figures import VARIANT_LABELS
from .runner import REPO, clean_environment, run_command

BATCH = 128
# "@pytest.mark.skipif(not torch.cuda.is_available(), …)" or "@pytest.mark.cuda", then (other decorators and) the test
CUDA_SKIP = re.compile(r"^@pytest\.mark\.(?:skipif\(\s*not [^,]*cuda.*\)|cuda)[ \t]*\n(?:@.*\n)*def (test_\w+)",
                       re.MULTILINE)


def _timer(device: torch.device, function: Callable[[], object], repeats: int) -> float:
    """Milliseconds per call: CUDA events on a GPU (device time), the host clock on the CPU."""
    for _ in range(5):  # warm-up: allocator, kernels
        function()
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(repeats):
            function()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / repeats
    started = time.perf_counter()
    for _ in range(repeats):
        function()
    return (time.perf_counter() - started) * 1e3 / repeats


def _walker(order: torch.Tensor, batch: int):
    """The next ``batch`` indices of an epoch's permutation on every call (wrapping around)."""
    position = [0]

    def next_indices() -> torch.Tensor:
        k = position[0]
        position[0] = (k + batch) % (len(order) - batch)
        return order[k:k + batch]
    return next_indices


def measure_batches(device: torch.device, num_samples: int, repeats: int, seed: int = 0) -> dict:
    """One batch as training gets it, three ways (indices varied, assembly included)."""
    generator = torch.Generator().manual_seed(seed)
    host = InMemoryData(torch.randint(0, 256, (num_samples, 28, 28), dtype=torch.uint8, generator=generator),
                        torch.randint(0, 10, (num_samples,), generator=generator), [str(i) for i in range(10)],
                        "synthetic")
    order = torch.randperm(num_samples, generator=generator)
    result: Dict[str, object] = {"batch": BATCH, "samples": num_samples, "batch_bytes": BATCH * 784 * 4}

    host_next = _walker(order, BATCH)
    result["pageable_ms"] = _timer(device, lambda: [x.to(device, non_blocking=True) for x in host.batch(host_next())],
                                   repeats)
    if device.type == "cuda":
        images = torch.empty(BATCH, 28, 28, dtype=torch.uint8).pin_memory()
        labels = torch.empty(BATCH, dtype=torch.long).pin_memory()

        def pinned():
            indices = host_next()
            torch.index_select(host.images, 0, indices, out=images)
            torch.index_select(host.labels, 0, indices, out=labels)
            return (images.to(device, non_blocking=True).reshape(BATCH, -1).to(torch.float32).div_(255),
                    labels.to(device, non_blocking=True))
        result["pinned_ms"] = _timer(device, pinned, repeats)
    on_device = host.to(device)
    device_next = _walker(order.to(device), BATCH)  # the epoch's indices copied once
    result["on_device_ms"] = _timer(device, lambda: on_device.batch(device_next()), repeats)
    return result


def measure_ddp_step(device: torch.device, num_samples: int, repeats: int) -> dict:
    """A training step at world 1 through DDP (NCCL on a GPU, gloo on the CPU) and without DDP,
    each with its batch cut on the device from varied indices."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    backend = "nccl" if device.type == "cuda" else "gloo"
    options = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{find_free_port()}", rank=0, world_size=1,
                            **options)
    try:
        data = InMemoryData(torch.randint(0, 256, (num_samples, 28, 28), dtype=torch.uint8),
                            torch.randint(0, 10, (num_samples,)), [str(i) for i in range(10)], "synthetic").to(device)
        next_indices = _walker(torch.randperm(num_samples, device=device), BATCH)
        criterion = torch.nn.CrossEntropyLoss()

        def setup(wrap: bool):
            torch.manual_seed(0)
            model = DeepNeuralNetwork(4, 784, 128, 10).to(device)
            if wrap:
                model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
            return model, torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)

        def step(model_and_optimizer):
            model, optimizer = model_and_optimizer
            x, y = data.batch(next_indices())
            optimizer.zero_grad(set_to_none=True)
            criterion(model(x), y).backward()
            optimizer.step()

        plain, ddp = setup(False), setup(True)
        result = {"backend": backend, "plain_step_ms": _timer(device, lambda: step(plain), repeats),
                  "ddp_step_ms": _timer(device, lambda: step(ddp), repeats)}
        result["ddp_samples_per_second"] = BATCH / (result["ddp_step_ms"] / 1e3)
        return result
    finally:
        dist.destroy_process_group()


def _training(variant: str, o, device: str, workdir: Path) -> dict:
    """The package or the seed's pipeline at world 1, one run in fresh processes."""
    out = workdir / f"{variant}.json"
    common = ["--dataset", o.dataset, "--root", str(o.root), "--epochs", str(o.epochs), "--device", device]
    if o.train_subset:
        common += ["--train-subset", str(o.train_subset)]
    if variant == "package":
        command = [sys.executable, "-m", "ddp_tutorial.spawn", "--nproc-per-node", "1", *common, "--no-eval",
                   "--quiet", "--no-progress", "--json", str(out)]
    else:
        command = [sys.executable, "-m", "benchmarks.seed_pipeline", "--world", "1", *common, "--no-eval",
                   "--json", str(out)]
    result = run_command(command, out, o.run_timeout)
    return {key: result.get(key) for key in ("samples_per_second", "train_seconds", "wall_seconds", "device",
                                             "backend", "steps_per_epoch", "samples", "load_before")}


def facts() -> dict:
    """torch, CUDA, the driver and the GPUs, as this node reports them (nvidia-smi when it is there)."""
    from ddp_tutorial import gpu as gpu_rule
    found = {"torch": torch.__version__, "cuda": torch.version.cuda,
             "arch_list": torch.cuda.get_arch_list() if torch.cuda.is_available() else []}
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
        found["nvidia_smi"] = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    except (OSError, subprocess.TimeoutExpired):
        found["nvidia_smi"] = None
    try:
        verdict = gpu_rule.check()
        found["verdict"] = {"ok": verdict.ok, "message": verdict.message()}
    except Exception as error:  # noqa: BLE001 - a fact-finding step records what went wrong and goes on
        found["verdict"] = {"error": str(error)}
    return found


def _pair(o, device: str, workdir: Path, name: str, kill: bool = False) -> dict:
    """Two ranks as two hosts (see the module doc); ``kill``: rank 1 is SIGKILLed once it trains."""
    port = find_free_port()
    out = workdir / f"{name}.json"
    epochs = 200 if kill else o.epochs
    command = [sys.executable, "-m", "ddp_tutorial.train", "--dataset", o.dataset, "--root", str(o.root),
               "--epochs", str(epochs), "--device", device, "--timeout", str(o.pair_timeout), "--no-progress",
               "--no-eval", "--json", str(out)]
    if o.train_subset:
        command += ["--train-subset", str(o.train_subset)]
    processes = []
    for rank in (0, 1):
        extra = {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                 "GROUP_RANK": str(rank), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                 "DDP_TUTORIAL_LANG": "en"}
        if device == "cuda":
            if torch.cuda.device_count() >= 2:
                extra["CUDA_VISIBLE_DEVICES"] = str(rank)  # one GPU each
            else:
                extra["NCCL_HOSTID"] = f"gpu-check-host{rank}"  # one GPU, two "hosts"
        processes.append(subprocess.Popen(command, cwd=REPO, env=clean_environment(extra), stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
    started = time.perf_counter()
    killed_at = None
    try:
        if kill:
            for line in processes[1].stdout:  # rank 1 trains once it prints its first epoch's loss
                if line.startswith("loss at rank 1"):
                    break
            processes[1].kill()
            killed_at = time.perf_counter()
        outputs = [p.communicate(timeout=o.pair_timeout + 120)[0] or "" for p in processes]
    except subprocess.TimeoutExpired:
        for p in processes:
            p.kill()
        return {"error": f"no end within {o.pair_timeout + 120:.0f} s: a hang", "codes": [p.poll() for p in processes]}
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    codes = [p.returncode for p in processes]
    report = {"codes": codes, "seconds": time.perf_counter() - started, "tail": outputs[0].splitlines()[-3:]}
    if kill:
        report["survivor_seconds"] = time.perf_counter() - killed_at
        report["ok"] = codes[0] == 3 and report["survivor_seconds"] <= o.pair_timeout + 30
    elif out.is_file():
        import json
        result = json.loads(out.read_text())
        report.update(ok=codes == [0, 0], backend=result.get("backend"), device=result.get("device"),
                      weights_sha256=result.get("weights_sha256"), samples_per_second=result.get("samples_per_second"))
    else:
        report["ok"] = False
    return report


def cuda_tests(tests: Path = REPO / "tests") -> List[str]:
    """The tests that need a CUDA GPU (and skip without one), as pytest node ids."""
    found = []
    for path in sorted(tests.glob("test_*.py")):
        for match in CUDA_SKIP.finditer(path.read_text(encoding="utf-8")):
            found.append(f"{path.relative_to(REPO)}::{match.group(1)}")
    return found


def run_cuda_tests(timeout: float) -> dict:
    ids = cuda_tests()
    if not ids:
        return {"ids": [], "returncode": 0, "summary": "no CUDA tests found"}
    env = clean_environment({"DDP_TUTORIAL_DATASET": os.environ.get("DDP_TUTORIAL_DATASET", "fashion-mnist")})
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *ids], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ids": ids, "returncode": None, "summary": f"timed out after {timeout:.0f} s"}
    lines = (done.stdout + done.stderr).strip().splitlines()
    summary = next((line for line in reversed(lines) if re.search(r"\d+ (passed|skipped|failed|error)", line)), "")
    return {"ids": ids, "returncode": done.returncode, "summary": summary.strip("= "), "tail": lines[-20:]}


def measure(o) -> dict:
    gpu = torch.cuda.is_available()
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    if not gpu:
        print(t("gpu_bench.no_gpu"), flush=True)
        torch.set_num_threads(1)  # the CPU path is a check that the code runs, on a possibly shared machine
    started = time.perf_counter()
    report = {"gpu": gpu, "device": torch.cuda.get_device_name(0) if gpu else "cpu", "machine": machine(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    if gpu:
        report["cuda"] = torch.version.cuda
        report["capability"] = "sm_%d%d" % torch.cuda.get_device_capability(0)
    samples = o.samples or (2048 if o.quick else 60000)
    repeats = 20 if o.quick else 200
    report["batches"] = measure_batches(device, samples, repeats)
    report["ddp_step"] = measure_ddp_step(device, samples, repeats)
    with tempfile.TemporaryDirectory(prefix="ddp-gpu-check-") as folder:
        for variant in ("package", "seed"):
            if o.root is None:
                report[variant] = {"skipped": "no --root"}
                continue
            try:
                report[variant] = _training(variant, o, device.type, Path(folder))
            except TutorialError as error:  # recorded, the other parts still run
                report[variant] = {"error": str(error)}
        if o.root is not None:
            runs = [_pair(o, device.type, Path(folder), f"pair{i}") for i in (1, 2)]
            report["pair"] = dict(runs[0], repeat=runs[1], bit_identical=bool(
                runs[0].get("weights_sha256")) and runs[0].get("weights_sha256") == runs[1].get("weights_sha256"))
            report["pair_kill"] = _pair(o, device.type, Path(folder), "pair-kill", kill=True)
    report["facts"] = facts()
    report["tests"] = run_cuda_tests(o.test_timeout) if o.tests else {"skipped": "--no-tests"}
    report["seconds"] = time.perf_counter() - started
    return report


def print_result(report: dict) -> None:
    def ms(value: Optional[float]) -> str:
        return "—" if value is None else number(value, decimals=3)

    b, d = report["batches"], report["ddp_step"]
    print(t("gpu_bench.title", device=report["device"], seconds=number(report["seconds"], decimals=0)))
    print(t("gpu_bench.batches", pageable=ms(b.get("pageable_ms")), pinned=ms(b.get("pinned_ms")),
            device=ms(b.get("on_device_ms")), bytes=b["batch_bytes"]))
    print(t("gpu_bench.ddp", backend=d["backend"], plain=ms(d["plain_step_ms"]), ddp=ms(d["ddp_step_ms"])))
    for variant in ("package", "seed"):
        r = report.get(variant, {})
        if r.get("samples_per_second"):
            print(t("gpu_bench.training", variant=t(VARIANT_LABELS[variant]),
                    rate=number(round(r["samples_per_second"])), wall=number(r["wall_seconds"], decimals=1)))
        else:
            print(t("gpu_bench.training_missing", variant=t(VARIANT_LABELS[variant]),
                    why=r.get("error") or r.get("skipped", "?")))
    if "pair" in report:
        pair, kill = report["pair"], report["pair_kill"]
        print(t("gpu_bench.pair", backend=pair.get("backend") or "?", ok=pair.get("ok"),
                same=pair.get("bit_identical"), codes=pair.get("codes")))
        print(t("gpu_bench.pair_kill", code=(kill.get("codes") or ["?"])[0],
                seconds=number(kill.get("survivor_seconds") or 0, decimals=1), ok=kill.get("ok")))
    tests = report["tests"]
    print(t("gpu_bench.tests", count=len(tests.get("ids", [])), summary=tests.get("summary") or tests.get("skipped")))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=datasets.default_dataset(), choices=list(datasets.NAMES))
    parser.add_argument("--root", default=os.environ.get(datasets.ROOT_VARIABLE),
                        help="staged data for the training runs (default $DDP_TUTORIAL_ROOT; none: skipped)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--train-subset", type=int, default=None, help="first N training images only")
    parser.add_argument("--samples", type=int, default=None, help="synthetic samples for the batch/step timings")
    parser.add_argument("--quick", action=argparse.BooleanOptionalAction, default=None,
                        help="small sizes (default without a GPU)")
    parser.add_argument("--no-tests", dest="tests", action="store_false", help="do not run the CUDA tests")
    parser.add_argument("--run-timeout", type=float, default=150.0, help="seconds allowed to each training run")
    parser.add_argument("--test-timeout", type=float, default=240.0, help="seconds allowed to the CUDA tests")
    parser.add_argument("--pair-timeout", type=float, default=30.0,
                        help="--timeout of the two-rank runs (the killed-rank check must end within it)")
    parser.add_argument("--json", default=None)
    o = parser.parse_args(argv)
    if o.quick is None:
        o.quick = not torch.cuda.is_available()
    if o.quick and o.train_subset is None:
        o.train_subset = 2048
    try:
        report = measure(o)
    except TutorialError as error:
        print(f"{t('error.prefix')}: {error}", file=sys.stderr, flush=True)
        return error.exit_code
    print_result(report)
    if o.json:
        write_json(o.json, report)
        print(t("bench.json_written", path=o.json))
    tests = report["tests"]
    failed = "skipped" not in tests and tests.get("returncode") not in (0, 5)  # 5: pytest collected nothing
    pairs = [report[k] for k in ("pair", "pair_kill") if k in report]
    return 1 if failed or not all(p.get("ok") for p in pairs) or not report.get("pair", {}).get(
        "bit_identical", True) else 0


if __name__ == "__main__":
    sys.exit(main())
