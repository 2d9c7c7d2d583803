"""The training story: the seed's ``train_process_on_gpu``, done right — read it top to bottom.

``train(config)`` runs in *every* training process, however it was started (``ddp-tutorial
train``, the per-node parent ``python -m ddp_tutorial.spawn``, ``torchrun``, ``srun``, or an
ipyparallel engine in a notebook). Each numbered step below is one idea of DDP:

1. who am I: rank, local rank and world size, from the launcher's environment;
2. my device and the backend: my GPU and nccl, or the CPU and gloo;
3. the data, in memory, before anyone waits for anyone (errors come early, nothing downloads);
4. ``init_process_group``: every process meets the others, with a timeout;
5. a ``DistributedSampler``: my own share of the shuffled indices;
6. the model, the same on every rank, wrapped in ``DistributedDataParallel``;
7. the loop: ``set_epoch`` reshuffles; ``backward()`` averages the gradients of all ranks;
8. my loss (the seed's line) and the mean over all ranks (an all_gather);
9. the test on rank 0 only, through the unwrapped model, under ``no_grad``;
10. ``destroy_process_group``.

The chores around the story — resume, preemption (SIGUSR1), checkpoints, warm-up, progress
bar, JSON result — are named calls on a :class:`~ddp_tutorial.runstate.RunState`.
"""

from __future__ import annotations

import sys
from typing import Optional

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

from . import data
from .config import TrainConfig, add_train_arguments, config_from_args
from .distributed import (DistEnv, choose_backend, choose_device, destroy_process_group,
                          init_process_group, resolve_environment)
from .entry import run_and_exit
from .evaluate import evaluate
from .i18n import t
from .model import DeepNeuralNetwork, count_parameters
from .result import TrainResult
from .runstate import RunState
from .sampling import IndexRange
from .threads import threads_for


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
        distributed = env.world_size > 1
        if distributed:
            init_process_group(env, backend, config.timeout, device)
        try:
            # 5. The sampler: the same shuffle on every rank (same seed), each rank takes every
            #    world_size-th index from its rank on. Padding makes the shares equal.
            sampler = DistributedSampler(IndexRange(len(train_data)), num_replicas=env.world_size,
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
            # fused=True: one kernel updates all parameters (≈3× cheaper per step on a CPU).
            optimizer = torch.optim.Adam(ddp_model.parameters(), lr=config.lr, fused=True)
            criterion = torch.nn.CrossEntropyLoss()
            shape = [config.num_layers, train_data.num_features, config.hidden, train_data.num_classes]
            start = run.begin(model, optimizer, device, backend, steps_per_epoch, shape,
                              count_parameters(model))
            for group in optimizer.param_groups:
                group["lr"] = run.lr  # the lr for this world size (--scale-lr)
            run.settle_ddp_buckets(ddp_model, train_data, criterion)

            # 7. The loop. set_epoch: a new shuffle each epoch — forget it and every epoch repeats
            #    the first one's order.
            for epoch in range(start.epoch, config.epochs):
                sampler.set_epoch(epoch)
                batches = torch.tensor(list(sampler), device=device).split(config.batch_size)
                first = start.step if epoch == start.epoch else 0
                loss_sum, steps = (start.loss_sum, start.steps) if epoch == start.epoch else (0.0, 0)
                running = torch.zeros((), device=device)  # summed on the device: no per-step sync
                step_losses, samples = [], 0
                bar = run.progress(epoch, first)
                for step in range(first, len(batches)):
                    if run.should_stop(step):  # SIGUSR1 on any rank: all checkpoint and leave
                        run.preempt(epoch, step, loss_sum + running.item(), steps)
                    images, labels = train_data.batch(batches[step])
                    run.set_lr(epoch, step)  # --warmup-steps
                    optimizer.zero_grad(set_to_none=True)
                    loss = criterion(ddp_model(images), labels)
                    loss.backward()  # DDP all-reduces (averages) the gradients of all ranks here
                    optimizer.step()  # so every rank takes the same step
                    running += loss.detach()
                    step_losses.append(loss.detach())
                    steps += 1
                    samples += len(labels)
                    if bar is not None:
                        bar.update(1)
                if bar is not None:
                    bar.close()
                loss_sum += running.item()

                # 8. My loss — the seed's printed line — and the mean over all ranks.
                run.say(t("train.rank_loss", rank=env.rank, loss=loss_sum, epoch=epoch, steps=steps))
                totals = run.gather(loss_sum, steps)  # every rank's (loss sum, steps): all_gather
                mean_loss = sum(s for s, _ in totals) / max(1.0, sum(n for _, n in totals))
                run.end_epoch(epoch, [s for s, _ in totals], mean_loss, step_losses, samples)

            # 9. The test, on rank 0 only, through the unwrapped model (`ddp_model.module`): a forward
            #    through the DDP wrapper on one rank alone could wait for the others.
            accuracy = None
            if config.evaluate:
                score = torch.zeros(1, dtype=torch.float64, device=device if backend == "nccl" else "cpu")
                if env.is_main:
                    plain = ddp_model.module if distributed else ddp_model
                    score[0] = evaluate(plain, test_data, device)
                    run.say(t("train.accuracy", n=len(test_data), acc=float(score[0])))
                if distributed:
                    dist.broadcast(score, src=0)  # everyone returns rank 0's accuracy
                accuracy = float(score[0])
            return run.finish(accuracy)
        except (RuntimeError, dist.DistError) as error:
            run.lost_peer(error)  # another rank died: say so (exit code 3), else re-raise
            raise
        finally:
            # 10. Leave the process group (its sockets and threads), whatever happened.
            if distributed:
                destroy_process_group()


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
    sys.exit(main())
