"""Small helpers shared by the benchmark scripts."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from ddp_tutorial import atomic
from ddp_tutorial.threads import available_cores as usable_cores  # noqa: F401  (one definition, re-exported)


def write_json(path, payload: dict) -> Path:
    """:func:`ddp_tutorial.atomic.write_json`, creating the folder first (a reader never sees half a file)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    return atomic.write_json(target, payload)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    """What the numbers were measured on."""
    import torch

    info = {
        "cpu": cpu_model(),
        "usable_cores": usable_cores(),
        "logical_cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cuda_devices": [],
    }
    if torch.cuda.is_available():
        info["cuda_devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["cuda"] = torch.version.cuda
    return info


def _cpu_times():
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat (None where there is none)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user time
    return total - idle, total


def busy_fraction(seconds: float = 0.5):
    """How busy the CPUs are *right now*: the busy share of all cores over ``seconds``
    (0.0 idle … 1.0 every core busy). Measured between runs it is other people's work;
    unlike the load average it does not remember our own previous run."""
    import time

    first = _cpu_times()
    time.sleep(seconds)
    second = _cpu_times()
    if first is None or second is None or second[1] == first[1]:
        return None
    return round((second[0] - first[0]) / (second[1] - first[1]), 3)


def load_average():
    """The 1-minute load average (runnable processes): above the core count means shared cores."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


# The message key of every label a benchmark prints for a name in its data (literal keys, so that grep
# and tests/test_layout.py find every use of every key).
COMM_LABELS = {"compute": "bench.comm.compute", "allreduce": "bench.comm.allreduce", "ddp": "bench.comm.ddp",
               "ddp_buckets": "bench.comm.ddp_buckets", "ddp_view": "bench.comm.ddp_view", "tiny": "bench.comm.tiny"}
GOAL_LABELS = {"package_over_bound": "bench.goal.package_over_bound",
               "package_over_seed": "bench.goal.package_over_seed",
               "world2_over_world1": "bench.goal.world2_over_world1",
               "loaded_over_idle": "bench.goal.loaded_over_idle",
               "package_over_seed_loaded": "bench.goal.package_over_seed_loaded"}
PROFILE_LABELS = {"communication": "bench.profile.communication", "compute": "bench.profile.compute",
                  "data": "bench.profile.data"}
