"""How many intra-op (OpenMP) threads a training process uses on the CPU.

Several ranks on one node that each use every core oversubscribe the CPU and run slower, so by
default a process takes the cores it may use (its CPU affinity), shared among the processes of
its node. ``--threads N`` overrides.
"""

from __future__ import annotations

import os
from typing import Optional


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def threads_for(local_world_size: int, requested: Optional[int] = None) -> int:
    """The intra-op thread count for one of ``local_world_size`` processes on this node."""
    if requested:
        return requested
    return max(1, available_cores() // max(1, local_world_size))
