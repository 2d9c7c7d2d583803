"""How many intra-op (OpenMP) threads a training process uses on the CPU, and how they wait.

Several ranks on one node that each use every core oversubscribe the CPU and run slower, so by
default a process takes the cores it may use (its CPU affinity), shared among the processes of
its node. ``--threads N`` overrides.

On a shared machine (a login node, a JupyterHub node, a laptop with a browser open) a second
problem appears: by default OpenMP's helper threads *spin* while they wait for work, so when
another program holds one of "our" cores every parallel region waits a scheduler slice for a
helper thread that is not running — measured here, world 1 fell from ≈62 000 to ≈14 000
samples/s with one other busy core, and to 2 000–7 000 under heavier load, below the seed's
pipeline. With ``OMP_WAIT_POLICY=PASSIVE`` the helpers sleep instead: ≈0.63× of idle with one
busy core, idle throughput within ≈7 % (see benchmarks/README.md, section 7).

The thread *count* stays the same on purpose: the number of threads changes the order of the
floating-point sums in the matrix products, hence the trained weights — a count chosen from the
load of the moment would make the same seed give different weights on a busy and an idle machine.
The wait policy changes only how threads wait, never what they compute.

OpenMP reads the variable once, when torch is imported, so the launchers call
:func:`prefer_passive_openmp` before any ``import torch`` of the process (and the children they
start inherit it). A value the user set wins.
"""

from __future__ import annotations

import os
import sys
from typing import MutableMapping, Optional

WAIT_POLICY_VARIABLE = "OMP_WAIT_POLICY"
WAIT_POLICY = "PASSIVE"


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


def prefer_passive_openmp(environ: Optional[MutableMapping[str, str]] = None) -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` in ``environ`` (default: this process's) unless the user set a
    policy. Returns whether it applies to *this* process, i.e. torch was not imported yet (for the
    children started afterwards it always applies)."""
    target = os.environ if environ is None else environ
    target.setdefault(WAIT_POLICY_VARIABLE, WAIT_POLICY)
    return "torch" not in sys.modules
