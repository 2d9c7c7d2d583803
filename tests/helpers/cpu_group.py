"""A share of the machine for a test that loads it on purpose: a CPU control group holding ``cores`` cores' time.

tests/test_under_load.py runs its processes beside busy loops. Unbounded, eight loops on the 2-core CI machine
took both cores for over a minute, and the other pytest-xdist worker's tests crawled beside them. In a group of one
core's quota, the loops and the tested processes share that core's time as they shared the machine before
(four loops per core), and the rest of the machine keeps working. Their CPU affinity is left as it is: every
core is still visible (``os.sched_getaffinity``), only their total time is bounded. The group weighs as much as
``WEIGHT`` processes: the kernel schedules a group as one competitor, and with a single process's weight its
members would get a sliver of their core beside the other worker's processes, not the core.

Needs root and a cgroup ``cpu`` controller (version 1 at /sys/fs/cgroup/cpu, or version 2 with ``cpu.max``);
elsewhere :func:`cpu_group` yields None and the callers load the whole machine, as before.

    with cpu_group(1) as group:
        process = subprocess.Popen(group.command(["sh", "-c", "while :; do :; done"]) if group else [...])
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import time
from pathlib import Path
from typing import Iterator, List, Optional

PERIOD_US = 100_000
WEIGHT = 16  # processes' worth of weight: more than the loops and the tested processes together
ROOTS = (Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup"))  # version 1's cpu hierarchy, version 2's


class CpuGroup:
    """A cgroup whose members share ``cores`` cores' worth of CPU time."""

    def __init__(self, path: Path, cores: int):
        self.path, self.cores = path, cores

    def command(self, argv: List[str]) -> List[str]:
        """``argv`` started inside the group: the shell joins it, then becomes ``argv`` (its children follow)."""
        return ["sh", "-c", f'echo $$ > {shlex.quote(str(self.procs))} && exec "$@"', "cpu_group", *argv]

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def members(self) -> List[int]:
        return [int(pid) for pid in self.procs.read_text().split()]

    @contextlib.contextmanager
    def joined(self) -> Iterator[None]:
        """This process inside the group for the block (the processes it starts there stay in it), then back."""
        home = _own_group(self.path.parent)
        self.procs.write_text(str(os.getpid()))
        try:
            yield
        finally:
            (home / "cgroup.procs").write_text(str(os.getpid()))


def _own_group(root: Path) -> Path:
    """This process's group in the hierarchy mounted at ``root`` (version 1: the ``cpu`` line; 2: ``0::``)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        number, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(",") or (number == "0" and root == ROOTS[1]):
            return root / path.lstrip("/")
    return root


def _quota(path: Path, cores: int) -> bool:
    """Set the group's quota and weight (version 1: cfs files, cpu.shares; version 2: cpu.max, cpu.weight);
    False where there are no such files."""
    if (path / "cpu.cfs_quota_us").exists():
        (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (path / "cpu.cfs_quota_us").write_text(str(cores * PERIOD_US))
        (path / "cpu.shares").write_text(str(WEIGHT * 1024))  # 1024: one process's weight
        return True
    if (path / "cpu.max").exists():
        (path / "cpu.max").write_text(f"{cores * PERIOD_US} {PERIOD_US}")
        (path / "cpu.weight").write_text(str(WEIGHT * 100))  # 100: one process's weight
        return True
    return False


@contextlib.contextmanager
def cpu_group(cores: int = 1) -> Iterator[Optional[CpuGroup]]:
    """A new group with ``cores`` cores' time, or None where none can be made (not root, no cpu controller).
    At the end every process left in it is killed and the group removed: nothing it held outlives the block."""
    group = None
    if os.geteuid() == 0 and (os.cpu_count() or 1) > cores:
        for root in ROOTS:
            path = root / f"ddp-tutorial-test-{os.getpid()}-{time.monotonic_ns()}"
            try:
                path.mkdir()
            except OSError:
                continue
            try:
                if _quota(path, cores):
                    group = CpuGroup(path, cores)
                    break
            except OSError:
                pass
            path.rmdir()
    try:
        yield group
    finally:
        if group is not None:
            _empty_and_remove(group)


def _empty_and_remove(group: CpuGroup) -> None:
    deadline = time.monotonic() + 10
    while True:
        members = group.members()
        if not members:
            break
        if os.getpid() in members:  # never this process: it leaves the group when its block ends
            raise RuntimeError(f"this process (pid {os.getpid()}) is still in {group.path}")
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {members} stay in {group.path} after SIGKILL")
        time.sleep(0.05)
    group.path.rmdir()
