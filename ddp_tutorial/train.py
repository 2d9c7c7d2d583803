"""The training story: the seed's ``train_process_on_gpu``, done right — read it top to bottom.

``train(config)`` runs in *every* training process, however it was started (``ddp-tutorial
train``, the per-node parent ``python -m ddp_tutorial.spawn``, ``torchrun``, ``srun``, or an
ipyparallel engine in a notebook). Each numbered step below is one idea of DDP, and every
``torch.distributed`` call of a run is written on this page, in torch's own words:

1. who am I: rank, local rank and world size, from the launcher's environment;
2. my device and the backend: my GPU and nccl, or the CPU and gloo;
3. the data, in memory, before anyone waits for anyone (errors come early, nothing downloads);
4. ``dist.init_process_group``: every process meets the others, with a timeout;
5. a ``DistributedSampler``: my own share of the shuffled indices;
6. the model, the same on every rank, wrapped in ``DistributedDataParallel``;
7. the loop: ``set_epoch`` reshuffles; ``backward()`` all-reduces the gradients of all ranks;
8. my loss (the seed's line) and every rank's: ``dist.all_gather``;
9. the test on rank 0 only (it reads the test split then), through the unwrapped model; ``dist.broadcast``
   of its accuracy;
10. ``dist.destroy_process_group``.

:func:`train` tells steps 1–10; the functions under it, on this page, hold the parts it calls (as
pytorch/examples' ``_run_epoch`` / ``_run_batch`` do): :func:`in_process_group` and its
:func:`control_group` (4 and 10), :func:`run_epoch` and :func:`run_batch` (7) with :func:`stop_vote`
beside them, :func:`every_ranks_loss` (8), :func:`preempt` (the stop) and :func:`rank_zero_accuracy` (9).

The chores around the story are objects built where the story needs them, each complete when built
and given what it uses: :class:`~ddp_tutorial.runstate.RunState` (the checks before the rendezvous,
SIGUSR1, printing), :class:`~ddp_tutorial.resume.Resume` (``--resume``, rank 0's checkpoints) and
:class:`~ddp_tutorial.meter.RunRecord` / :class:`~ddp_tutorial.meter.EpochMeter` (losses, clock,
progress bar, JSON result). The stop vote (SIGUSR1, SLURM's warning before the time limit) is a
collective, so it is written here; so is the warm-up of the learning rate.
"""

from __future__ import annotations

import contextlib
import os
import sys
from datetime import timedelta
from typing import List, Optional, Sequence

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

from . import data
from .config import TrainConfig, add_train_arguments, config_from_args
from .device_rule import choose_backend, choose_device
from .entry import run_and_exit
from .evaluate import evaluate
from .i18n import Count, t
from .meter import EpochMeter, RunRecord
from .model import DeepNeuralNetwork, count_parameters
from .optim import make_optimizer, scaled_lr, set_lr, warmup_lr
from .preemption import StopRequest
from .process_group import abort_process_group, rendezvous_errors
from .result import TrainResult
from .resume import Resume
from .runstate import STOP_CHECK_EVERY, RunState
from .threads import threads_for
from .whoami import DistEnv, resolve_environment


