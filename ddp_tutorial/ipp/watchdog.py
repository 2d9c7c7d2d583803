"""The guard that ends the engines when the notebook kernel goes, however it goes.

A kernel that is shut down, restarted or killed with SIGKILL cannot stop its engines itself
(SIGKILL runs no handler), and ipyparallel's heartbeat notices a lost client only after minutes.
So :class:`Guard` starts one tiny watchdog process beside the kernel (own session, so a signal to
the kernel's process group does not take it along) and keeps the write end of a pipe to it. The
watchdog holds the engines' pids (with their start times) and, for SLURM engines, the job id.
When the pipe reaches end-of-file — the kernel exited or was killed — or the kernel's pid is gone,
it SIGKILLs those processes and ``scancel``s the job, then exits. :meth:`Guard.release` (a clean
:func:`ddp_tutorial.ipp.stop`) tells it to exit without doing anything.

Inside a SLURM job (a JupyterLab started by scripts/lab_job.sh, an OnDemand session) the end of the
job — ``scancel``, its walltime — sends SIGTERM to every process of the job, the watchdog included, and
SIGKILL a few seconds later (review N7): on SIGTERM or SIGHUP the watchdog does the same ending first,
so the engines' own SLURM job never outlives the allocation that started it. Where
``DDP_TUTORIAL_ENGINE_JOBS`` names a file (scripts/lab_job.sh sets it), the engine job's id is also
appended to it, for the lab job's own clean-up to ``scancel``; where ``DDP_TUTORIAL_CLUSTER_FILES``
does, the ipyparallel cluster files to remove are, for the lab job to remove once every process of
its session is gone (the kernel, while it lives, may write its cluster file again).

This file also runs as a script (``python -I watchdog.py KERNEL_PID``): stdlib and psutil only.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

POLL_SECONDS = 0.5  # how often the watchdog also checks the kernel's pid (a forked child may hold the pipe)
JOBS_FILE = "DDP_TUTORIAL_ENGINE_JOBS"  # a file the engine job ids are appended to (scripts/lab_job.sh)
CLUSTER_FILES = "DDP_TUTORIAL_CLUSTER_FILES"  # a file the cluster files' paths are appended to (the same)
KERNEL_GRACE = 5.0  # seconds the ending watchdog waits for its kernel before removing the cluster files


def _record(variable: str, lines) -> None:
    """Append ``lines`` to the file ``$variable`` names, if any (one short write)."""
    path = os.environ.get(variable)
    lines = [str(line) for line in lines if line]
    if path and lines:
        try:
            with open(path, "a", encoding="utf-8") as record:
                record.write("".join(f"{line}\n" for line in lines))
        except OSError:
            pass  # the clean-up has the watchdog still; a missing file is no reason to fail the start


def record_job(job_id) -> None:
    """Append ``job_id`` to the file ``$DDP_TUTORIAL_ENGINE_JOBS`` names, if any."""
    _record(JOBS_FILE, [job_id])


class Guard:
    """The kernel's side: start the watchdog, tell it what to end, release it."""

    def __init__(self, pids, job_id=None, files=()):
        import psutil
        self.process = subprocess.Popen(
            [sys.executable, "-I", os.path.abspath(__file__), str(os.getpid()),
             repr(psutil.Process().create_time())],  # the kernel may be gone before the watchdog runs
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True)
        self.job_id, self.files = job_id, [os.path.abspath(f) for f in files]
        record_job(job_id)
        _record(CLUSTER_FILES, self.files)
        self.update(pids)

    def update(self, pids) -> None:
        """Guard these processes from now on (replaces the earlier list: it only grows while a
        cluster starts — the controller first, its schedulers and the engines later)."""
        import psutil
        targets = []
        for pid in pids:
            try:
                targets.append([pid, psutil.Process(pid).create_time()])
            except psutil.NoSuchProcess:
                pass
        self._send({"targets": targets, "job_id": self.job_id, "files": self.files})

    def _send(self, message: dict) -> None:
        try:
            self.process.stdin.write((json.dumps(message) + "\n").encode())
            self.process.stdin.flush()
        except (OSError, ValueError):
            pass  # the watchdog is gone already

    def release(self) -> None:
        """The engines were stopped cleanly: the watchdog exits without killing anything."""
        self._send({"release": True})
        try:
            self.process.stdin.close()
            self.process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()


