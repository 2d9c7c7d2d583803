"""Bad input: every mistake a user can make at the command line ends with a clear message in
their language and a non-zero exit code — never a traceback, never a hang.

Each case runs twice, with ``DDP_TUTORIAL_LANG=en`` and ``tr``; both texts must name the problem
(the option, variable or value at fault, in that language's words), they must differ, and the exit
code must be 2 (a ``TutorialError``). Every run has a time limit: a hang fails the test.

Speed: a fresh Python needs several seconds to import torch on this 2-core machine, and there are
about 60 runs here. So each run is a real child process *forked* from the test process (which has
imported the package once): the child sets its environment, calls the same ``main(argv)`` the
command-line entry points call (``ddp-tutorial`` → ``ddp_tutorial.cli.main``, ``python -m
ddp_tutorial.train`` → ``ddp_tutorial.train.main``, ``python -m ddp_tutorial.spawn`` →
``ddp_tutorial.spawn.main``) and exits with its return code. All runs go at once.
``test_the_entry_points_behave_the_same`` checks with fresh interpreters that the installed
commands give the same result.

Related cases tested elsewhere (see docs/reliability.md): sbatch values carrying shell
metacharacters in tests/test_slurm_jobs.py (rendered, ``bash -n``, canary); download on an offline node
in tests/test_data.py::test_offline_download_fails_fast_and_clearly; malformed host lists in
tests/test_hostlist.py; damaged and mismatched checkpoints in tests/test_faults.py.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import torch

from ddp_tutorial import cli, spawn, train
from ddp_tutorial.i18n import TutorialError

ENTRY_POINTS = {"ddp-tutorial": cli.main, "train": train.main, "spawn": spawn.main}
TIMEOUT = 120.0  # seconds per run; the slowest case waits 5 s for a rendezvous that never happens
_LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                       "MASTER_PORT", "TORCHELASTIC_RUN_ID")


@dataclass
class Case:
    """One bad input: which command, its arguments and environment, and what each language must say."""

    entry: str
    argv: List[str]
    env: Dict[str, str] = field(default_factory=dict)
    en: Tuple[str, ...] = ()       # must all appear in the English message
    tr: Tuple[str, ...] = ()       # must all appear in the Turkish message
    both: Tuple[str, ...] = ()     # must appear in both (names, values, paths)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    """Paths and sockets the cases refer to."""
    base = tmp_path_factory.mktemp("bad-input")
    from idx_files import write_mnist_like
    data = write_mnist_like(base / "data", n_train=256, n_test=64)
    (base / "empty").mkdir()
    (base / "a-file").write_text("not a directory\n")
    holder = socket.socket()           # a port that is in use: this socket listens on it
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    os.mkfifo(_mkdir(base / "ck-fifo") / "checkpoint.pt")           # a named pipe where the checkpoint is
    (_mkdir(base / "ck-dir") / "checkpoint.pt").mkdir()             # a directory named checkpoint.pt
    (base / "ck-dangling").symlink_to(base / "nowhere" / "deeper")  # a link to nothing
    other_run = subprocess.Popen([sys.executable, "-c", OTHER_RUN, str(_mkdir(base / "ck-busy"))],
                                 stdout=subprocess.PIPE, text=True)  # another training holds ck-busy
    assert other_run.stdout.readline().strip() == "ready"
    yield dict(base=base, data=data, empty=base / "empty", file=base / "a-file",
               busy_port=holder.getsockname()[1], silent_port=_free_port(), other_run=other_run.pid)
    holder.close()
    other_run.kill()
    other_run.wait(timeout=30)


OTHER_RUN = """
import sys, time
from ddp_tutorial import checkpoint
checkpoint.ensure_writable(sys.argv[1])  # what rank 0 of a running training holds
print("ready", flush=True)
time.sleep(600)
"""


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def cases(p) -> Dict[str, Case]:
    data = ["--dataset", "mnist", "--root", str(p["data"]), "--device", "cpu", "--threads", "1", "--no-progress",
            "--no-eval"]  # --device cpu: no CUDA in a forked child, even on a GPU machine
    torchrun = lambda rank, world, local, port="29500": dict(  # noqa: E731  (torchrun's variables)
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    slurm = dict(SLURM_PROCID="0", SLURM_NTASKS="2", SLURM_LOCALID="0", MASTER_PORT="29500")
    return {
        "world-size-0": Case("ddp-tutorial", ["train", "--nproc-per-node", "0", *data],
                             en=("World size", "got 0"), tr=("Dünya boyutu", "verilen: 0")),
        "world-size-negative": Case("ddp-tutorial", ["train", "--nproc-per-node", "-2", *data],
                                    en=("World size", "got -2"), tr=("Dünya boyutu", "verilen: -2")),
        "world-size-0-from-torchrun-variables": Case("train", data, torchrun(0, 0, 0),
                                                     en=("World size", "got 0"), tr=("Dünya boyutu", "verilen: 0")),
        "rank-ge-world-size": Case("train", data, torchrun(2, 2, 0), both=("rank 2", "0 … 1"),
                                   en=("outside", "world size = 2"),
                                   tr=("aralığının dışında", "dünya boyutu = 2")),
        "node-rank-ge-number-of-nodes": Case(
            "spawn", ["--nnodes", "2", "--node-rank", "2", "--nproc-per-node", "1", *data],
            dict(MASTER_ADDR="127.0.0.1", MASTER_PORT="29500"), both=("2", "0 … 1"),
            en=("node rank 2", "number of nodes = 2"), tr=("düğüm rank'i 2", "düğüm sayısı = 2")),
        "gpus-requested-none-present": Case("ddp-tutorial", ["train", *data, "--device", "cuda"],
                                             both=("--device cuda",), en=("no usable CUDA GPU",), tr=("GPU yok",)),
        "nccl-requested-on-the-cpu": Case("ddp-tutorial", ["train", *data, "--device", "cpu", "--backend", "nccl"],
                                          both=("nccl", "CPU", "--backend gloo"), en=("needs CUDA",),
                                          tr=("gerektirir",)),
        "unreachable-master-init-timeout": Case(
            "train", [*data, "--timeout", "5"], torchrun(1, 2, 1, p["silent_port"]),
            both=(f"127.0.0.1:{p['silent_port']}", "Rank 1"), en=("within 5 s",), tr=("5 s içinde",)),
        "master-port-in-use": Case("train", [*data, "--timeout", "5"], torchrun(0, 2, 0, p["busy_port"]),
                                   both=(f"127.0.0.1:{p['busy_port']}", "MASTER_PORT"), en=("already in use",),
                                   tr=("kullanımda",)),
        "master-port-not-a-number": Case("train", data, dict(torchrun(0, 2, 0), MASTER_PORT="http"),
                                         both=("MASTER_PORT='http'", "65535"), en=("not a port number",),
                                         tr=("port numarası değil",)),
        "non-numeric-slurm-variable": Case("train", data, dict(slurm, SLURM_PROCID="zero"),
                                           both=("SLURM_PROCID='zero'",), en=("not a whole number",),
                                           tr=("tam sayı değil",)),
        "non-numeric-slurm-job-id": Case(
            "spawn", ["--nnodes", "2", "--node-rank", "0", "--nproc-per-node", "1", *data],
            dict(SLURM_JOB_ID="12a", MASTER_ADDR="127.0.0.1"), both=("SLURM_JOB_ID='12a'",),
            en=("not a whole number",), tr=("tam sayı değil",)),
        "inconsistent-slurm-variables": Case("train", data, dict(slurm, SLURM_NPROCS="3"),
                                             both=("SLURM_NTASKS=2", "SLURM_NPROCS=3"),
                                             en=("Inconsistent", "SLURM_NTASKS=2 but SLURM_NPROCS=3"),
                                             tr=("Tutarsız", "SLURM_NTASKS=2, oysa SLURM_NPROCS=3")),
        "local-rank-ge-processes-per-node": Case("train", data, dict(torchrun(1, 2, 3), LOCAL_WORLD_SIZE="2"),
                                                both=("3", "0 … 1"), en=("local rank 3", "processes on this node"),
                                                tr=("yerel rank 3", "bu düğümdeki süreç sayısı")),
        "more-processes-per-node-than-in-the-world": Case(
            "train", data, dict(torchrun(1, 2, 1), LOCAL_WORLD_SIZE="4"), both=("4", "2"),
            en=("Inconsistent", "4 processes per node but world size 2"),
            tr=("Tutarsız", "düğüm başına 4 süreç, oysa dünya boyutu 2")),
        "incomplete-torchrun-variables": Case("train", data, dict(RANK="0"), both=("WORLD_SIZE", "LOCAL_RANK"),
                                              en=("incomplete",), tr=("eksik",)),
        "malformed-host-list-unclosed-bracket": Case("train", data, dict(slurm, MASTER_PORT="29500",
                                                                           SLURM_JOB_NODELIST="gpu[01-"),
                                                       both=("'gpu[01-'",), en=("Malformed",), tr=("Hatalı",)),
        "malformed-host-list-backwards-range": Case("train", data, dict(slurm, SLURM_JOB_NODELIST="gpu[07-03]"),
                                                      both=("'gpu[07-03]'",), en=("Malformed",), tr=("Hatalı",)),
        "multi-node-spawn-without-master-port": Case(
            "spawn", ["--nnodes", "2", "--node-rank", "0", "--nproc-per-node", "1", *data],
            both=("MASTER_ADDR", "MASTER_PORT"), en=("2 nodes",), tr=("2 düğümde",)),
        "unknown-data-set": Case("ddp-tutorial", ["train", *data, "--dataset", "cifar10"],
                                 both=("--dataset='cifar10'", "mnist, fashion-mnist"), en=("Invalid",),
                                 tr=("Geçersiz",)),
        "missing-data-on-an-offline-node": Case(
            "ddp-tutorial", ["train", *data, "--root", str(p["empty"])],
            both=(str(p["empty"]), "ddp-tutorial data prepare --dataset mnist"), en=("not staged", "never download"),
            tr=("hazır değil", "indirmez")),
        "batch-size-0": Case("ddp-tutorial", ["train", *data, "--batch-size", "0"], both=("--batch-size=0",),
                             en=("Invalid", "≥ 1"), tr=("Geçersiz", "1 veya daha büyük")),
        "epochs-lt-0": Case("ddp-tutorial", ["train", *data, "--epochs", "-1"], both=("--epochs=-1",),
                           en=("Invalid", "≥ 0"), tr=("Geçersiz", "0 veya daha büyük")),
        "learning-rate-0": Case("ddp-tutorial", ["train", *data, "--lr", "0"], both=("--lr=0.0",),
                                en=("number > 0",), tr=("0 değerinden büyük",)),
        "timeout-0": Case("ddp-tutorial", ["train", *data, "--timeout", "0"], both=("--timeout=0.0",),
                          en=("number > 1",), tr=("1 değerinden büyük",)),
        "unwritable-checkpoint-dir-under-a-file": Case(
            "ddp-tutorial", ["train", *data, "--checkpoint-dir", str(p["file"] / "ckpt")],
            both=(str(p["file"] / "ckpt"), "--checkpoint-dir"), en=("Cannot write checkpoints",),
            tr=("yazılamıyor",)),
        "unwritable-checkpoint-dir-in-proc": Case(
            "ddp-tutorial", ["train", *data, "--checkpoint-dir", "/proc/ddp-tutorial-ckpt"],
            both=("/proc/ddp-tutorial-ckpt", "--checkpoint-dir"), en=("Cannot write checkpoints",),
            tr=("yazılamıyor",)),
        "resume-without-checkpoint-dir": Case("ddp-tutorial", ["train", *data, "--resume"],
                                                  both=("--resume", "--checkpoint-dir"), en=("needs",),
                                                  tr=("gerekir",)),
        # Issue 25, the hostile sweep's round 3: options refused before any work is done.
        "json-empty": Case("ddp-tutorial", ["train", *data, "--json", ""], both=("--json=''",),
                           en=("not empty", "leave the option out"), tr=("boş olmayan", "hiç vermeyin")),
        "checkpoint-dir-empty": Case("spawn", ["--nproc-per-node", "1", *data, "--checkpoint-dir", ""],
                                     both=("--checkpoint-dir=''",), en=("not empty",), tr=("boş olmayan",)),
        "json-is-the-checkpoint-file": Case(
            "train", [*data, "--checkpoint-dir", str(p["file"].with_name("c03")),
                      "--json", str(p["file"].with_name("c03") / "checkpoint.pt")],
            both=(str(p["file"].with_name("c03") / "checkpoint.pt"),), en=("is the checkpoint file",),
            tr=("kontrol noktası dosyasının",)),
        "model-too-large": Case(  # an unstaged root: without the bound this fails on the data, not in torch
            "ddp-tutorial", ["train", *data, "--root", str(p["empty"]), "--hidden", "65536", "--num-layers", "64"],
            both=("--num-layers 64", "--hidden 65536", "GiB"), en=("parameters",), tr=("parametre",)),
        "too-many-processes": Case(  # --epochs -1: without the bound this fails on --epochs, starting nothing
            "spawn", ["--nproc-per-node", "100000", *data, "--epochs", "-1"], both=("--nproc-per-node 100000",),
            en=("more than this machine can run",), tr=("çalıştırabileceğinden fazla",)),
        # Round 3: checkpoint directories (B01, B02, B04, D01), SLURM values (A01, A10, A13–A15)
        "checkpoint-is-a-named-pipe": Case(
            "ddp-tutorial", ["train", *data, "--checkpoint-dir", str(p["file"].with_name("ck-fifo")), "--resume"],
            both=(str(p["file"].with_name("ck-fifo") / "checkpoint.pt"), "FIFO"), en=("not a regular file",),
            tr=("sıradan bir dosya değil",)),
        "checkpoint-pt-is-a-directory": Case(
            "ddp-tutorial", ["train", *data, "--checkpoint-dir", str(p["file"].with_name("ck-dir"))],
            both=(str(p["file"].with_name("ck-dir") / "checkpoint.pt"),), en=("a directory, not a regular file",),
            tr=("bir dizin, sıradan bir dosya değil",)),
        "checkpoint-dir-is-a-dangling-link": Case(
            "ddp-tutorial", ["train", *data, "--checkpoint-dir", str(p["file"].with_name("ck-dangling"))],
            both=(str(p["file"].with_name("nowhere") / "deeper"), "--checkpoint-dir"), en=("does not exist",),
            tr=("var olmayan",)),
        "checkpoint-dir-in-use-by-another-run": Case(
            "ddp-tutorial", ["train", *data, "--checkpoint-dir", str(p["file"].with_name("ck-busy"))],
            both=(f"pid {p.get('other_run')}", "--checkpoint-dir"), en=("in use by another training",),
            tr=("başka bir eğitim tarafından kullanılıyor",)),
        "host-list-of-a-million-hosts": Case("train", data, dict(slurm, SLURM_JOB_NODELIST="n[0-999]x[0-999]"),
                                             both=("100000", "(1000000)"), en=("Malformed", "more than"),
                                             tr=("Hatalı", "düğümden fazla")),
        "preempt-signal-not-shorter-than-the-time-limit": Case(
            "ddp-tutorial", ["slurm", "render", "--time", "00:05:00", "--preempt-signal", "600", "--requeue"],
            both=("--preempt-signal 600", "--time 00:05:00"), en=("not shorter",), tr=("kısa değil",)),
        "slurm-wait-poll-0": Case("ddp-tutorial", ["slurm", "wait", "1", "--poll", "0"], both=("--poll 0",),
                                  en=("≥ 1",), tr=("1 veya daha büyük",)),
        "slurm-wait-poll-negative": Case("ddp-tutorial", ["slurm", "wait", "1", "--poll", "-1"],
                                         both=("--poll -1",), en=("number of seconds",), tr=("saniye değeri",)),
        "slurm-logs-tail-negative": Case("ddp-tutorial", ["slurm", "logs", "1", "--run-dir", str(p["empty"]),
                                                          "--tail", "-2"],
                                         both=("--tail -2",), en=("number of lines",), tr=("satır sayısı",)),
    }


CASE_NAMES = list(cases(dict(data="D", empty=Path("E"), file=Path("F"), busy_port=1, silent_port=2)))


# --------------------------------------------------------------------------------------
# Running a case in a forked child


def _start(case: Case, lang: str, log: Path) -> int:
    """Fork a child that runs the case's entry point in ``lang``, stdout and stderr into ``log``."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:  # the child: never returns into pytest
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.stdout = open(1, "w", closefd=False, buffering=1)
        sys.stderr = open(2, "w", closefd=False, buffering=1)
        for name in list(os.environ):
            if name in _LAUNCHER_VARIABLES or name.startswith(("SLURM_", "DDP_TUTORIAL_")):
                del os.environ[name]
        os.environ.update(case.env, DDP_TUTORIAL_LANG=lang)
        torch.set_num_threads(1)
        code = ENTRY_POINTS[case.entry](case.argv)
    except SystemExit as exit_:  # argparse
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # noqa: BLE001 - what an uncaught exception would do: traceback, exit 1
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _finish(pid: int, deadline: float) -> int:
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None  # it hung


