"""ddp_tutorial — PyTorch distributed data-parallel training, taught and run for real.

Reading order (the story first, then what it calls, then how it is started):

1. ``train.py``   — the whole DDP story in one module, top to bottom, every ``torch.distributed``
                    call in torch's own words: who am I → device and backend → data in memory →
                    ``init_process_group`` → ``DistributedSampler`` → ``DistributedDataParallel`` →
                    the loop (``run_epoch``, ``run_batch``, ``stop_vote``) → ``all_gather`` of the losses →
                    rank-0 test → ``destroy_process_group``.
2. ``whoami.py`` (step 1), ``device_rule.py`` (step 2), ``data.py`` (3), ``process_group.py`` (4),
   ``model.py`` (6), ``optim.py`` (the optimizer and its learning rate), ``evaluate.py`` (9) — the pieces,
   numbered as the story's steps (step 5, the sampler, is torch's own ``DistributedSampler``, written in train.py;
   ``sampling.py`` shows what it does for notebook 02 and the exercises).
3. ``runstate.py`` (the run's ``with`` block: checks before the rendezvous, SIGUSR1, printing), ``resume.py``
   (``--resume``, checkpoints), ``meter.py`` (losses, clock, progress bar, result) — the chores beside the
   story, each given what it uses, never the run itself.
4. Launchers: ``spawn.py`` (the seed's per-node parent) on ``supervisor.py``, ``ipp`` (notebook
   engines), ``slurm`` (sbatch scripts), ``cli.py`` (``ddp-tutorial …``).

docs/architecture.md maps every module.
"""

__version__ = "0.2.0"

import sys as _sys  # noqa: E402

from . import collector as _collector  # noqa: E402 (standard library only)
from .preemption import remember_early_signal as _remember_early_signal  # noqa: E402 (torch-free)


def _starts_training(argv) -> bool:
    """Is this process a training process or a training launcher (``python -m ddp_tutorial.train``,
    ``python -m ddp_tutorial.spawn``, ``ddp-tutorial train``, ``python -m ddp_tutorial train``)?"""
    argv = list(argv)
    pairs = list(zip(argv, argv[1:]))
    if any(a == "-m" and b in ("ddp_tutorial.train", "ddp_tutorial.spawn") for a, b in pairs):
        return True
    return any((a == "ddp_tutorial" or a.endswith("/ddp-tutorial") or a == "ddp-tutorial") and b == "train"
               for a, b in pairs)


# Such a process imports torch with the cycle collector off, and freezes what it imported (see collector.py).
if _collector.runs_a_command(getattr(_sys, "orig_argv", [])):
    _collector.pause()

# SLURM's SIGUSR1 may arrive while such a process still imports torch (1–2 s); its default action would
# end the process. It is remembered from the very first import, and training's StopRequest picks it up.
if _starts_training(getattr(_sys, "orig_argv", [])):
    _remember_early_signal()

__all__ = ["DeepNeuralNetwork", "__version__"]


def __getattr__(name):
    """``ddp_tutorial.DeepNeuralNetwork`` without importing torch for ``ddp-tutorial --help``."""
    if name == "DeepNeuralNetwork":
        from .model import DeepNeuralNetwork
        return DeepNeuralNetwork
    raise AttributeError(f"module 'ddp_tutorial' has no attribute {name!r}")
