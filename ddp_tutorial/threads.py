"""How many intra-op (OpenMP) threads a training process uses on the CPU, and how they wait.

Several ranks on one node that each use every core oversubscribe the CPU and run slower, so by
default a process takes the cores it may use (its CPU affinity), shared among the processes of
its node. ``--threads N`` overrides.

On a shared machine (a login node, a JupyterHub node, a laptop with a browser open) a second
problem appears: by default OpenMP's helper threads *spin* while they wait for work, so when
another program holds one of "our" cores every parallel region waits a scheduler slice for a
helper thread that is not running. With ``OMP_WAIT_POLICY=PASSIVE`` the helpers sleep instead.
Measured on this 2-core machine, world 1, one epoch of Fashion-MNIST (samples/s, paired runs):
idle, spinning ≈ 64 000 and PASSIVE ≈ 23 000; with one other busy core, spinning ≈ 12 000 and
PASSIVE ≈ 40 000. So the launchers look first (/proc/stat over 100 ms) and choose PASSIVE only
when other programs are using the CPUs; the sbatch jobs, whose cores are their own, keep the
default.

The thread *count* stays the same on purpose: the number of threads changes the order of the
floating-point sums in the matrix products, hence the trained weights — a count chosen from the
load of the moment would make the same seed give different weights on a busy and an idle machine.
The wait policy changes only how threads wait, never what they compute.

OpenMP reads the variable once, when torch is imported, so the launchers call
:func:`prefer_passive_openmp` before any ``import torch`` of the process (and the children they
start inherit it); so does a notebook's first cell (``notebook.setup()``): 01 trains in the Jupyter
kernel itself. A value the user set wins (``OMP_WAIT_POLICY=ACTIVE`` or ``PASSIVE``).
"""

from __future__ import annotations

import os
import sys
import time
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


def cpu_times() -> Optional[tuple]:
    """(busy, total) jiffies of all CPUs from /proc/stat (None where there is no /proc/stat)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    return total - idle, total


def busy_cores(before: tuple, after: tuple, cores: int) -> float:
    """How many of the machine's ``cores`` were busy between two :func:`cpu_times` samples."""
    busy, total = after[0] - before[0], after[1] - before[1]
    return cores * busy / total if total > 0 else 0.0


def others_are_busy(sample_seconds: float = 0.1) -> bool:
    """Is another program using at least half a core right now? (/proc/stat over 100 ms)"""
    before = cpu_times()
    if before is None:
        return False
    time.sleep(sample_seconds)
    after = cpu_times()
    return after is not None and busy_cores(before, after, os.cpu_count() or 1) >= 0.5


_measured: dict = {"busy": None}


def prefer_passive_openmp(environ: Optional[MutableMapping[str, str]] = None,
                          busy: Optional[bool] = None) -> bool:
    """On a busy machine, set ``OMP_WAIT_POLICY=PASSIVE`` in ``environ`` (default: this process's)
    unless the user set a policy. ``busy``: whether other programs hold CPU cores now (default:
    measured, :func:`others_are_busy`). Returns whether PASSIVE is set and applies to *this*
    process (torch not imported yet); the children started afterwards inherit it either way.

    Measured on 2 cores, world 1 (samples/s): idle, OpenMP's default spinning ≈ 64 000, PASSIVE
    ≈ 23 000; one other busy core, spinning ≈ 12 000, PASSIVE ≈ 40 000 — hence only when busy."""
    target = os.environ if environ is None else environ
    if WAIT_POLICY_VARIABLE in target:
        return False
    if busy is None:  # measured once per process: `ddp-tutorial train` and spawn both ask
        if _measured["busy"] is None:
            _measured["busy"] = others_are_busy()
        busy = _measured["busy"]
    if not busy:
        return False
    target[WAIT_POLICY_VARIABLE] = WAIT_POLICY
    return "torch" not in sys.modules