@pytest.fixture(scope="module")
def outcomes(places):
    """Run every case in both languages, all at once: {(name, lang): (exit code or None, output)}."""
    logs = Path(tempfile.mkdtemp(dir=places["base"]))
    running = {}
    for name, case in cases(places).items():
        for lang in ("en", "tr"):
            log = logs / f"{len(running)}.log"
            running[name, lang] = (_start(case, lang, log), log)
    deadline = time.monotonic() + TIMEOUT
    return {key: (_finish(pid, deadline), log.read_text()) for key, (pid, log) in running.items()}


def _error_text(output: str, prefix: str) -> str:
    """The message: from the 'error:' / 'hata:' line (or 'error (rank N):') to the end of the output."""
    match = re.search(rf"^{prefix}(?: \(rank \d+\))?: ", output, flags=re.M)
    return output[match.start():] if match else ""


@pytest.mark.parametrize("name", CASE_NAMES)
def test_bad_input_gives_a_clear_bilingual_error(name, places, outcomes):
    case = cases(places)[name]
    if name == "gpus-requested-none-present" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    texts = {}
    for lang, prefix in (("en", "error"), ("tr", "hata")):
        code, output = outcomes[name, lang]
        assert code is not None, f"[{lang}] no exit within {TIMEOUT:.0f} s (a hang):\n{output}"
        assert code == 2, f"[{lang}] exit code {code}:\n{output}"
        assert "Traceback" not in output, f"[{lang}]\n{output}"
        text = _error_text(output, prefix)
        assert text, f"[{lang}] no '{prefix}:' line:\n{output}"
        for needle in case.both + getattr(case, lang):
            assert needle in text, f"[{lang}] {needle!r} not in:\n{text}"
        texts[lang] = text
    assert texts["en"] != texts["tr"]


