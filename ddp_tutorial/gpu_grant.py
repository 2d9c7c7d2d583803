"""Did SLURM grant this job GPUs? Read from the variables SLURM sets in a job or step with ``--gres=gpu``.

Inside such a job, a node where neither ``nvidia-smi`` nor torch sees a GPU is a failure (the driver or its
module is missing on the node, or its GPUs failed), never "a login node?": :func:`unusable` says so, and
:func:`ddp_tutorial.gpu.compatibility` turns it into the ``granted_unusable`` verdict of ``ddp-tutorial
site-check``'s torch line and of the GPU jobs' pre-check (``python -m ddp_tutorial.gpu``, exit 2 in the job).
No torch import until :func:`unusable` needs the count.
"""

from __future__ import annotations

import os
import re
import socket
from typing import Dict, Optional

#: What SLURM sets in a job or step granted GPUs (gres/gpu), in the order read: the first two only SLURM
#: sets; the last two count only inside a SLURM job (``SLURM_JOB_ID``), as a user may set them anywhere.
GRANT_VARIABLES = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")
HIDDEN = re.compile(r"\s*(|NoDevFiles|-\d*)\s*")  # the values that grant no GPU


def granted(environ=None) -> Optional[str]:
    """``NAME=value`` of the variable by which SLURM granted this job or step GPUs, else None
    (:data:`GRANT_VARIABLES`; an empty value, ``NoDevFiles`` or ``-1`` grants none)."""
    env = os.environ if environ is None else environ
    for name in GRANT_VARIABLES:
        value = env.get(name)
        if value is None or HIDDEN.fullmatch(value):
            continue
        if name.startswith("SLURM_") or env.get("SLURM_JOB_ID"):
            return f"{name}={value}"
    return None


def torch_device_count() -> int:
    """How many GPUs this torch sees (0 for a CPU build, or when CUDA cannot start); no CUDA context is made."""
    import torch
    try:
        return torch.cuda.device_count() if torch.version.cuda else 0
    except RuntimeError:
        return 0


def unusable(gpus_seen: int, environ=None) -> Optional[Dict[str, str]]:
    """When SLURM granted GPUs (:func:`granted`) and ``nvidia-smi`` saw none (``gpus_seen`` 0) nor does torch:
    the message's fields (``grant``, ``node``); else None."""
    grant = granted(environ) if not gpus_seen else None
    if grant is None or torch_device_count():
        return None
    return dict(grant=grant, node=socket.gethostname())
