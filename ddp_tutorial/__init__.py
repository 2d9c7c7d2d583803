"""ddp_tutorial — PyTorch distributed data-parallel training, taught and run for real.

Read the modules in the order of the seed tutorial's story:
model → data → sampling → distributed → train (DDP, loop, rank-0 test) → spawn / ipp / slurm.
"""

__version__ = "0.1.0"

from .model import DeepNeuralNetwork  # noqa: E402

__all__ = ["DeepNeuralNetwork", "__version__"]
