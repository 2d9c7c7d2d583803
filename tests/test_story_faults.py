"""Faults in the story's own steps (issue 25: A02, E01, D10; issue 24: the side group's timeout, the lost
peer said before the group is torn down). Real processes, bounded in time."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from pathlib import Path

from ddp_tutorial.whoami import _tasks_on_node, find_free_port, resolve_environment  # noqa: F401

BIN = Path(sys.executable).parent
CLEAN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
         "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_JOB_ID", "SLURM_NODEID",
         "SLURM_JOB_NODELIST", "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    env.update(PYTHONUNBUFFERED="1", DDP_TUTORIAL_LANG="en", **extra)
    return env


# -- A02: a hostile SLURM_TASKS_PER_NODE is walked, not expanded -------------------------------------

def test_a_huge_tasks_per_node_costs_nothing():
    started = time.monotonic()
    assert _tasks_on_node("1(x999999999999)", 0) == 1
    assert _tasks_on_node("2(x3),1(x999999999999)", 5) == 1
    assert _tasks_on_node("1(x999999999999)", 10**12) is None
    assert _tasks_on_node("1" * 5000, 0) is None  # not SLURM's: ignored, the world size decides
    environ = {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "1",
               "SLURM_TASKS_PER_NODE": "1(x999999999999)", "MASTER_PORT": "29500"}
    assert resolve_environment(environ=environ).local_world_size == 1
    assert time.monotonic() - started < 1.0


def test_ddp_tutorial_env_with_a_huge_tasks_per_node_answers_at_once():
    done = subprocess.run([sys.executable, "-m", "ddp_tutorial", "env"], capture_output=True, text=True,
                          timeout=60, env=_env(SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NTASKS="1",
                                               SLURM_TASKS_PER_NODE="1(x999999999999)", SLURM_JOB_ID="5"))
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr, done.stderr


# -- E01: a rendezvous endpoint that accepts and never answers ---------------------------------------

def _silent_server():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])  # accept, never answer
            except OSError:
                pass
    threading.Thread(target=accept, daemon=True).start()
    return server, stop, held


def test_the_rendezvous_gives_up_after_the_timeout_when_nobody_answers(mnist_root):
    server, stop, held = _silent_server()
    port = server.getsockname()[1]
    try:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "ddp_tutorial.train", "--dataset", "mnist", "--root", str(mnist_root),
             "--epochs", "1", "--timeout", "4", "--no-eval"],
            capture_output=True, text=True, timeout=120,
            env=_env(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
        seconds = time.monotonic() - started
    finally:
        stop.set()
        server.close()
        for s in held:
            s.close()
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "within 4 s" in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert seconds < 60, f"gave up after {seconds:.0f} s (timeout 4 s)"


# -- D10: SIGUSR1 again and again: still exit 75 -----------------------------------------------------

def test_repeated_sigusr1_still_ends_in_exit_75(mnist_root, tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddp_tutorial.train", "--dataset", "mnist", "--root", str(mnist_root),
         "--epochs", "50", "--batch-size", "16", "--checkpoint-dir", str(tmp_path / "ck"), "--no-eval"],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 180
    while not any("local rank" in line for line in lines) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)  # training has started (the rank line is printed before the data loads)
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            proc.send_signal(signal.SIGUSR1)  # SLURM may warn twice; a test may warn every 20 ms
        except ProcessLookupError:
            break
        time.sleep(0.02)
    proc.wait(timeout=30)
    reader.join(timeout=10)
    output = "".join(lines)
    assert proc.returncode == 75, (proc.returncode, output[-2000:])
    assert (tmp_path / "ck" / "checkpoint.pt").is_file()


# -- issue 24: the side group honours --timeout --------------------------------------------------------

SIDE_GROUP = """
import os, sys, time, torch
from ddp_tutorial.preemption import StopRequest
from ddp_tutorial.train import control_group, in_process_group, stop_vote
from ddp_tutorial.whoami import resolve_environment
rank = int(sys.argv[1])
env = resolve_environment(rank=rank, world_size=2, master_addr="127.0.0.1", master_port=int(sys.argv[2]))
with in_process_group(env, "gloo", torch.device("cpu"), 60, lambda error, backend: None):
    side = control_group("nccl", 3)      # train.py's side group beside nccl (gloo, --timeout 3), here beside gloo
    assert side is not None and not stop_vote(StopRequest(), side)   # both ranks vote: the side group works
    if rank == 1:
        time.sleep(40)                   # rank 1 stops voting
        os._exit(0)
    started = time.monotonic()
    try:
        stop_vote(StopRequest(), side)
    except Exception:
        print(f"TIMED-OUT after {time.monotonic() - started:.1f}", flush=True)
        os._exit(0)
    print("NO-TIMEOUT", flush=True)
