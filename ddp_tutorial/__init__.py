"""ddp_tutorial — PyTorch distributed data-parallel training, taught and run for real.

Reading order (the story first, then what it calls, then how it is started):

1. ``train.py``   — the whole DDP story in one module, top to bottom: who am I → device and
                    backend → data in memory → ``init_process_group`` → ``DistributedSampler`` →
                    ``DistributedDataParallel`` → the loop → the losses → rank-0 test.
2. ``model.py``, ``data.py``, ``sampling.py``, ``evaluate.py`` — the pieces step by step.
3. ``distributed.py`` — where rank, world size and the master address come from.
4. ``runstate.py`` — the chores at fixed points: resume, preemption, checkpoints, progress, result.
5. Launchers: ``spawn.py`` (the seed's per-node parent), ``ipp`` (notebook engines), ``slurm``
   (sbatch scripts), ``cli.py`` (``ddp-tutorial …``).

docs/architecture.md maps every module.
"""

__version__ = "0.2.0"

__all__ = ["DeepNeuralNetwork", "__version__"]


def __getattr__(name):
    """``ddp_tutorial.DeepNeuralNetwork`` without importing torch for ``ddp-tutorial --help``."""
    if name == "DeepNeuralNetwork":
        from .model import DeepNeuralNetwork
        return DeepNeuralNetwork
    raise AttributeError(f"module 'ddp_tutorial' has no attribute {name!r}")
