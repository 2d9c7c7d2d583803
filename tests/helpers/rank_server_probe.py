"""Run as a program by tests/test_rank_server.py: a launcher that starts ranks with ddp_tutorial.supervisor
and reports, per rank, what it found at its start. Imports no torch itself, so a rank that finds torch
imported got it from the server it was forked from.

    python rank_server_probe.py start OUT      two launches of 2 ranks; VARIABLE changed and removed between them
    python rank_server_probe.py usr1 OUT       2 ranks that wait for SIGUSR1 (sent to the whole process group)
    python rank_server_probe.py hold OUT       2 ranks that write their PID and wait (the launcher is then killed)
"""

import gc
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository's ddp_tutorial


def at_start(local_rank: int, out: str, launch: int) -> None:
    found = {"cpu": time.process_time(), "torch": "torch" in sys.modules, "collector": gc.isenabled(),
             "frozen": gc.get_freeze_count(),
             "variable": os.environ.get("RANK_SERVER_VARIABLE"), "comm": Path("/proc/self/comm").read_text().strip()}
    Path(out, f"{launch}-{local_rank}.json").write_text(json.dumps(found))


def wait_for_usr1(local_rank: int, out: str) -> int:
    from ddp_tutorial.preemption import early_signal
    Path(out, f"ready-{local_rank}").write_text("ready")
    deadline = time.monotonic() + 60
    while not early_signal() and time.monotonic() < deadline:
        time.sleep(0.05)
    Path(out, f"got-{local_rank}").write_text(str(early_signal()))
    return 0


def hold(local_rank: int, out: str) -> int:
    from multiprocessing import forkserver  # the server's socket, as the server set it before forking us
    Path(out, "address").write_text(forkserver._forkserver._forkserver_address)
    Path(out, f"pid-{local_rank}").write_text(str(os.getpid()))
    Path(out, f"pid-{local_rank}").rename(Path(out, f"ready-{local_rank}"))  # whole when it appears
    time.sleep(300)
    return 0


def main() -> int:
    from ddp_tutorial.supervisor import run_processes
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "start":
        os.environ["RANK_SERVER_VARIABLE"] = "first"
        codes = [run_processes(2, at_start, (out, 1))]
        os.environ["RANK_SERVER_VARIABLE"] = "second"  # after the server started: the ranks must still see it
        codes.append(run_processes(2, at_start, (out, 2)))
        del os.environ["RANK_SERVER_VARIABLE"]
        codes.append(run_processes(2, at_start, (out, 3)))
        return max(codes)
    return run_processes(2, wait_for_usr1 if mode == "usr1" else hold, (out,))


if __name__ == "__main__":
    sys.exit(main())
