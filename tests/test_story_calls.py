"""Every torch.distributed call of a training run is written in train.py (issue 33), and the few made
elsewhere are named (issue 48): counted at run time, not by grep, by tests/helpers/call_counter.py in
each real process — every public function of ``torch.distributed`` with its immediate caller (torch's own
calls left out), and DDP's constructor, DDP's training forward (the ``backward()`` after it all-reduces
the gradients) and every ``TCPStore`` with the first caller outside torch.

Three paths: a torchrun-style pair of processes (a whole run; one stopped by the stop vote, SIGUSR1
before the start on rank 1: the vote at step 0, every rank's partial loss, rank 0's checkpoint, the
barrier, exit 75; then that run resumed), and the notebook path (``ipp.train`` on two engines, twice)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from call_counter import ours
from ddp_tutorial.preemption import EARLY_STOP_VARIABLE
from ddp_tutorial.whoami import find_free_port
from engine_checks import no_engines_left  # noqa: F401 - the autouse fixture

HELPERS = str(Path(__file__).resolve().parent / "helpers")
STEPS = 32  # steps an epoch: the default training subset, --batch-size 64, two ranks

COUNTING_RANK = r'''
import json, os, sys
sys.path.insert(0, os.environ["COUNTER_FOLDER"])
import call_counter
calls = call_counter.install()
def written():
    with open(os.environ["CALLS_FILE"], "w") as out:
        json.dump(calls, out)
from ddp_tutorial.train import main
try:
    code = main(sys.argv[1:])
except SystemExit as leaving:
    code = leaving.code
written()
os._exit(code or 0)
'''


def run_two_ranks(tmp_path, root, *args, stop_rank=None, name="calls"):
    port = find_free_port()
    ranks = []
    for rank in (0, 1):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), CALLS_FILE=str(tmp_path / f"{name}{rank}.json"),
                   COUNTER_FOLDER=HELPERS, OMP_NUM_THREADS="1")
        env.pop(EARLY_STOP_VARIABLE, None)
        if rank == stop_rank:
            env[EARLY_STOP_VARIABLE] = "1"
        ranks.append(subprocess.Popen([sys.executable, "-c", COUNTING_RANK, "--root", str(root), "--device", "cpu",
                                       "--timeout", "60", *args], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=240)[0] for p in ranks]
    codes = [p.returncode for p in ranks]
    calls = [json.loads((tmp_path / f"{name}{rank}.json").read_text()) for rank in (0, 1)]
    return codes, outputs, calls


# What a run asks of torch that is not a public function of torch.distributed, made in train.py:
# the group's store (init_process_group's, through torch's rendezvous) and DDP's wrapping (its broadcast).
GROUP_AND_WRAP = {("train.py", "TCPStore"): 1, ("train.py", "DistributedDataParallel"): 1}


def elsewhere(made) -> dict:
    """The calls made outside train.py."""
    return {key: count for key, count in made.items() if key[0] != "train.py"}


@pytest.mark.slow
def test_every_distributed_call_of_a_run_is_made_in_train_py(mnist_root, tmp_path):
    codes, outputs, calls = run_two_ranks(tmp_path, mnist_root, "--epochs", "2", "--batch-size", "64",
                                          "--json", str(tmp_path / "result.json"))
    assert codes == [0, 0], outputs
    for rank_calls in calls:
        made = ours(rank_calls)
        assert elsewhere(made) == {}, made
        names = {name for _, name in made}
        assert {"init_process_group", "all_reduce", "all_gather", "barrier", "broadcast",
                "destroy_process_group"} <= names, made
        assert made[("train.py", "all_reduce")] == 2 * 4  # the stop vote: 32 steps an epoch, every 10th
        assert made[("train.py", "DistributedDataParallel.forward")] == 2 * STEPS, made  # a gradient all-reduce each
        assert {key: made[key] for key in GROUP_AND_WRAP} == GROUP_AND_WRAP, made


@pytest.mark.slow
def test_the_stop_vote_the_checkpoint_and_the_resumed_run_are_made_in_train_py_but_one(mnist_root, tmp_path):
    """The stopped run's calls are all train.py's. The resumed run makes one more elsewhere: resume.py's
    settling step (``Resume.settle_ddp_buckets``), one forward/backward through the DDP model whose
    gradients are thrown away — its ``backward()`` all-reduces the gradients like a training step's, so
    every rank must reach it."""
    codes, outputs, calls = run_two_ranks(tmp_path, mnist_root, "--epochs", "1", "--batch-size", "64",
                                          "--checkpoint-dir", str(tmp_path / "ckpt"), stop_rank=1)
    assert codes == [75, 75], outputs
    assert (tmp_path / "ckpt").is_dir() and any((tmp_path / "ckpt").iterdir())
    for rank_calls in calls:
        made = ours(rank_calls)
        assert elsewhere(made) == {}, made
        assert made[("train.py", "all_reduce")] == 1 and made[("train.py", "all_gather")] == 1, made
        assert made[("train.py", "barrier")] == 2, made  # the start, and nobody leaves before the checkpoint

    codes, outputs, calls = run_two_ranks(tmp_path, mnist_root, "--epochs", "1", "--batch-size", "64",
                                          "--checkpoint-dir", str(tmp_path / "ckpt"), "--resume", name="resumed")
    assert codes == [0, 0], outputs
    for rank_calls in calls:
        made = ours(rank_calls)
        assert elsewhere(made) == {("resume.py", "DistributedDataParallel.forward"): 1}, made
        assert made[("train.py", "DistributedDataParallel.forward")] == STEPS, made  # resumed at step 0


def count_on_this_engine(folder):
    """Run on each engine: count from now on (tests/helpers/call_counter.py)."""
    import sys
    sys.path.insert(0, folder)
    import call_counter
    call_counter.install()


def counted_on_this_engine():
    import call_counter
    return call_counter.calls()


@pytest.mark.slow
def test_the_notebook_path_adds_rank_0s_held_store_and_its_check(mnist_root):
    """``ipp.train``: each rank's calls are train.py's, as on the command line; rank 0's engine makes two
    stores more per call, both in ipp/held_port.py (``hold_master_port``): the server that holds
    MASTER_PORT from the port's choice on — the one its ``init_process_group`` then reuses — and the
    check that it will (``reused_by_the_group``: a second multi-tenant store on the port)."""
    from ddp_tutorial import ipp
    from ddp_tutorial.config import TrainConfig
    engines = ipp.start(2)
    engines.client[engines.ids].apply_sync(count_on_this_engine, HELPERS)
    config = TrainConfig(dataset="mnist", root=str(mnist_root), epochs=1, threads=1, train_subset=256,
                         batch_size=64, evaluate=False, progress=False)
    for _ in range(2):
        ipp.train(config, n=2, keep=True)
    made = [ours(engines.client[engines.ids[rank]].apply_sync(counted_on_this_engine)) for rank in (0, 1)]
    ipp.stop()
    assert elsewhere(made[0]) == {("ipp/held_port.py", "TCPStore"): 2 * 2}, made[0]
    assert elsewhere(made[1]) == {}, made[1]
    for rank in (0, 1):
        assert {key: made[rank][key] for key in GROUP_AND_WRAP} == {key: 2 * n for key, n in GROUP_AND_WRAP.items()}
        assert made[rank][("train.py", "DistributedDataParallel.forward")] == 2 * 2, made[rank]  # 256 / 2 / 64
