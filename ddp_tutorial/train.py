"""The training story: the seed's ``train_process_on_gpu``, done right — read it top to bottom.

``train(config)`` runs in *every* training process, however it was started (``ddp-tutorial
train``, the per-node parent ``python -m ddp_tutorial.spawn``, ``torchrun``, ``srun``, or an
ipyparallel engine in a notebook). Each numbered step below is one idea of DDP, and every
``torch.distributed`` call of a run is written here, in torch's own words:

1. who am I: rank, local rank and world size, from the launcher's environment;
2. my device and the backend: my GPU and nccl, or the CPU and gloo;
3. the data, in memory, before anyone waits for anyone (errors come early, nothing downloads);
4. ``dist.init_process_group``: every process meets the others, with a timeout;
5. a ``DistributedSampler``: my own share of the shuffled indices;
6. the model, the same on every rank, wrapped in ``DistributedDataParallel``;
7. the loop: ``set_epoch`` reshuffles; ``backward()`` all-reduces the gradients of all ranks;
8. my loss (the seed's line) and every rank's: ``dist.all_gather``;
9. the test on rank 0 only, through the unwrapped model; ``dist.broadcast`` of its accuracy;
10. ``dist.destroy_process_group``.

The chores around the story are objects built where the story needs them, each complete when built:
:class:`~ddp_tutorial.runstate.RunState` (the checks before the rendezvous, SIGUSR1, printing),
:class:`~ddp_tutorial.resume.Resume` (``--resume``, rank 0's checkpoints) and
:class:`~ddp_tutorial.meter.RunRecord` / :class:`~ddp_tutorial.meter.EpochMeter` (losses, clock,
progress bar, JSON result). The stop vote (SIGUSR1, SLURM's warning before the time limit) is a
collective, so it is written here, in the loop; so is the warm-up of the learning rate.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from typing import Optional

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
from .model import DeepNeuralNetwork
from .process_group import abort_process_group, rendezvous_errors
from .result import TrainResult
from .meter import EpochMeter, RunRecord
from .resume import Resume
from .runstate import STOP_CHECK_EVERY, RunState, scaled_lr, warmup_lr
from .threads import threads_for
from .whoami import DistEnv, resolve_environment


def train(config: TrainConfig, env: Optional[DistEnv] = None) -> TrainResult:
    """Train the seed's model on this process's share of the data; see the module doc."""
    config = config.validated()

    # 1. Who am I? The launcher says it through environment variables (RANK/WORLD_SIZE,
    #    SLURM_PROCID/SLURM_NTASKS, …): my global rank, my local rank on this node, the world size.
    env = env or resolve_environment()
    with RunState(config, env) as run:
        # 2. My device and the backend: GPU `local rank` with nccl, or the CPU with gloo.
        device = choose_device(config.device, env)
        backend = choose_backend(config.backend, device)
        torch.set_num_threads(threads_for(env.local_world_size, config.threads))
        if env.local_rank == 0:
            run.say(t("train.node_summary", node=env.node_rank, nnodes=env.num_nodes,
                      world_size=env.world_size, per_node=env.local_world_size))
        run.say(t("train.rank_device", rank=env.rank, local_rank=env.local_rank, node=env.node_rank,
                  device=device, backend=backend))

        # 3. The data set, whole, in memory (on the GPU when training there): batches are cut by
        #    index. Training processes never download — stage it first: `ddp-tutorial data prepare`.
        train_data = data.load(config.dataset, config.root, train=True).first(config.train_subset)
        train_data = train_data.to(device)
        test_data = None
        if env.is_main and config.evaluate:
            test_data = data.load(config.dataset, config.root, train=False).to(device)

        # 4. The process group: every process connects to MASTER_ADDR:MASTER_PORT and waits there
        #    until all `world_size` have arrived (or the timeout). One process needs no group.
        #    With nccl, a small gloo group beside it carries the CPU-side collectives below (loss
        #    sums, stop votes) so they never wait for the GPU.
        distributed = env.world_size > 1
        control = None  # None: the default group (gloo already works on CPU tensors)
        if distributed:
            timeout = timedelta(seconds=config.timeout)
            with rendezvous_errors(env, config.timeout):  # clear messages; no wait beyond the timeout
                dist.init_process_group(backend, init_method=env.init_method, rank=env.rank,
                                        world_size=env.world_size, timeout=timeout,
                                        device_id=device if device.type == "cuda" else None)
                if backend == "nccl":
                    control = dist.new_group(backend="gloo", timeout=timeout)
        lost = None
        try:
            # 5. The sampler: the same shuffle on every rank (same seed), each rank takes every
            #    world_size-th index from its rank on. Padding makes the shares equal. (In your own
            #    script: `DataLoader(dataset, batch_size=…, sampler=sampler)`; here we index tensors.)
            sampler = DistributedSampler(range(len(train_data)), num_replicas=env.world_size,
                                         rank=env.rank, shuffle=True, seed=config.seed)
            steps_per_epoch = -(-sampler.num_samples // config.batch_size)

            # 6. The model: the same seed gives the same weights everywhere (DDP also broadcasts
            #    rank 0's weights when it wraps the model). DDP averages gradients in backward().
            torch.manual_seed(config.seed)
            model = DeepNeuralNetwork(config.num_layers, train_data.num_features, config.hidden,
                                      train_data.num_classes).to(device)
            ddp_model = model
            if distributed:
                ddp_model = DistributedDataParallel(
                    model, device_ids=[device.index] if device.type == "cuda" else None)
            # The lr for this world size (--scale-lr); Adam as the seed (fused: one kernel updates all
            # parameters), or SGD with momentum (--optimizer sgd). Over ddp_model's parameters.
            lr = scaled_lr(config, env.world_size)
            optimizer = make_optimizer(config.optimizer, ddp_model.parameters(), lr)
            criterion = torch.nn.CrossEntropyLoss()
            resume = Resume(run, model, optimizer, lr, device)
            start = resume.start()  # --resume: weights, optimizer, position from the checkpoint
            if distributed:
                dist.barrier(group=control)  # every rank is ready (its checkpoint loaded): go
            resume.settle_ddp_buckets(ddp_model, train_data, criterion, start)
            record = RunRecord(run, model, lr, device, backend, steps_per_epoch, start)  # the clock starts

            # 7. The loop. set_epoch: a new shuffle each epoch — forget it and every epoch repeats
            #    the first one's order. A resumed epoch starts at the step where it stopped.
            for epoch in range(start.epoch, config.epochs):
                sampler.set_epoch(epoch)
                batches = torch.tensor(list(sampler), device=device).split(config.batch_size)
                meter = EpochMeter(device, start, epoch)  # a resumed epoch starts where it stopped
                for step in record.progress(epoch, range(meter.first_step, len(batches))):
                    # The stop vote, every STOP_CHECK_EVERY steps: did any rank get SIGUSR1 (SLURM's
                    # warning before the time limit)? All ranks must stop at the same step — a rank that
                    # left alone would leave the others waiting in backward() — so they all-reduce (MAX)
                    # their flags, on the CPU group.
                    if step % STOP_CHECK_EVERY == 0:
                        stop = torch.tensor([1.0 if run.stop.requested else 0.0])
                        if distributed:
                            dist.all_reduce(stop, op=dist.ReduceOp.MAX, group=control)
                        if stop.item() > 0:  # checkpoint, then exit 75 (below)
                            preempt(resume, meter, record, env, control, epoch, step)
                    for group in optimizer.param_groups:  # --warmup-steps N: lr/N … lr over the first N steps
                        group["lr"] = warmup_lr(lr, epoch * steps_per_epoch + step, config.warmup_steps)
                    images, labels = train_data.batch(batches[step])
                    optimizer.zero_grad(set_to_none=True)
                    loss = criterion(ddp_model(images), labels)
                    loss.backward()  # DDP all-reduces (averages) the gradients of all ranks here
                    optimizer.step()  # so every rank takes the same step
                    meter.record(loss, len(labels))  # summed on the device: no per-step sync

                # 8. My loss — the seed's printed line — and every rank's (loss sum, batches), gathered
                #    on the CPU: the mean over all ranks is what the epoch line and the result report.
                loss_sum, steps = meter.epoch_loss()
                run.say(t("train.rank_loss", rank=env.rank, loss=loss_sum, epoch=epoch, steps=steps))
                mine = torch.tensor([loss_sum, float(steps)], dtype=torch.float64)
                totals = [mine]
                if distributed:
                    totals = [torch.zeros_like(mine) for _ in range(env.world_size)]
                    dist.all_gather(totals, mine, group=control)
                record.end_epoch(epoch, totals, meter)  # the record, the epoch line
                resume.save(epoch + 1, 0, 0.0, 0, record.result)  # rank 0's checkpoint (--checkpoint-dir)

            # 9. The test, on rank 0 only, through the unwrapped model (`ddp_model.module`): a forward
            #    through the DDP wrapper on one rank alone could wait for the others.
            accuracy = None
            if config.evaluate:
                score = torch.zeros(1, dtype=torch.float64, device=device if backend == "nccl" else "cpu")
                if env.is_main:
                    score[0] = evaluate(ddp_model.module if distributed else model, test_data, device)
                    run.say(t("train.accuracy", n=Count(len(test_data)), acc=float(score[0])))
                if distributed:
                    dist.broadcast(score, src=0)  # everyone returns rank 0's accuracy
                accuracy = float(score[0])
            return record.finish(accuracy)
        except (RuntimeError, dist.DistError) as error:
            lost = run.lost_peer(error, backend)  # another rank died: said at once, exit code 3
            if lost is None:
                raise
            raise lost from None
        finally:
            # 10. Leave the process group (its sockets and threads), whatever happened — but after a
            #     lost peer on nccl, abort it: a destroy would wait for the collective stuck on the GPU.
            if lost is not None and backend == "nccl":  # (a lost peer: only ever in a group)
                abort_process_group()
            elif distributed:
                dist.destroy_process_group()


def preempt(resume: Resume, meter: EpochMeter, record: RunRecord, env: DistEnv, control, epoch: int,
            step: int) -> None:
    """The stop vote said "stop": every rank's partial loss of this epoch (``dist.all_gather``), rank 0's
    checkpoint where every rank stands, a ``dist.barrier`` so that nobody leaves before it is on disk,
    then exit 75 (the job script requeues; ``--resume`` continues from this very step)."""
    mine = torch.tensor(meter.epoch_loss(), dtype=torch.float64)  # (loss sum, batches) so far
    partials = [mine]
    if env.world_size > 1:
        partials = [torch.zeros_like(mine) for _ in range(env.world_size)]
        dist.all_gather(partials, mine, group=control)
    resume.save(epoch, step, [float(p[0]) for p in partials], [int(p[1]) for p in partials], record.result)
    if env.world_size > 1:
        dist.barrier(group=control)
    resume.preempted(epoch, step)  # raises: exit 75


def make_optimizer(kind: str, parameters, lr: float) -> torch.optim.Optimizer:
    """Adam as the seed (fused: one kernel updates all parameters), or SGD with momentum 0.9."""
    if kind == "adam":
        return torch.optim.Adam(parameters, lr=lr, fused=True)
    return torch.optim.SGD(parameters, lr=lr, momentum=0.9)


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