"""


def test_the_side_group_honours_the_timeout_at_world_two():
    """train.py's stop vote on the gloo side group it builds beside nccl (``control_group``,
    ``stop_vote``); here (no GPU) the side group is built beside gloo, at world size 2: a vote that one
    rank never joins fails after the group's timeout, not torch's 30 minutes. (Beside a device-bound
    nccl init: tests/test_device_rule.py on a GPU, and benchmarks/gpu.py on two.)"""
    port = str(find_free_port())
    procs = [subprocess.Popen([sys.executable, "-c", SIDE_GROUP, str(r), port], env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    try:
        out, err = procs[0].communicate(timeout=120)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert "TIMED-OUT" in out, out + err[-2000:]
    assert float(out.split("after")[1]) < 20, out


@pytest.mark.parametrize("text,expected", [
    ("NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error (run with NCCL_DEBUG=INFO for details)\n"
     "Last error:\nBootstrap : no socket interface found", "Bootstrap : no socket interface found"),
    ("NCCL error: invalid usage\nLast error: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000",
     "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000"),
    ("plain first line\nsecond", "plain first line"),
])
def test_an_nccl_setup_error_keeps_nccls_own_reason(text, expected):
    from ddp_tutorial.process_group import nccl_reason, translate
    assert nccl_reason(text) == expected
    env = resolve_environment(rank=0, world_size=2, master_addr="10.0.0.1", master_port=29500)
    if "NCCL" in text:
        error = translate(RuntimeError(text), env, 30)
        assert error.key == "pg.nccl_setup" and expected in str(error)



@pytest.mark.parametrize("text,key", [
    ("Broken pipe", "pg.closed_at_once"),  # torch's usual words against an HTTP server (35 of 40 tries here)
    ("Connection reset by peer", "pg.closed_at_once"),
    ("Ping failed, invalid value returned from server. Expected: 16640, Got: 1347703880", "pg.not_torch"),
])
def test_a_port_held_by_another_program_is_named_whatever_torch_says(text, key):
    """The CI run at stop 51 met "Broken pipe" (the other end hung up during torch's ping), which once
    fell through to the generic message; both of torch's answers now name another program."""
    import torch.distributed as dist
    from ddp_tutorial.process_group import translate
    env = resolve_environment(rank=1, world_size=2, master_addr="127.0.0.1", master_port=29512)
    error = translate(dist.DistNetworkError(text), env, 30)
    assert error.key == key and "another program" in str(error) and "29512" in str(error)

# -- D05/D06: SIGUSR1 while a launcher imports torch; B12: a reader that leaves; B09: nothing left ----

@pytest.mark.parametrize("command", [["ddp-tutorial", "train"], ["spawn", "--nproc-per-node", "2"]],
                         ids=["ddp-tutorial-train", "spawn-two-ranks"])
def test_sigusr1_while_a_launcher_imports_torch_stops_for_a_requeue(command, mnist_root, tmp_path):
    head = ([str(BIN / "ddp-tutorial"), "train"] if command[0] == "ddp-tutorial"
            else [sys.executable, "-m", "ddp_tutorial.spawn", *command[1:]])
    proc = subprocess.Popen([*head, "--dataset", "mnist", "--root", str(mnist_root), "--epochs", "1",
                             "--train-subset", "2048", "--checkpoint-dir", str(tmp_path / "ck"), "--no-eval",
                             "--device", "cpu"],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # At the first moment the launcher catches SIGUSR1 (ddp_tutorial/__init__.py, before torch is imported), not
    # after a fixed 0.4 s: at load 36 the interpreter had not come that far and died of the signal (rc -10).
    deadline = time.monotonic() + 60
    while not _catches_sigusr1(proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline, "the launcher never caught SIGUSR1"
        time.sleep(0.001)
    torch_loaded = "libtorch" in Path(f"/proc/{proc.pid}/maps").read_text()
    proc.send_signal(signal.SIGUSR1)
    output = proc.communicate(timeout=240)[0]
    assert not torch_loaded, "the launcher caught SIGUSR1 only once torch was loaded"
    assert proc.returncode == 75, (proc.returncode, output[-2000:])


def _catches_sigusr1(pid: int) -> bool:
    """Has the process a handler for SIGUSR1 (its bit in /proc/PID/status's SigCgt)?"""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGUSR1 - 1) & 1)
    return False


FINISHED = ["--dataset", "mnist", "--train-subset", "512", "--device", "cpu", "--threads", "1"]  # as resumed


@pytest.fixture(scope="module")
def finished_run(mnist_root, tmp_path_factory):
    """A 2-epoch run whose reader leaves after the first line (B12), with rank 0's checkpoints: the reader's test
    reads its output, and the resume test starts from its checkpoint (the finished run it needs, without a second
    training process of its own). 512 samples: the reader leaves at the first line, whatever the data's size."""
    folder = tmp_path_factory.mktemp("finished-run")
    shell = (f"{BIN / 'ddp-tutorial'} train {' '.join(FINISHED)} --root {mnist_root} --epochs 2 --nproc-per-node 1 "
             f"--checkpoint-dir {folder / 'ck'} --json {folder / 'r.json'} | head -n 1")
    done = subprocess.run(["bash", "-o", "pipefail", "-c", shell], capture_output=True, text=True, timeout=240,
                          env=_env())
    return folder, done


def test_a_reader_that_leaves_does_not_stop_the_training(finished_run):
    folder, done = finished_run
    assert (folder / "r.json").is_file(), done.stdout + done.stderr
    assert "BrokenPipe" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_resuming_a_finished_run_says_there_is_nothing_left(finished_run, mnist_root):
    folder, finished = finished_run
    assert (folder / "ck" / "checkpoint.pt").is_file(), finished.stdout + finished.stderr
    done = subprocess.run([sys.executable, "-m", "ddp_tutorial.train", *FINISHED, "--root", str(mnist_root),
                           "--checkpoint-dir", str(folder / "ck"), "--no-eval", "--epochs", "1", "--resume"],
                          capture_output=True, text=True, timeout=240, env=_env())
    assert done.returncode == 0 and "nothing left to train" in done.stdout, done.stdout + done.stderr


# -- R17: the real cause at once: an unknown host, another program on the port, too few files ----------

def test_an_unknown_master_addr_is_said_at_once():
    from ddp_tutorial.i18n import TutorialError
    from ddp_tutorial.process_group import check_master_address
    env = resolve_environment(rank=1, world_size=2, master_addr="no-such-host.invalid", master_port=29512)
    started = time.monotonic()
    with pytest.raises(TutorialError) as caught:
        check_master_address(env)
    assert caught.value.key == "pg.unknown_host" and "no-such-host.invalid" in str(caught.value)
    assert time.monotonic() - started < 15


def _train_rank_one(root, port, limit_files=None, timeout="20"):
    def limit():
        if limit_files:
            import resource
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit_files, limit_files))
    return subprocess.run([sys.executable, "-m", "ddp_tutorial.train", "--dataset", "mnist", "--root", str(root),
                           "--epochs", "1", "--timeout", timeout, "--no-eval"], capture_output=True, text=True,
                          timeout=180, preexec_fn=limit,
                          env=_env(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", MASTER_ADDR="127.0.0.1",
                                   MASTER_PORT=str(port)))


