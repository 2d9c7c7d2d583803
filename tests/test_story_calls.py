"""Every torch.distributed call a training run makes is written in train.py (issue 33): counted at
run time, not by grep. Each rank of a real 2-rank gloo run (torchrun's variables, two processes)
replaces every public function of ``torch.distributed`` with a wrapper that records the file of its
caller; calls from torch's own code (DDP's broadcast at wrap time, its all-reduce in backward()) are
torch's, not ours, and are left out. Two runs: a whole one, and one stopped by the stop vote (SIGUSR1
before the start on rank 1: the vote at step 0, every rank's partial loss, rank 0's checkpoint, the
barrier, exit 75)."""

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from ddp_tutorial.preemption import EARLY_STOP_VARIABLE
from ddp_tutorial.whoami import find_free_port

COUNTING_RANK = r'''
import atexit, inspect, json, os, sys
import torch.distributed as dist
calls = []
def wrap(name, fn):
    def counted(*args, **kwargs):
        caller = inspect.currentframe().f_back.f_code.co_filename
        calls.append([name, caller])
        return fn(*args, **kwargs)
    return counted
for name in dir(dist):
    value = getattr(dist, name)
    if not name.startswith("_") and inspect.isfunction(value):
        setattr(dist, name, wrap(name, value))
def written():
    with open(os.environ["CALLS_FILE"], "w") as out:
        json.dump(calls, out)
atexit.register(written)
from ddp_tutorial.train import main
try:
    code = main(sys.argv[1:])
except SystemExit as leaving:
    code = leaving.code
written()
os._exit(code or 0)
'''


def run_two_ranks(tmp_path, root, *args, stop_rank=None):
    port = find_free_port()
    ranks = []
    for rank in (0, 1):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), CALLS_FILE=str(tmp_path / f"calls{rank}.json"),
                   OMP_NUM_THREADS="1")
        env.pop(EARLY_STOP_VARIABLE, None)
        if rank == stop_rank:
            env[EARLY_STOP_VARIABLE] = "1"
        ranks.append(subprocess.Popen([sys.executable, "-c", COUNTING_RANK, "--root", str(root), "--device", "cpu",
                                       "--timeout", "60", *args], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=240)[0] for p in ranks]
    codes = [p.returncode for p in ranks]
    calls = [json.loads((tmp_path / f"calls{rank}.json").read_text()) for rank in (0, 1)]
    return codes, outputs, calls


def ours(calls):
    """(file, function) of every call made from the package's own code (torch's own calls left out)."""
    import ddp_tutorial
    package = os.path.dirname(ddp_tutorial.__file__)
    return Counter((os.path.relpath(caller, package), name) for name, caller in calls if caller.startswith(package))


@pytest.mark.slow
def test_every_distributed_call_of_a_run_is_made_in_train_py(mnist_root, tmp_path):
    codes, outputs, calls = run_two_ranks(tmp_path, mnist_root, "--epochs", "2", "--batch-size", "64",
                                          "--json", str(tmp_path / "result.json"))
    assert codes == [0, 0], outputs
    for rank_calls in calls:
        made = ours(rank_calls)
        assert {file for file, _ in made} == {"train.py"}, made
        names = {name for _, name in made}
        assert {"init_process_group", "all_reduce", "all_gather", "barrier", "broadcast",
                "destroy_process_group"} <= names, made
        assert made[("train.py", "all_reduce")] == 2 * 4  # the stop vote: 32 steps an epoch, every 10th


@pytest.mark.slow
def test_the_stop_vote_and_the_preemption_checkpoint_are_made_in_train_py(mnist_root, tmp_path):
    codes, outputs, calls = run_two_ranks(tmp_path, mnist_root, "--epochs", "1", "--batch-size", "64",
                                          "--checkpoint-dir", str(tmp_path / "ckpt"), stop_rank=1)
    assert codes == [75, 75], outputs
    assert (tmp_path / "ckpt").is_dir() and any((tmp_path / "ckpt").iterdir())
    for rank_calls in calls:
        made = ours(rank_calls)
        assert {file for file, _ in made} == {"train.py"}, made
        assert made[("train.py", "all_reduce")] == 1 and made[("train.py", "all_gather")] == 1, made
        assert made[("train.py", "barrier")] == 2, made  # the start, and nobody leaves before the checkpoint
