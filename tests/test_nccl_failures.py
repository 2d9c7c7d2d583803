"""Who failed first? The failure classifier (distributed.classify_failure) on recorded NCCL/gloo log
lines, the victim rule of spawn's supervisor (supervisor.first_failure) on recorded exit codes, and the
supervisor itself with real processes: a watchdog abort (SIGABRT) is reported as a consequence."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddp_tutorial.failures import WATCHDOG_LINE, classify_failure
from ddp_tutorial.supervisor import first_failure, is_consequence, locate

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# Log lines as torch 2.x / NCCL 2.2x print them (paths, numbers and hosts are of a made-up run).
NCCL_WATCHDOG = (
    "[rank1]:[E1203 05:41:12.123456 81234 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=57, OpType=ALLREDUCE, NumelIn=269322, NumelOut=269322, Timeout(ms)=60000) "
    "ran for 60005 milliseconds before timing out.")
NCCL_WATCHDOG_THREAD = (
    "[rank0]:[E1203 05:41:13.000123 81230 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
    "Process group watchdog thread terminated with exception: [Rank 0] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=57, OpType=ALLREDUCE) ran for 60003 milliseconds before timing out.")
NCCL_REMOTE = (
    "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
    "remote process exited or there was a network error, NCCL version 2.27.3\n"
    "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n"
    "Last error:\nsocketProgress: Connection closed by remote peer gpu02.truba.local<45678>")
NCCL_ABORTED = "RuntimeError: NCCL communicator was aborted on rank 3."
NCCL_NO_INTERFACE = (
    "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
    "3356, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3\n"
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. \n"
    "Last error:\nBootstrap : no socket interface found")
NCCL_DUPLICATE_GPU = (
    "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
    "3356, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.27.3\n"
    "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
    "Last error:\nDuplicate GPU detected : rank 1 and rank 0 both on CUDA device 1b000")
NO_KERNEL = ("torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device\n"
             "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
             "below might be incorrect.")
BAD_ORDINAL = "torch.AcceleratorError: CUDA error: invalid device ordinal\nGPU device may be out of range"
OLD_DRIVER = ("RuntimeError: The NVIDIA driver on your system is too old (found version 12040). Please update "
              "your GPU driver by downloading and installing a new version from the URL: "
              "http://www.nvidia.com/Download/index.aspx")
NO_GPU_NCCL = "ProcessGroupNCCL is only supported with GPUs, no GPUs found!"
GLOO_CLOSED = ("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
               "[127.0.0.1]:34567")
GLOO_RESET = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Read error [10.0.0.2]:21857: "
              "Connection reset by peer")
GLOO_TIMEOUT = ("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out "
                "waiting 10000ms for recv operation to complete")
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.77 GiB"
SHAPE = "ValueError: Expected input batch_size (64) to match target batch_size (32)."


@pytest.mark.parametrize("text,backend,kind", [
    (NCCL_WATCHDOG, "nccl", "lost_peer"),
    (NCCL_WATCHDOG_THREAD, "nccl", "lost_peer"),
    (NCCL_REMOTE, "nccl", "lost_peer"),
    (NCCL_ABORTED, "nccl", "lost_peer"),
    (NCCL_NO_INTERFACE, "nccl", "setup_error"),   # says "socket": the old rule called it a lost peer
    (NCCL_DUPLICATE_GPU, "nccl", "setup_error"),
    (NO_KERNEL, "nccl", "setup_error"),
    (BAD_ORDINAL, "nccl", "setup_error"),
    (OLD_DRIVER, "nccl", "setup_error"),
    (NO_GPU_NCCL, "nccl", "setup_error"),
    (OOM, "nccl", "other"),
    (SHAPE, "nccl", "other"),
    (GLOO_CLOSED, "gloo", "lost_peer"),
    (GLOO_RESET, "gloo", "lost_peer"),
    (GLOO_TIMEOUT, "gloo", "lost_peer"),
    ("RuntimeError: Broken pipe", "gloo", "lost_peer"),
    (SHAPE, "gloo", "other"),
    ("RuntimeError: socket option not supported", "gloo", "other"),   # "socket" alone is no lost peer
])
def test_classify_failure(text, backend, kind):
    assert classify_failure(text, backend) == kind


def test_socket_words_alone_do_not_make_a_lost_peer():
    # The old rule matched "socket": NCCL's "no socket interface found" — the same setup error on every
    # rank — made every rank say "lost contact" and exit 3, and the launcher found no cause.
    assert "socket" in NCCL_NO_INTERFACE.lower() and "socket" in NCCL_REMOTE.lower()
    assert classify_failure(NCCL_NO_INTERFACE, "nccl") == "setup_error"
    assert classify_failure(NCCL_REMOTE, "nccl") == "lost_peer"


ABRT, SHELL_ABRT = -signal.SIGABRT, 128 + signal.SIGABRT


@pytest.mark.parametrize("events,cause,consequences", [
    ([(0, 0), (1, 0)], None, []),
    ([(1, -signal.SIGKILL), (0, 3)], (1, -signal.SIGKILL), [(0, 3)]),
    ([(0, 3), (1, 2)], (1, 2), [(0, 3)]),                                # a victim ended first: the cause is named
    ([(0, ABRT), (1, ABRT), (2, 1)], (2, 1), [(0, ABRT), (1, ABRT)]),    # NCCL watchdog aborts, then the cause
    ([(2, 1), (0, ABRT), (1, ABRT)], (2, 1), [(0, ABRT), (1, ABRT)]),
    ([(0, SHELL_ABRT), (1, 3)], (0, SHELL_ABRT), [(1, 3)]),              # only victims here: the cause is elsewhere
    ([(0, 75), (1, 2)], (1, 2), []),
])
def test_first_failure_on_recorded_exit_codes(events, cause, consequences):
    assert first_failure(events) == (cause, consequences)


def test_consequence_codes():
    assert [is_consequence(c) for c in (3, -6, 134, 1, 2, -9, 0, 75)] == [True, True, True] + [False] * 5


def test_locate_finds_the_watchdog_line(tmp_path):
    log = tmp_path / "job.err"
    log.write_text("starting\nerror (rank 2): boom\n" + NCCL_WATCHDOG + "\n" + NCCL_WATCHDOG_THREAD + "\n")
    assert locate(str(log), WATCHDOG_LINE) == 3
    assert locate(str(log), "nothing like this") is None
    assert locate(None, WATCHDOG_LINE) is None


# --------------------------------------------------------------------------------------
# The supervisor with real processes


def _ready_and_wait(local_rank: int) -> None:
    """Both children started (imports done, even on a loaded machine) before anyone fails."""
    folder = Path(os.environ["SYNC_DIR"])
    (folder / f"ready{local_rank}").touch()
    while not all((folder / f"ready{r}").exists() for r in (0, 1)):
        time.sleep(0.05)


def aborted_victim_then_cause(local_rank: int) -> None:
    """Rank 0 is aborted as NCCL's watchdog does (its line first, then SIGABRT); rank 1, the
    real failure, exits with code 2 a moment later."""
    _ready_and_wait(local_rank)
    if local_rank == 0:
        print(NCCL_WATCHDOG, file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGABRT)
    time.sleep(1.0)
    raise SystemExit(2)


def only_victims(local_rank: int) -> None:
    """Both ranks are victims of a failure on another node: an abort, then a lost-contact exit."""
    _ready_and_wait(local_rank)
    if local_rank == 0:
        print(NCCL_WATCHDOG, file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGABRT)
    time.sleep(0.5)
    raise SystemExit(3)


def supervise(name: str) -> int:  # run in a fresh interpreter, its stderr a file (as under SLURM)
    from ddp_tutorial.supervisor import run_processes
    return run_processes(2, globals()[name], ())


def _run(name: str, tmp_path: Path) -> tuple:
    log = tmp_path / "job.err"
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import test_nccl_failures as m; "
            f"sys.exit(m.supervise({name!r}))")
    (tmp_path / "sync").mkdir()
    env = {**os.environ, "DDP_TUTORIAL_LANG": "en", "PYTHONFAULTHANDLER": "", "SYNC_DIR": str(tmp_path / "sync")}
    with open(log, "w") as err:
        done = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=err, text=True,
                              timeout=300, cwd=REPO, env=env)
    return done.returncode, log.read_text(), str(log)


def test_a_watchdog_abort_is_reported_as_a_consequence_of_the_first_real_failure(tmp_path):
    code, err, path = _run("aborted_victim_then_cause", tmp_path)
    assert code == 2, err
    assert "rank 1 (local rank 1 on node 0) exited with code 2" in err, err
    assert "rank 0 (local rank 0) was aborted by SIGABRT (NCCL's watchdog;" in err, err
    assert "a consequence of rank 1's failure, not a cause" in err, err
    assert f"is at line 1 of {path}" in err, err


def test_a_node_with_only_victims_names_the_abort_and_where_the_watchdog_line_is(tmp_path):
    code, err, path = _run("only_victims", tmp_path)
    assert code == 3, err  # this node's processes were victims: lost contact
    assert "rank 0 (local rank 0 on node 0) was aborted (SIGABRT)" in err, err
    assert f"('{WATCHDOG_LINE}') is at line 1 of {path}" in err, err
    assert "rank 1 (local rank 1) stopped because it lost contact" in err and "a victim as well" in err, err
    assert "No process of node 0 failed on its own: the first failure is on another node" in err, err
    assert "consequence of rank 0" not in err, err
