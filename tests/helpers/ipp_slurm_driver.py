"""A notebook on the lab's login node, as a script: ipyparallel engines through SLURM.

Run by tests/test_slurm_jobs.py inside the lab's login namespace (``SlurmLab.login_command``):

    python tests/helpers/ipp_slurm_driver.py OUT.json RUN_DIR DATA_ROOT

It does what notebook 05 does — start 2 nodes × 2 engines through SLURM, run a collective and
the package's training on them — and then the two failures a user meets most: a rank that dies
mid-collective, and a controller listening where the nodes cannot reach it. Last, a stand-in
notebook kernel starts engines through SLURM and is SIGKILLed: its watchdog must cancel the job.
Everything it saw is written to OUT.json for the test to check.
"""

import json
import os
import signal
import subprocess
import sys
import time

from ddp_tutorial import ipp
from ddp_tutorial.config import TrainConfig
from ddp_tutorial.i18n import TutorialError

out_path, run_dir, data_root = sys.argv[1:4]
report = {}


def where(env):
    """Every rank: who am I, where, and the sum of (rank + 1) over all ranks (an all-reduce)."""
    import socket

    import torch
    import torch.distributed as dist

    x = torch.tensor([float(env.rank + 1)])
    dist.all_reduce(x)
    return {"rank": env.rank, "local_rank": env.local_rank, "world_size": env.world_size,
            "host": socket.gethostname(), "sum": x.item(), "master": env.master_addr}


def die_on_rank_2(env):
    """Rank 2 is killed; the others wait for it in an all-reduce (until the process group's timeout)."""
    import os
    import signal

    import torch
    import torch.distributed as dist

    if env.rank == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(torch.ones(1))


def failure(call):
    began = time.monotonic()
    try:
        call()
    except TutorialError as error:
        return {"key": error.key, "message": str(error), "seconds": time.monotonic() - began}
    return {"key": None, "message": "no error", "seconds": time.monotonic() - began}


began = time.monotonic()
engines = ipp.start_slurm(nodes=2, engines_per_node=2, run_dir=run_dir, time_limit="00:10:00")
report["start_seconds"] = time.monotonic() - began
report["job_id"] = engines.job_id
report["hosts"], report["local_ranks"], report["master_addr"] = engines.hosts, engines.local_ranks, engines.master_addr

report["where"] = ipp.run(where, keep=True)

config = TrainConfig(dataset="mnist", root=data_root, epochs=8, batch_size=64, seed=0, threads=1, device="cpu")
began = time.monotonic()
results = ipp.train(config, keep=True)
report["train_seconds"] = time.monotonic() - began
report["train"] = [{"rank": r.rank, "world_size": r.world_size, "num_nodes": r.num_nodes,
                    "test_accuracy": r.test_accuracy, "weights_sha256": r.weights_sha256} for r in results]
report["same_engines"] = ipp.current() is engines  # keep=True kept the job for the next call
# each engine imported torch for its rank with the cycle collector off, then froze it (remote.warm_up)
report["collector"] = engines.client[engines.ids].apply_sync(lambda: (__import__("gc").isenabled(),
                                                                       __import__("gc").get_freeze_count()))

report["died"] = failure(lambda: ipp.run(die_on_rank_2, pg_timeout=120))
report["after_death_current"] = ipp.current() is not None

# A controller the nodes cannot reach: 127.0.0.1 of the login node.
report["unreachable"] = failure(lambda: ipp.start_slurm(nodes=1, engines_per_node=1, run_dir=run_dir,
                                                        controller_ip="127.0.0.1", register_timeout=15))
report["unreachable_current"] = ipp.current() is not None

# A kernel that dies with SLURM engines running (SIGKILL: no handler of it runs).
KERNEL = ("import sys, time\nfrom ddp_tutorial import ipp\n"
          "e = ipp.start_slurm(nodes=1, engines_per_node=1, run_dir=sys.argv[1], time_limit='00:10:00')\n"
          "print('JOB', e.job_id, flush=True)\ntime.sleep(600)\n")
kernel = subprocess.Popen([sys.executable, "-c", KERNEL, run_dir], stdout=subprocess.PIPE, text=True)
job_id = None
for line in kernel.stdout:
    if line.startswith("JOB "):
        job_id = line.split()[1]
        break
killed_at = time.monotonic()
os.kill(kernel.pid, signal.SIGKILL)
kernel.wait()
states = []
while time.monotonic() - killed_at < 60:
    state = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"],
                           capture_output=True, text=True).stdout.strip()
    states.append(state)
    if not state:
        break
    time.sleep(0.2)
report["killed_kernel"] = {"job_id": job_id, "seconds": time.monotonic() - killed_at, "states": states[-3:]}

with open(out_path, "w") as f:
    json.dump(report, f, indent=2)
