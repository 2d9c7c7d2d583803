"""The ipyparallel launcher of the notebooks, with real local engines and gloo.

Every test leaves no engine behind: after a failure every engine *and* the controller must be gone,
checked by PID. Starting two engines costs a few CPU-seconds (each imports torch): the tests that only
use engines share one set (``shared_engines``; the last of them ends it with a call without
``keep=True``), each test that makes a rank fail, run too long or die starts its own.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
import torch

from ddp_tutorial import ipp
from ddp_tutorial.config import TrainConfig
from ddp_tutorial.i18n import TutorialError
from engine_checks import alive, no_engines_left  # noqa: F401 - the autouse fixture



def cluster_pids(engines):
    """Every process of a cluster: the engines, their helper ("nanny") processes, the controller."""
    pids = [p.pid for p in engines.processes] + [engines.cluster.controller.pid]
    assert set(engines.pids) <= set(pids)
    return pids



def small_config(root, **extra):
    settings = dict(dataset="mnist", root=str(root), epochs=1, threads=1)
    return TrainConfig(**{**settings, **extra})


def test_the_engines_wait_for_the_controller_as_long_as_the_kernel_waits_for_them(shared_engines):
    started = ipp.start(2)  # the module's engines (started by this same call), CPU or one per GPU
    assert started is shared_engines
    # Forked from the ranks' server (ipp/forked.py): its command line is the server's, its arguments ipengine's.
    for argv in started.client[started.ids].apply_sync(lambda: __import__("sys").argv):
        assert argv[0] == "ipengine" and "--IPEngine.timeout=120" in argv, argv
    assert [psutil.Process(pid).name() for pid in started.pids] == ["ipengine"] * 2


def test_rank_0s_progress_is_drawn_here_and_the_data_stays_loaded_on_the_engines(mnist_root, shared_engines, capsys):
    """Outside a live kernel the bar is tqdm's text form, one per epoch, without timings; the
    engines keep the data set in memory for the next call (a new staging would invalidate it)."""

    ipp.train(small_config(mnist_root, epochs=2, batch_size=64), n=2, keep=True)
    err = capsys.readouterr().err
    assert "epoch 0: 100%|" in err and "epoch 1: 100%|" in err and "32/32" in err, err
    assert "it/s" not in err and "batch/s" not in err and "<" not in err  # no timing in stored outputs
    engines = ipp.current()
    for rank, eid in enumerate(engines.ids):  # rank 0 also holds the test split (it evaluates)
        splits = {True, False} if rank == 0 else {True}
        assert sorted(engines.client[eid].apply_sync(_cached_data)) == sorted(
            ("mnist", str(mnist_root), split) for split in splits)
    results = ipp.train(small_config(mnist_root, epochs=1), n=2, keep=True, progress=False)
    assert results[0].test_accuracy > 80
    assert "epoch 0:" not in capsys.readouterr().err  # progress=False: no bar

    def long_work(env):  # a long ipp.run with its own tqdm.auto bar: rank 0's is drawn here
        from tqdm.auto import tqdm
        for _ in tqdm(range(7), desc=f"work {env.rank}"):
            pass
        return env.rank

    assert ipp.run(long_work, n=2, keep=True) == [0, 1]
    err = capsys.readouterr().err
    assert "work 0: 100%|" in err and "7/7" in err and "work 1" not in err, err

    def quick_then_slow(env):  # a bar that starts and ends between two looks of the kernel (0.2 s)
        import time

        from tqdm.auto import tqdm
        for _ in tqdm(range(3), desc="quick"):
            pass
        for _ in tqdm(range(2), desc="slow"):
            time.sleep(0.3)
        return env.rank

    assert ipp.run(quick_then_slow, n=2, keep=True) == [0, 1]
    err = capsys.readouterr().err
    assert "quick: 100%|" in err and "3/3" in err and "slow: 100%|" in err and "2/2" in err, err


def test_two_engines_train_like_the_cli(mnist_root, shared_engines, tmp_path, capsys):
    results = ipp.train(small_config(mnist_root), n=2, keep=True)
    assert [r.rank for r in results] == [0, 1]
    assert all(r.world_size == 2 and r.backend == "gloo" and r.launcher == "explicit" for r in results)
    assert results[0].weights_sha256 == results[1].weights_sha256   # DDP kept the replicas identical
    assert results[0].test_accuracy > 80 and results[1].test_accuracy == results[0].test_accuracy
    assert len(results[0].rank_losses[0]) == 2
    out = capsys.readouterr().out
    assert "loss at rank 0 is" in out and "loss at rank 1 is" not in out  # rank 0's output is streamed

    # The same run through the command line (spawned processes) ends with the same weights.
    json_path = tmp_path / "cli.json"
    subprocess.run([sys.executable, "-m", "ddp_tutorial", "train", "--nproc-per-node", "2", "--dataset", "mnist",
                    "--root", str(mnist_root), "--epochs", "1", "--threads", "1", "--quiet",
                    "--json", str(json_path)], check=True, timeout=240,
                   env={k: v for k, v in os.environ.items() if k not in ("MASTER_PORT", "RANK", "WORLD_SIZE")})
    assert json.loads(json_path.read_text())["weights_sha256"] == results[0].weights_sha256

    # keep=True: the next call reuses the same engines, here for a collective.
    pids = cluster_pids(ipp.current())

    def total_of_ranks(env, offset):
        import torch
        import torch.distributed as dist
        value = torch.tensor([float(env.rank + offset)])
        dist.all_reduce(value)
        return env.rank, env.world_size, value.item()

    assert ipp.run(total_of_ranks, 10, n=2) == [(0, 2, 21.0), (1, 2, 21.0)]
    assert ipp.current() is None and not [p for p in pids if alive(p)]   # keep=False: all stopped


def test_a_rank_that_raises_is_named_and_the_others_are_stopped():
    def fails_on_rank_1(env):
        import torch.distributed as dist
        if env.rank == 1:
            raise ValueError("deliberate failure on rank 1")
        dist.barrier()  # rank 0 waits for rank 1, which never comes

    pids = cluster_pids(ipp.start(2))
    began = time.monotonic()
    with pytest.raises(TutorialError) as caught:
        ipp.run(fails_on_rank_1, n=2)
    assert time.monotonic() - began < 30
    text = str(caught.value)
    assert "rank 1" in text and "ValueError: deliberate failure on rank 1" in text
    if "rank 0" in text:  # rank 0's lost connection is a symptom: the cause comes first
        assert text.index("rank 1") < text.index("rank 0")
    assert ipp.current() is None and not [p for p in pids if alive(p)]


def test_a_run_that_outlives_its_wall_clock_bound_is_stopped():
    def sleeps(env):
        import time
        time.sleep(300)  # alive, answering heartbeats, but never finishing

    pids = cluster_pids(ipp.start(2))
    began = time.monotonic()
    with pytest.raises(TutorialError, match="did not finish within 3 s"):
        ipp.run(sleeps, n=2, timeout=3)
    assert time.monotonic() - began < 30
    assert ipp.current() is None and not [p for p in pids if alive(p)]


def test_a_sigkilled_engine_ends_the_run_in_bounded_time(mnist_root, tmp_path, monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr")  # the message comes in the user's language
    checkpoints = tmp_path / "ckpt"
    seen = {}

    def kill_rank_1_mid_run():
        # Rank 0 writes a checkpoint after every epoch: once one exists, training is under way.
        while ipp.current() is None or not (checkpoints.is_dir() and any(checkpoints.iterdir())):
            time.sleep(0.05)
        engines = ipp.current()
        seen["pids"] = cluster_pids(engines)
        seen["killed_at"] = time.monotonic()
        os.kill(engines.pids[1], signal.SIGKILL)

    killer = threading.Thread(target=kill_rank_1_mid_run, daemon=True)
    killer.start()
    # 300 epochs of 32 small batches would take minutes: the kill comes long before the end.
    with pytest.raises(TutorialError) as caught:
        ipp.train(small_config(mnist_root, epochs=300, batch_size=64, checkpoint_dir=str(checkpoints)), n=2)
    assert time.monotonic() - seen["killed_at"] < 60
    text = str(caught.value)
    assert "rank 1" in text and "SIGKILL" in text and "öldü" in text, text
    assert ipp.current() is None
    assert not [p for p in seen["pids"] if alive(p)], "engine or controller processes left behind"


def test_an_engine_that_gives_up_registering_is_said_at_once_with_its_reason(monkeypatch):
    """ipyparallel's engine exits when the controller has not answered its registration in time (5 s by
    default: a busy machine once left a notebook waiting 120 s for engines that were gone). The engines now
    wait as long as the kernel; one that exits anyway is said at once, with the reason from its log. Here the
    controller is frozen (SIGSTOP) while the engines start with a 1-s limit, and thawed once they have given
    up: a controller too slow for them, whatever the machine's speed (a 1-ms limit alone was met on a quiet
    machine in the clean-clone run)."""
    import ipyparallel
    from ddp_tutorial.ipp import engines as es
    assert "--IPEngine.timeout=120" in es.ENGINE_ARGS
    monkeypatch.setattr(es, "ENGINE_ARGS", ("--IPEngine.timeout=1",))
    start_engines = ipyparallel.Cluster.__getattr__  # AsyncFirst makes the *_sync methods on demand

    def frozen_controller_start(cluster, *args, **kwargs):
        # frozen only once it has written its connection files: frozen before, the engines never start at all
        # (ipyparallel waits 60 s for the files; a loaded clean-clone run froze it that early)
        files = list(cluster.controller.connection_files.values())
        deadline = time.monotonic() + 120
        while not all(os.path.exists(f) for f in files) and time.monotonic() < deadline:
            time.sleep(0.1)
        controller = psutil.Process(cluster.controller.pid)
        frozen = [controller, *controller.children(recursive=True)]
        for process in frozen:
            process.suspend()
        try:
            started = start_engines(cluster, "start_engines_sync")(*args, **kwargs)
            psutil.wait_procs(es.with_helpers(es.launcher_pids(cluster)), timeout=60)  # given up after 1 s
            return started
        finally:
            for process in frozen:
                try:
                    process.resume()
                except psutil.NoSuchProcess:
                    pass

    monkeypatch.setattr(ipyparallel.Cluster, "start_engines_sync", frozen_controller_start, raising=False)
    began = time.monotonic()
    with pytest.raises(TutorialError) as caught:
        ipp.start(2, device="cpu")
    assert caught.value.key == "ipp.engine_exited", caught.value
    assert "Registration timed out" in str(caught.value), caught.value
    assert time.monotonic() - began < 60, "waited for engines that were gone"
    assert ipp.current() is None


def test_bad_engine_counts_are_refused_before_anything_starts():
    for n in (0, -1, 1.5):
        with pytest.raises(TutorialError, match="engines|motor"):
            ipp.start(n)
    assert ipp.current() is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_kernel_that_initialised_cuda_is_refused():
    code = ("import torch; torch.zeros(1).cuda()\n"
            "from ddp_tutorial import ipp\n"
            "from ddp_tutorial.i18n import TutorialError\n"
            "try:\n    ipp.start(1)\nexcept TutorialError as e:\n    print('REFUSED', e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "REFUSED" in done.stdout and "CUDA" in done.stdout, done.stdout + done.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_engines_train_on_their_gpus_while_the_kernel_stays_off_cuda(mnist_root):
    n = torch.cuda.device_count()
    results = ipp.train(small_config(mnist_root, device="cuda"), n=n)
    assert [r.device for r in results] == [f"cuda:{rank}" for rank in range(n)]
    assert results[0].backend == ("nccl" if n > 1 else results[0].backend)
    assert len({r.weights_sha256 for r in results}) == 1 and results[0].test_accuracy > 80
    assert not torch.cuda.is_initialized()  # the kernel (this process) never touched CUDA


GUARDED_KERNEL = """
import subprocess, sys, time
from ddp_tutorial.ipp.watchdog import Guard
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
guard = Guard([child.pid])
print(child.pid, guard.process.pid, flush=True)
if sys.argv[1] == "release":
    guard.release()
    print("released", flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("how", ["sigkill", "release"])
def test_the_watchdog_ends_what_it_guards_when_its_kernel_dies(how):
    """A stand-in kernel guards a child process, then is SIGKILLed: the child is gone within 10 s.
    After release() (a clean ipp.stop) the watchdog leaves without touching anything."""
    kernel = subprocess.Popen([sys.executable, "-c", GUARDED_KERNEL, how], stdout=subprocess.PIPE, text=True)
    child_pid, watchdog_pid = map(int, kernel.stdout.readline().split())
    child = psutil.Process(child_pid)
    try:
        if how == "release":
            assert kernel.stdout.readline().strip() == "released"
            assert not alive(watchdog_pid)
        os.kill(kernel.pid, signal.SIGKILL)
        kernel.wait()
        began = time.monotonic()
        if how == "sigkill":
            while alive(child_pid) and time.monotonic() - began < 15:
                time.sleep(0.05)
            assert not alive(child_pid) and time.monotonic() - began < 10
        else:  # the watchdog left at release(): nothing else could end the child, 1.5 s shows it untouched
            time.sleep(1.5)
            assert alive(child_pid)  # released: not the watchdog's to end
    finally:
        if alive(child_pid):
            child.kill()
    began = time.monotonic()
    while alive(watchdog_pid) and time.monotonic() - began < 10:
        time.sleep(0.05)
    assert not alive(watchdog_pid)  # its work done, the watchdog leaves too


def _cached_data() -> list:
    """(data set, root, train split) of what an engine keeps in memory (runs on the engine)."""
    from ddp_tutorial.ipp import remote
    return [key[:3] for key in remote._DATA_CACHE]