def test_another_program_on_the_port_is_named(mnist_root):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()

    def answer():  # an HTTP-ish service: it answers, but not as PyTorch's store does
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn = server.accept()[0]
                conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n" * 4)
                conn.close()
            except OSError:
                pass
    threading.Thread(target=answer, daemon=True).start()
    try:
        done = _train_rank_one(mnist_root, server.getsockname()[1])
    finally:
        stop.set()
        server.close()
    assert done.returncode == 2, done.stderr[-2000:]
    assert "another program" in done.stderr, done.stderr[-2000:]
    assert "Expected: 4235" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]


def test_local_engines_are_bounded_by_what_this_machine_can_start():
    """F01: ipp.start(5000) was accepted and would start 5000 engines on 2 cores."""
    from ddp_tutorial import ipp
    from ddp_tutorial.i18n import TutorialError
    with pytest.raises(TutorialError) as caught:
        ipp.start(5000, device="cpu")
    assert caught.value.key == "config.too_many_processes" and "5000" in str(caught.value)
    assert ipp.current() is None


def test_divergence_and_too_many_threads_are_said(mnist_root, tmp_path):
    """B08: `--lr 10` diverged to a loss of 10^10 and was reported as a success; H12: `--threads 1024` on
    2 cores ran 250× slower without a word."""
    done = subprocess.run([sys.executable, "-m", "ddp_tutorial.train", "--dataset", "mnist", "--root",
                           str(mnist_root), "--epochs", "3", "--lr", "10", "--train-subset", "1024", "--no-eval",
                           "--threads", "64"], capture_output=True, text=True, timeout=300, env=_env())
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--threads 64" in done.stdout, done.stdout
    assert "diverges" in done.stdout, done.stdout


def test_after_a_run_sigusr1_is_harmless_and_later_shells_can_still_trap_it(tmp_path):
    """After ``run_and_exit`` SIGUSR1 does nothing in the process (a finished run must not die of SLURM's second
    warning, nor during the interpreter's teardown: exit 0, not 138), and a shell the process starts later can
    still trap it. Before, SIGUSR1 was set to SIG_IGN at once, which every later child inherited: a pytest worker
    that had run a training in-process started the torchrun template's batch script with SIGUSR1 ignored, so its
    preemption trap never ran (a clean-clone run at stop 52)."""
    code = (
        "import atexit, os, signal, subprocess, sys\n"
        "atexit.register(lambda: os.kill(os.getpid(), signal.SIGUSR1))  # runs last: in the teardown\n"
        "from ddp_tutorial.entry import run_and_exit\n"
        "assert run_and_exit(lambda: None) == 0\n"
        "os.kill(os.getpid(), signal.SIGUSR1)  # after the run, before the exit\n"
        "shell = subprocess.run(['bash', '-c', 'trap \"echo TRAPPED\" USR1; kill -USR1 $$; echo after'],\n"
        "                       capture_output=True, text=True, timeout=30)\n"
        "print(shell.stdout.replace(chr(10), ' '))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=_env())
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert "TRAPPED after" in done.stdout, done.stdout + done.stderr