# --------------------------------------------------------------------------------------
# The watchdog process


def _same_process(pid: int, started: float) -> bool:
    import psutil
    try:
        return abs(psutil.Process(pid).create_time() - started) < 0.01
    except psutil.NoSuchProcess:
        return False


def _forget(files) -> None:
    for path in files:
        try:
            os.unlink(path)
        except OSError:
            pass


def _end(targets, job_id, files=(), kernel=None) -> None:
    """scancel the job, kill what is guarded, remove ``files``: ipyparallel's cluster file of a cluster
    whose kernel died would stay in the profile, and JupyterLab's ipyparallel extension, reading it at every
    start, makes a ``log`` folder in the attendee's working copy. A kernel still alive (SIGTERM reaches the
    whole job at once) writes its cluster file again when it sees the controller stop: the files are removed
    again once it is gone (``kernel``: its pid and start time), or after :data:`KERNEL_GRACE` seconds."""
    import psutil
    _forget(files)
    if job_id:
        try:
            subprocess.run(["scancel", str(job_id)], timeout=30, check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            pass
    handles = []
    for pid, started in targets:
        if _same_process(pid, started):
            try:
                handle = psutil.Process(pid)
                handles += [handle] + handle.children(recursive=True)
            except psutil.NoSuchProcess:
                pass
    for handle in handles:
        try:
            handle.kill()
        except psutil.NoSuchProcess:
            pass
    deadline = time.monotonic() + 5.0  # zombies count as gone: PID 1 may be slow to reap them
    while time.monotonic() < deadline and any(_running(handle) for handle in handles):
        time.sleep(0.05)
    if files:
        deadline = time.monotonic() + KERNEL_GRACE
        while kernel and time.monotonic() < deadline and _same_process(*kernel):
            time.sleep(0.05)
        _forget(files)


def _running(handle) -> bool:
    import psutil
    try:
        return handle.is_running() and handle.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class _Ending(Exception):
    """SIGTERM/SIGHUP reached the watchdog: its job is ending (scancel, walltime)."""


def _ending(signum, frame):
    raise _Ending


def watch(kernel_pid: int, kernel_started: float) -> None:
    state = {"targets": [], "job_id": None, "files": []}
    signal.signal(signal.SIGTERM, _ending)
    signal.signal(signal.SIGHUP, _ending)
    try:
        if not _follow(kernel_pid, kernel_started, state):
            return  # released, or nothing left to guard
    except _Ending:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one ending at a time: SLURM may signal twice
    _end(state["targets"], state["job_id"], state["files"], kernel=(kernel_pid, kernel_started))


def _follow(kernel_pid: int, kernel_started: float, state: dict) -> bool:
    """Read the kernel's messages until it is gone (True: end what is guarded) or releases us (False)."""
    buffer = b""
    stdin = sys.stdin.buffer.raw if hasattr(sys.stdin.buffer, "raw") else sys.stdin.buffer
    while True:
        ready, _, _ = select.select([stdin], [], [], POLL_SECONDS)
        if ready:
            chunk = os.read(stdin.fileno(), 65536)
            if not chunk:  # end of file: the kernel is gone (or released us and closed)
                return True
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                message = json.loads(line)
                if message.get("release"):
                    return False
                state["targets"] = message.get("targets", state["targets"])
                state["job_id"] = message.get("job_id", state["job_id"])
                state["files"] = message.get("files", state["files"])
        elif not _same_process(kernel_pid, kernel_started):
            return True
        elif state["targets"] and not any(_same_process(pid, started) for pid, started in state["targets"]):
            return False  # everything we guard is gone already


if __name__ == "__main__":
    watch(int(sys.argv[1]), float(sys.argv[2]))