def test_there_are_at_least_15_kinds(places):
    assert len(cases(places)) >= 15


def test_the_entry_points_behave_the_same(places, tmp_path):
    """The installed commands, in fresh interpreters, give what the forked main() gave."""
    bin_dir = Path(sys.executable).parent
    ddp_tutorial = str(bin_dir / "ddp-tutorial") if (bin_dir / "ddp-tutorial").exists() else None
    all_cases = cases(places)
    commands = {
        "batch-size-0": ([ddp_tutorial] if ddp_tutorial else [sys.executable, "-m", "ddp_tutorial"]),
        "rank-ge-world-size": [sys.executable, "-m", "ddp_tutorial.train"],
        "node-rank-ge-number-of-nodes": [sys.executable, "-m", "ddp_tutorial.spawn"],
    }
    runs = {}
    for name, command in commands.items():
        env = {k: v for k, v in os.environ.items()
               if k not in _LAUNCHER_VARIABLES and not k.startswith(("SLURM_", "DDP_TUTORIAL_"))}
        env.update(all_cases[name].env, DDP_TUTORIAL_LANG="tr")
        runs[name] = subprocess.Popen(command + all_cases[name].argv, env=env, cwd=tmp_path, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for name, process in runs.items():
        out, err = process.communicate(timeout=TIMEOUT)
        assert process.returncode == 2, f"{name}: {process.returncode}\n{out}{err}"
        for needle in all_cases[name].both + all_cases[name].tr:
            assert needle in err, f"{name}: {needle!r} not in {err}"


def test_sbatch_values_with_shell_metacharacters_are_refused_in_both_languages():
    """A job name is written on an #SBATCH line (no shell quoting there): metacharacters are refused.
    (Quoting of values in shell commands, with bash -n and a canary, is in tests/test_slurm_jobs.py.)"""
    from ddp_tutorial import slurm
    for value in ("x; touch /tmp/canary", "$(touch /tmp/canary)", "a'b", "two\nlines"):
        spec = slurm.JobSpec(job_name=value)
        with pytest.raises(TutorialError) as error:
            slurm.render(spec)
        en, tr = error.value.text("en"), error.value.text("tr")
        assert en != tr and "job_name" in en and "job_name" in tr
        assert repr(value) in en and repr(value) in tr
