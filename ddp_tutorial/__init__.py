"""ddp_tutorial — PyTorch distributed data-parallel training, taught and run for real.

Reading order (the story first, then what it calls, then how it is started):

1. ``train.py``   — the whole DDP story in one module, top to bottom, every ``torch.distributed``
                    call in torch's own words: who am I → device and backend → data in memory →
                    ``init_process_group`` → ``DistributedSampler`` → ``DistributedDataParallel`` →
                    the loop → ``all_gather`` of the losses → rank-0 test → ``destroy_process_group``.
2. ``whoami.py`` (step 1), ``device_rule.py`` (step 2), ``data.py`` (3), ``process_group.py`` (4),
   ``sampling.py`` (5), ``model.py`` (6), ``evaluate.py`` (9) — the pieces, numbered as the story's steps.
3. ``runstate.py`` — the chores at fixed points: resume, preemption, checkpoints, progress, result.
4. Launchers: ``spawn.py`` (the seed's per-node parent) on ``supervisor.py``, ``ipp`` (notebook
   engines), ``slurm`` (sbatch scripts), ``cli.py`` (``ddp-tutorial …``).

docs/architecture.md maps every module.
"""

__version__ = "0.2.0"

import signal as _signal  # noqa: E402
import sys as _sys  # noqa: E402

# A training worker started as `python -m ddp_tutorial.train` (torchrun, one srun task per GPU) may get
# SLURM's SIGUSR1 while it is still importing torch; its default action would end the process. Catch
# it from the very first import and let training's StopRequest pick it up (ddp_tutorial.preemption).
EARLY_SIGNALS: list = []
_argv = getattr(_sys, "orig_argv", [])
if any(a == "-m" and b == "ddp_tutorial.train" for a, b in zip(_argv, _argv[1:])):
    _signal.signal(_signal.SIGUSR1, lambda *_: EARLY_SIGNALS.append(_signal.SIGUSR1))

__all__ = ["DeepNeuralNetwork", "__version__"]


def __getattr__(name):
    """``ddp_tutorial.DeepNeuralNetwork`` without importing torch for ``ddp-tutorial --help``."""
    if name == "DeepNeuralNetwork":
        from .model import DeepNeuralNetwork
        return DeepNeuralNetwork
    raise AttributeError(f"module 'ddp_tutorial' has no attribute {name!r}")
