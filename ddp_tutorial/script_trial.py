"""Start a DDP script here on the CPU, with no GPU visible, to show whether it runs there
(``ddp-tutorial check-script FILE --run``): reading the source (:mod:`ddp_tutorial.script_check`) finds the
lines that need a GPU, but only a start that ends with exit code 0 shows that none is left.

The script runs as one process of a one-process job: ``CUDA_VISIBLE_DEVICES=""`` and the launcher variables of
both conventions (``RANK=0``, ``WORLD_SIZE=1``, ``SLURM_PROCID=0``, ``SLURM_NPROCS=1``,
``SLURM_CPUS_PER_TASK=1`` …, a free ``MASTER_PORT``), none of the variables SLURM sets only for GPUs, in the
current folder, with the script's own arguments (a dry start where it has one). Its output passes through as
it comes. It runs in a session of its own with a time limit; at the end, whatever the end, that session is
stopped with all its processes (``mp.spawn``'s children too), and it dies with this process if this one is killed.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Deque, Dict, List, Mapping, Optional, Sequence

from . import launch_env as names

RUN_SECONDS = 60.0
STOP_GRACE_SECONDS = 5.0
# The variables SLURM sets only in a job that asks for GPUs: a CPU node has none of them.
GPU_ONLY_NAMES = ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_GPUS")
_ERROR_LINE = re.compile(r"^(?:\[rank\d+\]:\s*)?((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)"
                         r"(?::.*)?)$")
_FRAME = re.compile(r'^\s*(?:\[rank\d+\]:\s*)?File "(?P<file>[^"]+)", line (?P<line>\d+)')


@dataclass(frozen=True)
class Trial:
    """How the script's start went: ``ended`` (exit code 0), ``failed``, ``limit`` (still running when its
    time was up, then stopped) or ``cannot`` (it could not be started)."""
    outcome: str
    seconds: float
    code: Optional[int] = None
    error: str = ""  # the error line, after the script's file:line where its traceback names one


def environment(base: Mapping[str, str], port: int) -> Dict[str, str]:
    """``base`` as a one-process job on a CPU node sees it."""
    env = {k: v for k, v in base.items() if k not in GPU_ONLY_NAMES}
    env.update({"CUDA_VISIBLE_DEVICES": "", names.RANK: "0", names.LOCAL_RANK: "0", names.WORLD_SIZE: "1",
                names.LOCAL_WORLD_SIZE: "1", names.MASTER_ADDR: "127.0.0.1", names.MASTER_PORT: str(port),
                names.SLURM_PROCID: "0", names.SLURM_LOCALID: "0", names.SLURM_NODEID: "0", names.SLURM_NTASKS: "1",
                names.SLURM_NPROCS: "1", names.SLURM_NNODES: "1", names.SLURM_NTASKS_PER_NODE: "1",
                # what sbatch --cpus-per-task gives (e.g. a DataLoader's num_workers): 1, or the caller's own
                names.SLURM_CPUS_PER_TASK: base.get(names.SLURM_CPUS_PER_TASK) or "1"})
    return env


def _die_with_parent() -> None:
    """In the child, before the script starts: Linux SIGKILLs it when check-script dies."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except OSError:
        pass


def error_of(lines: Sequence[str], script: Path) -> str:
    """The last error line of the script's error output, after ``file:line`` of the last frame of its
    traceback that lies in the script's folder; "" when there is none."""
    errors = [m.group(1) for m in map(_ERROR_LINE.match, lines) if m]
    if not errors:
        return ""
    folder, where = script.resolve().parent, ""
    for match in filter(None, map(_FRAME.match, lines)):
        file = Path(match["file"])
        ours = file.resolve().parent == folder if file.is_absolute() else file.name == script.name
        if ours:
            where = f"{file.name}:{match['line']}: "
    return where + errors[-1]


def _echo(stream, tail: Deque[str]) -> None:
    """Pass the script's error output through as it comes, keeping its last lines."""
    for raw in iter(stream.readline, b""):
        text = raw.decode("utf-8", errors="replace")
        sys.stderr.write(text)
        sys.stderr.flush()
        tail.append(text.rstrip("\n"))
    stream.close()


def _stop_session(process: subprocess.Popen) -> None:
    """Stop the script's session, every process in it: SIGTERM, then SIGKILL after a grace."""
    for sig, wait in ((signal.SIGTERM, STOP_GRACE_SECONDS), (signal.SIGKILL, STOP_GRACE_SECONDS)):
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            break  # nothing of the session is left
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        deadline = time.monotonic() + wait  # the leader is gone: give its children the same grace
        while time.monotonic() < deadline and _session_alive(process.pid):
            time.sleep(0.05)
        if not _session_alive(process.pid):
            break


def _session_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _raise_exit(signum, frame) -> None:
    raise SystemExit(128 + signum)


def run(script: Path, args: List[str], seconds: float = RUN_SECONDS) -> Trial:
    """Start ``script`` with ``args`` here as described above and say how its start went."""
    from .whoami import find_free_port
    started = time.monotonic()
    tail: Deque[str] = deque(maxlen=400)
    try:
        process = subprocess.Popen([sys.executable, str(script), *args], stdin=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, env=environment(os.environ, find_free_port()),
                                   start_new_session=True, preexec_fn=_die_with_parent)
    except OSError as error:
        return Trial("cannot", 0.0, error=error.strerror or str(error))
    echo = threading.Thread(target=_echo, args=(process.stderr, tail), daemon=True)
    echo.start()
    previous = signal.signal(signal.SIGTERM, _raise_exit) if threading.current_thread() is threading.main_thread() \
        else None
    try:
        code = process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        _stop_session(process)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    echo.join(timeout=STOP_GRACE_SECONDS)
    spent = time.monotonic() - started
    if code is None:
        return Trial("limit", spent)
    if code == 0:
        return Trial("ended", spent, 0)
    return Trial("failed", spent, code, error_of(list(tail), script))