def train(config: TrainConfig, env: Optional[DistEnv] = None) -> TrainResult:
    """Train the seed's model on this process's share of the data; see the module doc."""
    config = config.validated()

    # 1. Who am I? The launcher says it through environment variables (RANK/WORLD_SIZE,
    #    SLURM_PROCID/SLURM_NTASKS, …): my global rank, my local rank on this node, the world size.
    env = env or resolve_environment()
    # 2. My device and the backend: GPU `local rank` with nccl, or the CPU with gloo.
    device = choose_device(config.device, env)
    backend = choose_backend(config.backend, device)
    with RunState(config, env) as run:
        if env.local_rank == 0:
            run.say("train.node_summary", node=env.node_rank, nnodes=env.num_nodes, world_size=env.world_size,
                    per_node=env.local_world_size)
        run.say("train.rank_device", rank=env.rank, local_rank=env.local_rank, node=env.node_rank, device=device,
                backend=backend)

        # 3. The data set, whole, in memory (on the GPU when training there): batches are cut by
        #    index. Training processes never download — stage it first: `ddp-tutorial data prepare`.
        #    (Both splits are checked here; rank 0 reads the test split when it tests, step 9.)
        train_data = data.load(config.dataset, config.root, train=True, first=config.train_subset).to(device)

        # 4. The process group: every process meets the others (10: and leaves when the block ends).
        distributed = env.world_size > 1
        with in_process_group(env, backend, device, config.timeout, run.lost_peer) as control:
            # 5. The sampler: the same shuffle on every rank (same seed), each rank takes every
            #    world_size-th index from its rank on. Padding makes the shares equal. (In your own
            #    script: `DataLoader(dataset, batch_size=…, sampler=sampler)`; here we index tensors.)
            sampler = DistributedSampler(range(len(train_data)), num_replicas=env.world_size,
                                         rank=env.rank, shuffle=True, seed=config.seed)

            # 6. The model: the same seed gives the same weights everywhere (DDP also broadcasts
            #    rank 0's weights when it wraps the model). DDP averages gradients in backward().
            #    It computes with this node's CPU cores shared among its ranks (--threads).
            torch.set_num_threads(threads_for(env.local_world_size, config.threads))
            torch.manual_seed(config.seed)
            model = DeepNeuralNetwork(config.num_layers, train_data.num_features, config.hidden,
                                      train_data.num_classes).to(device)
            parameters = count_parameters(model)
            ddp_model = DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None) if distributed else model
            lr = scaled_lr(config.lr, config.scale_lr, env.world_size)  # --scale-lr: the lr for this world size
            optimizer = make_optimizer(config.optimizer, ddp_model.parameters(), lr)  # over ddp_model's parameters
            criterion = torch.nn.CrossEntropyLoss()
            resume = Resume(config, env, run.say, model, optimizer, lr)
            start = resume.start()  # --resume: weights, optimizer, position from the checkpoint
            if distributed:
                dist.barrier(group=control)  # every rank is ready (its checkpoint loaded): go
            resume.settle_ddp_buckets(ddp_model, train_data, criterion, start)
            record = RunRecord(config, env, run.say, model, parameters, lr, device, backend, sampler.num_samples, start)

            # 7. The loop. set_epoch: a new shuffle each epoch (forget it: every epoch repeats the first one's order).
            for epoch in range(start.epoch, config.epochs):
                sampler.set_epoch(epoch)
                batches = torch.tensor(list(sampler), device=device).split(config.batch_size)
                meter = EpochMeter(device, start, epoch)  # a resumed epoch starts at the step where it stopped
                stopped = run_epoch(epoch, batches, meter, record, train_data, ddp_model, optimizer, criterion, lr,
                                    config.warmup_steps, run.stop, control)
                # 8. My loss (the seed's printed line) and every rank's (loss sum, batches), gathered on the CPU.
                loss_sum, steps = meter.epoch_loss()
                totals = every_ranks_loss(loss_sum, steps, control)
                if stopped is not None:  # the ranks voted to stop: rank 0's checkpoint, then exit 75
                    preempt(run.stop, resume, record, control, epoch, stopped, totals)
                run.say("train.rank_loss", rank=env.rank, loss=loss_sum, epoch=epoch, steps=steps)
                record.end_epoch(epoch, totals, meter)
                resume.save(epoch + 1, 0, 0.0, 0, record.result)  # rank 0's checkpoint (--checkpoint-dir)

            # 9. The test, on rank 0 only; every rank returns its accuracy.
            return record.finish(rank_zero_accuracy(model, config.dataset, config.root, device, backend, env, run.say)
                                 if config.evaluate else None)


@contextlib.contextmanager
def in_process_group(env: DistEnv, backend: str, device: torch.device, seconds: float, lost_peer):
    """4. The process group: every process connects to MASTER_ADDR:MASTER_PORT and waits there until all
    ``world_size`` have arrived (or the timeout). Yields the :func:`control_group` of the CPU-side
    collectives, or ``None`` for one process alone (it joins no group).

    10. Leave the process group (its sockets and threads), whatever happened in the block — but after a lost
    peer on nccl, abort it: a destroy would wait for the collective stuck on the GPU. A collective that failed
    because another rank died is said at once (``lost_peer``: :meth:`~ddp_tutorial.runstate.RunState.lost_peer`,
    exit code 3)."""
    control = None
    if env.world_size > 1:
        with rendezvous_errors(env, seconds):  # clear messages; no wait beyond the timeout
            dist.init_process_group(backend, init_method=env.init_method, rank=env.rank, world_size=env.world_size,
                                    timeout=timedelta(seconds=seconds),
                                    device_id=device if device.type == "cuda" else None)
            control = control_group(backend, seconds)
    lost = None
    try:
        yield control
    except (RuntimeError, dist.DistError) as error:
        lost = lost_peer(error, backend)  # None for any other failure, and for a process alone
        if lost is None:
            raise
        raise lost from None
    finally:
        if lost is not None and backend == "nccl":  # (a lost peer: only ever in a group)
            abort_process_group()
        elif control is not None:
            dist.destroy_process_group()


def control_group(backend: str, seconds: float):
    """The group of the CPU-side collectives (loss sums, stop votes): beside nccl a small gloo group with the
    same timeout, so that they never wait for the GPU; with gloo the default group itself (it works on CPU
    tensors)."""
    if backend == "nccl":
        return dist.new_group(backend="gloo", timeout=timedelta(seconds=seconds))
    return dist.group.WORLD


