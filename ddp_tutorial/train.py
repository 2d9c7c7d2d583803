"""Step 7 — the training function: the seed's ``train_process_on_gpu``, done right.

``train(config)`` runs in *every* training process, however it was started. In the seed's
order it:

1. finds out who it is (rank, local rank, world size) — :mod:`ddp_tutorial.distributed`;
2. picks its device (``cuda:local_rank`` or the CPU) and backend (nccl or gloo);
3. loads the data set into memory (never downloads: stage it first with
   ``ddp-tutorial data prepare``) — :mod:`ddp_tutorial.data`;
4. joins the process group, with a timeout;
5. builds the same model on every rank (same seed) and wraps it in
   ``DistributedDataParallel``, which averages the gradients of all ranks during
   ``backward()`` — every rank then takes the same optimizer step;
6. trains: each epoch the ``DistributedSampler`` gives this rank its share of the
   shuffled indices (``set_epoch`` reshuffles every epoch), batches are taken by index;
7. after each epoch prints this rank's loss (as the seed does) and the mean over all ranks,
   and rank 0 writes a checkpoint;
8. at the end rank 0 tests the model on the 10 000 test images while the others wait.

``python -m ddp_tutorial.train`` runs it under torchrun (or as a single process).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import List, Optional

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from . import checkpoint as ckpt
from . import data as datasets
from .config import TrainConfig, add_train_arguments, config_from_args
from .distributed import (EXIT_LOST_PEER, DistEnv, choose_backend, choose_device, destroy_process_group,
                          init_process_group, resolve_environment)
from .evaluate import evaluate
from .i18n import TutorialError, t
from .model import DeepNeuralNetwork, count_parameters
from .preemption import EXIT_REQUEUE, Preempted, StopRequest
from .sampling import epoch_indices, index_batches, make_sampler


@dataclass
class TrainResult:
    """What one training process reports (rank 0's copy is written as JSON)."""

    rank: int
    world_size: int
    dataset: str
    backend: str
    device: str
    seed: int
    lr: float
    batch_size: int
    epochs: List[float] = field(default_factory=list)             # global mean loss per epoch
    rank_losses: List[List[float]] = field(default_factory=list)  # per epoch: each rank's loss sum
    step_losses: List[float] = field(default_factory=list)        # this rank's loss at every step it ran
    test_accuracy: Optional[float] = None
    train_seconds: float = 0.0
    samples_per_second: float = 0.0
    steps_per_epoch: int = 0
    num_parameters: int = 0
    weights_sha256: str = ""
    resumed_from: Optional[dict] = None
    launcher: str = ""
    num_nodes: int = 1

    def to_dict(self) -> dict:
        return asdict(self)


def weights_digest(model: torch.nn.Module) -> str:
    """A fingerprint of the weights: equal digests mean bit-identical models."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _write_json(path: str, payload: dict) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, target)


def _threads_for(env: DistEnv, requested: Optional[int]) -> int:
    """Intra-op threads: the cores this process may use, shared among the processes of its node.
    Ranks that share cores and each use all of them oversubscribe the CPU and run slower."""
    if requested:
        return requested
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // env.local_world_size)


def _say(config: TrainConfig, text: str) -> None:
    if not config.quiet:
        print(text, flush=True)


def train(config: TrainConfig, env: Optional[DistEnv] = None) -> TrainResult:
    """Train the seed's model on this process's share of the data; see the module doc."""
    config = replace(config).validate()
    if config.resume and not config.checkpoint_dir:
        raise TutorialError("train.need_checkpoint_dir")

    # SIGUSR1 (SLURM's warning before the time limit) from now on means "checkpoint and stop".
    stop = StopRequest().install()
    try:
        env = env or resolve_environment()
        try:
            return _train(config, env, stop)
        except TutorialError as error:
            # Say which rank failed, under any launcher (run_and_exit prints it; tests/test_faults.py).
            if env.world_size > 1 and "rank" not in error.fields:  # (not when the text names it already)
                error.rank = env.rank
            raise
    finally:
        stop.uninstall()


def _train(config: TrainConfig, env: DistEnv, stop: StopRequest) -> TrainResult:
    # 1–2. Who am I (resolved by train()), and on which device?
    device = choose_device(config.device, env)
    backend = choose_backend(config.backend, device)
    torch.set_num_threads(_threads_for(env, config.threads))
    if env.local_rank == 0:
        _say(config, t("train.node_summary", node=env.node_rank, nnodes=env.num_nodes,
                       world_size=env.world_size, per_node=env.local_world_size))
    _say(config, t("train.rank_device", rank=env.rank, local_rank=env.local_rank, node=env.node_rank,
                   device=device, backend=backend))

    # 3. Data, from memory (errors here come before anyone waits at the rendezvous).
    train_data = datasets.load(config.dataset, config.root, train=True)
    if config.train_subset:
        n = config.train_subset
        train_data = replace(train_data, images=train_data.images[:n], labels=train_data.labels[:n])
    test_data = datasets.load(config.dataset, config.root, train=False) if (env.is_main and config.evaluate) else None
    if env.is_main and config.checkpoint_dir:
        ckpt.ensure_writable(config.checkpoint_dir)

    # 4. The process group. One process needs none (and no DDP wrapper either).
    distributed = env.world_size > 1
    own_group = False
    if distributed and not dist.is_initialized():
        init_process_group(env, backend, config.timeout)
        own_group = True
    try:
        return _train_in_group(config, env, device, backend, distributed, train_data, test_data, stop)
    except (RuntimeError, dist.DistError) as error:
        text = str(error)
        if distributed and _looks_like_lost_peer(text):
            lost = TutorialError("train.lost_peer", rank=env.rank, detail=text.strip().splitlines()[0][:200])
            lost.exit_code = EXIT_LOST_PEER  # a consequence of another rank's failure (see spawn._supervise)
            raise lost from None
        raise
    finally:
        if own_group:
            destroy_process_group()


def _looks_like_lost_peer(text: str) -> bool:
    lowered = text.lower()
    return any(s in lowered for s in ("connection reset", "connection closed", "connection refused",
                                      "broken pipe", "timed out", "timeout", "peer", "socket"))


def _train_in_group(config, env, device, backend, distributed, train_data, test_data, stop) -> TrainResult:
    # 5. The model: the same seed on every rank gives the same initial weights (DDP also
    #    broadcasts rank 0's weights when it wraps the model, so they agree in any case).
    torch.manual_seed(config.seed)
    model = DeepNeuralNetwork(config.num_layers, train_data.num_features, config.hidden,
                              train_data.num_classes).to(device)
    if distributed:
        parallel_model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    else:
        parallel_model = model
    lr = config.lr * env.world_size if config.scale_lr else config.lr
    # fused=True: one vectorised kernel updates all parameters, instead of ~10 small tensor ops
    # per parameter — the same Adam, about 3× cheaper per step on a CPU (benchmarks/README.md).
    optimizer = torch.optim.Adam(parallel_model.parameters(), lr=lr, fused=True)
    criterion = torch.nn.CrossEntropyLoss()

    sampler = make_sampler(len(train_data), env.world_size, env.rank, seed=config.seed)
    steps_per_epoch = len(index_batches(epoch_indices(sampler, 0), config.batch_size))
    shape = [config.num_layers, train_data.num_features, config.hidden, train_data.num_classes]

    result = TrainResult(rank=env.rank, world_size=env.world_size, dataset=config.dataset, backend=backend,
                         device=str(device), seed=config.seed, lr=lr, batch_size=config.batch_size,
                         steps_per_epoch=steps_per_epoch, num_parameters=count_parameters(model),
                         launcher=env.scheme, num_nodes=env.num_nodes)

    # Resume: weights, optimizer state, position and the losses so far.
    start_epoch, start_step, partial = 0, 0, (0.0, 0)
    if config.resume:
        state = ckpt.load_checkpoint(config.checkpoint_dir, dict(shape=shape, world_size=env.world_size,
                                                                 batch_size=config.batch_size))
        if state is None:
            if env.is_main:
                _say(config, t("ckpt.none", path=config.checkpoint_dir))
        else:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start_epoch, start_step = state["epoch"], state["step"]
            partial = (state.get("partial_loss", 0.0), state.get("partial_steps", 0))
            if isinstance(partial[0], list):  # stopped mid-epoch: one entry per rank (same world size,
                partial = (partial[0][env.rank], partial[1][env.rank])  # checked by load_checkpoint)
            result.epochs = list(state.get("epochs", []))
            result.rank_losses = [list(r) for r in state.get("rank_losses", [])]
            if "rng" in state:
                torch.set_rng_state(state["rng"])
            result.resumed_from = {"epoch": start_epoch, "step": start_step}
            if distributed:
                _settle_ddp_buckets(parallel_model, train_data, criterion, device, config.batch_size)
                optimizer.zero_grad(set_to_none=True)
            if env.is_main:
                _say(config, t("ckpt.resumed", path=config.checkpoint_dir, epoch=start_epoch, step=start_step))

    def gather(loss_sum: float, steps: int) -> List[List[float]]:
        """Every rank's [loss sum, steps] (a collective; nccl moves only GPU tensors, gloo CPU ones)."""
        comm_device = device if backend == "nccl" else torch.device("cpu")
        totals = torch.tensor([loss_sum, float(steps)], dtype=torch.float64, device=comm_device)
        if not distributed:
            return [totals.tolist()]
        gathered = [torch.zeros(2, dtype=torch.float64, device=comm_device) for _ in range(env.world_size)]
        dist.all_gather(gathered, totals)
        return [g.tolist() for g in gathered]

    def save(epoch: int, step: int, partial_loss, partial_steps) -> None:
        if env.is_main and config.checkpoint_dir:
            path = ckpt.save_checkpoint(config.checkpoint_dir, dict(
                model=model.state_dict(), optimizer=optimizer.state_dict(), epoch=epoch, step=step,
                partial_loss=partial_loss, partial_steps=partial_steps, epochs=result.epochs,
                rank_losses=result.rank_losses, shape=shape, world_size=env.world_size,
                batch_size=config.batch_size, seed=config.seed, dataset=config.dataset, lr=lr,
                rng=torch.get_rng_state()))
            _say(config, t("ckpt.saved", path=path, epoch=epoch, step=step))

    # Asking all ranks "should we stop?" is a (tiny) collective: a round trip through every rank
    # (0.2–1 ms with gloo on a small VM, up to a sixth of a DDP step there — benchmarks/README.md),
    # and on a GPU also a host sync. So we ask every 10 steps; every rank asks at the same steps.
    check_every = 10
    show_progress = env.is_main and (config.progress if config.progress is not None else sys.stderr.isatty())

    samples_done = 0
    if distributed:
        dist.barrier()
    started = time.perf_counter()
    for epoch in range(start_epoch, config.epochs):
        batches = index_batches(epoch_indices(sampler, epoch), config.batch_size)
        first = start_step if epoch == start_epoch else 0
        loss_sum, steps = partial if epoch == start_epoch else (0.0, 0)
        running = torch.zeros((), device=device)  # loss summed on the device: no graph, no per-step sync
        step_losses = []  # this epoch's per-step losses, kept on the device until the epoch ends
        bar = _progress_bar(len(batches), first, epoch) if show_progress else None
        for step in range(first, len(batches)):
            if step % check_every == 0 and stop.agreed(distributed, device):
                loss_sum += running.item()
                # Each rank's loss so far in this epoch goes into the checkpoint (rank 0 writes it),
                # so every rank resumes its own sum, not rank 0's (found by tests/test_faults.py).
                partials = gather(loss_sum, steps)
                save(epoch, step, [p[0] for p in partials], [int(p[1]) for p in partials])
                if distributed:
                    dist.barrier()  # nobody exits before the checkpoint is on disk
                _say(config, t("train.preempted", rank=env.rank, epoch=epoch, step=step, code=EXIT_REQUEUE))
                raise Preempted()
            images, labels = train_data.batch(batches[step])
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(parallel_model(images), labels)
            loss.backward()  # DDP all-reduces (averages) the gradients here
            optimizer.step()
            running += loss.detach()
            step_losses.append(loss.detach())
            steps += 1
            samples_done += len(labels)
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        loss_sum += running.item()
        if step_losses:
            result.step_losses += torch.stack(step_losses).tolist()  # one device→host copy per epoch

        # 7. This rank's loss (the seed's line) and the mean over all ranks.
        gathered = gather(loss_sum, steps)
        rank_sums = [float(g[0]) for g in gathered]
        mean_loss = sum(rank_sums) / max(1.0, sum(float(g[1]) for g in gathered))
        result.epochs.append(mean_loss)
        result.rank_losses.append(rank_sums)
        elapsed = time.perf_counter() - started
        _say(config, t("train.rank_loss", rank=env.rank, loss=loss_sum, epoch=epoch, steps=steps))
        if env.is_main:
            rate = samples_done * env.world_size / max(elapsed, 1e-9)
            _say(config, t("train.epoch_summary", epoch=epoch, world_size=env.world_size, loss=mean_loss,
                           rate=rate))
        save(epoch + 1, 0, 0.0, 0)

    if device.type == "cuda":
        torch.cuda.synchronize()
    result.train_seconds = time.perf_counter() - started
    # Every rank ran (about) the same number of steps; the padding of the sampler makes it exact.
    result.samples_per_second = samples_done * env.world_size / max(result.train_seconds, 1e-9)

    # 8. The test, on rank 0 only, through the unwrapped model; the others wait.
    if config.evaluate:
        accuracy = torch.zeros(1, dtype=torch.float64)
        if env.is_main:
            accuracy[0] = evaluate(model, test_data, device)
            _say(config, t("train.accuracy", n=len(test_data), acc=float(accuracy[0])))
        if distributed:
            if backend == "nccl":
                accuracy = accuracy.to(device)
            dist.broadcast(accuracy, src=0)
        result.test_accuracy = float(accuracy[0])
    result.weights_sha256 = weights_digest(model)
    if env.is_main and config.json:
        _write_json(config.json, result.to_dict())
        _say(config, t("train.result_written", path=config.json))
    return result


def _settle_ddp_buckets(parallel_model, train_data, criterion, device, batch_size) -> None:
    """One forward/backward whose gradients are thrown away, so that a resumed run sums gradients
    in the same order as an uninterrupted one.

    DDP packs gradients into buckets in the reverse order of ``parameters()`` for the first step,
    then re-packs them once in the order autograd produced them. With three or more ranks the
    all-reduce adds the ranks' values in an order that depends on where a gradient sits in its
    bucket, so a fresh process's first step would round differently (≈1e-7) from the uninterrupted
    run's step at the same point, and the difference would grow. After this warm-up the re-packing
    happens before the first real step. No optimizer step is taken: the weights do not change.
    """
    images, labels = train_data.batch(torch.arange(min(batch_size, len(train_data))))
    criterion(parallel_model(images.to(device)), labels.to(device)).backward()


def _progress_bar(total: int, initial: int, epoch: int):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is optional at run time
        return None
    return tqdm(total=total, initial=initial, desc=f"epoch {epoch}", unit="batch", leave=False)


# --------------------------------------------------------------------------------------
# Command line: python -m ddp_tutorial.train (alone, or under torchrun / srun)


def run_and_exit(function, *args) -> int:
    """Run ``function``; turn a user error into its message and exit code 2, a preemption into 75."""
    try:
        function(*args)
        return 0
    except TutorialError as error:
        rank = getattr(error, "rank", None)  # set by train() in a run of several processes
        where = f" (rank {rank})" if rank is not None else ""
        print(f"{t('error.prefix')}{where}: {error}", file=sys.stderr, flush=True)
        if error.exit_code == EXIT_LOST_PEER:
            # The process group's threads may still hang in the broken collective; a normal
            # interpreter exit then aborts ("terminate called …", SIGABRT) and hides our exit code.
            # Nothing is left to save (checkpoints are already on disk): leave at once.
            sys.stdout.flush()
            os._exit(EXIT_LOST_PEER)
        return error.exit_code
    except Preempted:
        return EXIT_REQUEUE
    except KeyboardInterrupt:
        return 130


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddp_tutorial.train",
                                     description="Train the seed's MLP with DDP (run under torchrun or srun).")
    add_train_arguments(parser)
    args = parser.parse_args(argv)
    return run_and_exit(lambda: train(config_from_args(args)))


if __name__ == "__main__":
    sys.exit(main())