def run_epoch(epoch: int, batches: Sequence[torch.Tensor], meter: EpochMeter, record: RunRecord, train_data,
              ddp_model, optimizer, criterion, lr: float, warmup_steps: int, stop: StopRequest,
              control) -> Optional[int]:
    """7. One epoch: this rank's ``batches`` (index tensors), from the step where a resumed epoch stopped
    (``meter``), with the stop vote every :data:`~ddp_tutorial.runstate.STOP_CHECK_EVERY` steps. Returns
    ``None`` when the epoch is done, or the step at which the ranks voted to stop — the same on every rank."""
    for step in record.progress(epoch, range(meter.first_step, len(batches))):
        if step % STOP_CHECK_EVERY == 0 and stop_vote(stop, control):
            return step
        images, labels = train_data.batch(batches[step])
        set_lr(optimizer, warmup_lr(lr, epoch * len(batches) + step, warmup_steps))  # --warmup-steps: lr/N … lr
        loss = run_batch(ddp_model, optimizer, criterion, images, labels)
        meter.record(loss, len(labels))  # summed on the device: no per-step sync
    return None


def run_batch(ddp_model, optimizer, criterion, images, labels) -> torch.Tensor:
    """One step on one batch, the same on every rank; returns its loss."""
    optimizer.zero_grad(set_to_none=True)
    loss = criterion(ddp_model(images), labels)
    loss.backward()  # DDP all-reduces (averages) the gradients of all ranks here
    optimizer.step()  # so every rank takes the same step
    return loss


def stop_vote(stop: StopRequest, control) -> bool:
    """Did any rank get SIGUSR1 (SLURM's warning before the time limit)? All ranks must stop at the same
    step — a rank that left alone would leave the others waiting in backward() — so they all-reduce (MAX)
    their flags, on the CPU group."""
    flag = torch.tensor([1.0 if stop.requested else 0.0])
    if control is not None:
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=control)
    return flag.item() > 0


def every_ranks_loss(loss_sum: float, steps: int, control) -> List[torch.Tensor]:
    """8. Every rank's (loss sum, batches), mine among them, gathered on the CPU group (``dist.all_gather``)."""
    mine = torch.tensor([loss_sum, float(steps)], dtype=torch.float64)
    if control is None:
        return [mine]
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size(control))]
    dist.all_gather(every, mine, group=control)
    return every


def preempt(stop: StopRequest, resume: Resume, record: RunRecord, control, epoch: int, step: int,
            partials) -> None:
    """The stop vote said "stop" at ``step``: rank 0's checkpoint where every rank stands, with ``partials``,
    every rank's (loss sum, batches) of this epoch so far (:func:`every_ranks_loss`); a ``dist.barrier`` so that
    nobody leaves before it is on disk; then exit 75 (the job script requeues; ``--resume`` continues from this
    very step)."""
    resume.save(epoch, step, [float(p[0]) for p in partials], [int(p[1]) for p in partials], record.result)
    if control is not None:
        dist.barrier(group=control)
    stop.settle()  # the stop is decided: another SIGUSR1 changes nothing from here on (exit 75, not a signal)
    resume.preempted(epoch, step)  # says so, and raises: exit 75


def rank_zero_accuracy(model, dataset: str, root, device: torch.device, backend: str, env: DistEnv, say) -> float:
    """9. The test, on rank 0 only: it reads the test split of ``dataset`` (checked at step 3) and tests through
    the unwrapped model (a forward through the DDP wrapper on one rank alone could wait for the others);
    ``dist.broadcast`` of its accuracy, so that every rank returns it."""
    score = torch.zeros(1, dtype=torch.float64, device=device if backend == "nccl" else "cpu")
    if env.is_main:
        test_data = data.load(dataset, root, train=False).to(device)
        score[0] = evaluate(model, test_data, device)
        say("train.accuracy", n=Count(len(test_data)), acc=float(score[0]))
    if env.world_size > 1:
        dist.broadcast(score, src=0)  # everyone returns rank 0's accuracy
    return float(score[0])


# --------------------------------------------------------------------------------------
# python -m ddp_tutorial.train — alone, or under torchrun / srun.

def main(argv=None) -> int:
    from .argtext import argparse_in_user_language
    with argparse_in_user_language():
        args = argparse_parser().parse_args(argv)
    return run_and_exit(lambda: train(config_from_args(args)))


def argparse_parser():
    import argparse
    parser = argparse.ArgumentParser(prog="python -m ddp_tutorial.train",
                                     description=t("train.module_description"))
    return add_train_arguments(parser)


if __name__ == "__main__":
    # One rank under torchrun or srun: its results and checkpoints are on disk (atomic writes), its group
    # destroyed. Leave without the interpreter's teardown, where a C++ thread of torch's can still abort
    # ("terminate called without an active exception") and turn a finished rank into SIGABRT and a FAILED
    # job (seen on the SLURM lab: 1 of 4 jobs at once). spawn.py's ranks leave the same way.
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
