"""Checkpoint directories under hostile conditions (round 3 of the sweep): one run per directory
(D01), a named pipe or a directory where ``checkpoint.pt`` should be (B01, B02), a dangling link as
the directory (B04), the right keys with the wrong types (B05), a full disk (D03) and the English
fragments that leaked into Turkish messages (G01–G03). Real processes, real files, every wait bounded.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ddp_tutorial import checkpoint as ckpt
from ddp_tutorial.i18n import TutorialError

REPO = Path(__file__).resolve().parents[1]
EXPECT = dict(shape=[4, 784, 128, 10], world_size=1, batch_size=32, seed=0, dataset="mnist", train_subset=None,
              optimizer_kind="adam", lr=1e-3)


def _state(**changes):
    state = dict(format_version=ckpt.FORMAT_VERSION, model={}, optimizer={}, epoch=1, step=0,
                 shape=list(EXPECT["shape"]), world_size=1, batch_size=32, seed=0, dataset="mnist",
                 train_subset=None, optimizer_kind="adam", rng=torch.get_rng_state())
    state.update(changes)
    return state


def _in_child(function, seconds: float):
    """Run ``function()`` in a forked child; its exception's key, or "hung" past ``seconds``."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child never returns into pytest
        os.close(read)
        try:
            function()
            answer = "returned"
        except TutorialError as error:
            answer = error.key
        except BaseException as error:  # noqa: BLE001
            answer = type(error).__name__
        os.write(write, answer.encode())
        os._exit(0)
    os.close(write)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
        time.sleep(0.05)
    else:
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read)
            return "hung"
    answer = os.read(read, 1000).decode()
    os.close(read)
    return answer


def test_resume_from_a_named_pipe_is_refused_not_a_hang(tmp_path):
    """B01: torch.load on a FIFO blocked for ever, on every rank, before any collective timeout."""
    os.mkfifo(tmp_path / ckpt.CHECKPOINT_NAME)
    assert _in_child(lambda: ckpt.load_checkpoint(tmp_path, EXPECT), 20) == "ckpt_guard.not_regular"
    assert _in_child(lambda: ckpt.ensure_writable(tmp_path), 20) == "ckpt_guard.not_regular"


def test_a_directory_named_checkpoint_pt_is_refused_at_the_start(tmp_path):
    """B02: it was found only when the first epoch's checkpoint failed."""
    (tmp_path / ckpt.CHECKPOINT_NAME).mkdir()
    with pytest.raises(TutorialError) as caught:
        ckpt.ensure_writable(tmp_path)
    assert caught.value.key == "ckpt_guard.not_regular" and "directory" in str(caught.value)
    ckpt.hold(tmp_path).release()  # the refused start gave its lock back
    ckpt.release(tmp_path)


def test_a_dangling_link_as_checkpoint_dir_is_named(tmp_path, monkeypatch):
    """B04: it said 'File exists'."""
    link = tmp_path / "dangling"
    link.symlink_to("/nonexistent/deeper")
    for lang, words in (("en", "does not exist"), ("tr", "var olmayan")):
        monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
        with pytest.raises(TutorialError) as caught:
            ckpt.ensure_writable(link)
        assert words in str(caught.value) and "/nonexistent/deeper" in str(caught.value)


HOLDER = """
import sys, time
from pathlib import Path
from ddp_tutorial import checkpoint
folder = Path(sys.argv[1])
checkpoint.ensure_writable(folder)
(folder / ".checkpoint-inflight.tmp").write_bytes(b"half a checkpoint")  # what a save is writing
print("ready", flush=True)
time.sleep(300)
"""


def test_a_second_run_on_the_same_checkpoint_dir_is_refused_and_deletes_nothing(tmp_path, monkeypatch):
    """D01: the second run deleted the first one's in-flight temporary file, and overwrote its checkpoint."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              cwd=REPO)
    try:
        assert holder.stdout.readline().strip() == "ready"
        inflight = tmp_path / ".checkpoint-inflight.tmp"
        for lang, words in (("en", "in use by another training"), ("tr", "başka bir eğitim tarafından")):
            monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
            with pytest.raises(TutorialError) as caught:
                ckpt.ensure_writable(tmp_path)
            text = str(caught.value)
            assert words in text and f"pid {holder.pid}" in text and socket.gethostname() in text, text
            assert inflight.exists(), "the second run deleted the first one's in-flight file"
        holder.kill()  # SIGKILL: no clean-up runs, the kernel drops the lock
        holder.wait(timeout=30)
        ckpt.ensure_writable(tmp_path)  # a dead holder never blocks …
        assert not inflight.exists()   # … and what it left is a leftover now
        ckpt.release(tmp_path)
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_the_lock_is_reentrant_in_a_process_and_released(tmp_path):
    with ckpt.lock(tmp_path) as taken:
        assert taken.held
        assert ckpt.ensure_writable(tmp_path) == tmp_path  # the same process: the same lock
    probe = subprocess.run([sys.executable, "-c", "import sys; from ddp_tutorial import checkpoint as c;"
                            " c.ensure_writable(sys.argv[1]); print('got it')", str(tmp_path)],
                           capture_output=True, text=True, timeout=120, cwd=REPO)
    assert "got it" in probe.stdout, probe.stderr  # released at the end of the block


TRAIN = ["--dataset", "mnist", "--device", "cpu", "--threads", "1", "--train-subset", "256", "--batch-size", "32",
         "--no-eval", "--no-progress"]


def test_two_real_trainings_on_one_checkpoint_dir(mnist_root, tmp_path):
    """The sweep's D01, with the real command: the second training is refused, naming the first."""
    env = dict(os.environ, DDP_TUTORIAL_LANG="en")
    folder = tmp_path / "ck"
    first = subprocess.Popen([sys.executable, "-m", "ddp_tutorial", "train", *TRAIN, "--root", str(mnist_root),
                              "--epochs", "100000", "--checkpoint-dir", str(folder)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and first.poll() is None:
            try:
                if json.loads((folder / ckpt.LOCK_NAME).read_text() or "{}").get("pid") == first.pid:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        assert first.poll() is None, first.stderr.read()
        second = subprocess.run([sys.executable, "-m", "ddp_tutorial", "train", *TRAIN, "--root", str(mnist_root),
                                 "--epochs", "1", "--checkpoint-dir", str(folder)],
                                capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180)
        assert second.returncode == 2, second.stdout + second.stderr
        assert f"pid {first.pid}" in second.stderr and "in use by another training" in second.stderr
        assert "Traceback" not in second.stderr
        assert first.poll() is None, "the first training died"
    finally:
        first.kill()
        first.wait(timeout=30)


@pytest.mark.parametrize("name,changes,field", [
    ("rng-float", dict(rng=torch.zeros(8)), "rng"),
    ("epoch-str", dict(epoch="1"), "epoch"),
    ("shape-int", dict(shape=5), "shape"),
    ("mid-epoch-no-partial-loss", dict(step=3, partial_loss=[], partial_steps=[]), "partial_loss"),
    ("missing-optimizer", "drop-optimizer", "optimizer"),
])
def test_the_right_keys_with_the_wrong_types_are_a_damaged_checkpoint(tmp_path, name, changes, field, monkeypatch):
    """B05a–d: TypeError / IndexError tracebacks in the resume; G02: '(missing fields)' under tr."""
    state = _state(**changes) if isinstance(changes, dict) else _state()
    if changes == "drop-optimizer":
        del state["optimizer"]
    torch.save(state, tmp_path / ckpt.CHECKPOINT_NAME)
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr")
    with pytest.raises(TutorialError) as caught:
        ckpt.load_checkpoint(tmp_path, EXPECT)
    text = str(caught.value)
    assert caught.value.key == "ckpt.corrupt" and field in text and "fields" not in text, text


def test_turkish_checkpoint_messages_have_no_english_fragments(tmp_path, monkeypatch):
    """G01 ('kayıtta model shape=…') and G03 ('aynı the optimizer değeriyle')."""
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr")
    torch.save(_state(shape=[4, 784, 64, 10]), tmp_path / ckpt.CHECKPOINT_NAME)
    with pytest.raises(TutorialError) as caught:
        ckpt.load_checkpoint(tmp_path, EXPECT)
    assert "model biçimi" in str(caught.value) and "model shape" not in str(caught.value)
    torch.save(_state(optimizer_kind="sgd"), tmp_path / ckpt.CHECKPOINT_NAME)
    with pytest.raises(TutorialError) as caught:
        ckpt.load_checkpoint(tmp_path, EXPECT)
    assert "the optimizer" not in str(caught.value) and "aynı --optimizer" in str(caught.value)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare -m")
def test_a_full_disk_is_named(tmp_path):
    """D03: '[enforce fail at inline_container.cc:672] . unexpected pos 945152 vs 945040'."""
    folder = tmp_path / "small"
    folder.mkdir()
    code = ("import sys, torch; from ddp_tutorial import checkpoint as c; from ddp_tutorial.i18n import TutorialError\n"
            "try:\n    c.save_checkpoint(sys.argv[1], {'model': {'w': torch.zeros(1 << 19)}})\n"
            "except TutorialError as e:\n    print(e)\n")
    out = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                          f"mount -t tmpfs -o size=1m tmpfs {folder} && {sys.executable} -c \"$0\" {folder}", code],
                         capture_output=True, text=True, timeout=120, cwd=REPO,
                         env=dict(os.environ, DDP_TUTORIAL_LANG="en"))
    assert "disk is full" in out.stdout, out.stdout + out.stderr
    assert not list(folder.glob(".checkpoint-*"))


def test_ck03_a_fifo_renamed_over_the_checkpoint_after_its_check_never_blocks_the_load(tmp_path):
    """CK03 (round 4): `_regular_or_absent` stat()ed a regular file, then torch.load opened the named pipe
    another process had renamed into place meanwhile, and blocked for ever. Here a thread swaps a FIFO
    and a good checkpoint over checkpoint.pt as fast as it can while a child loads 200 times."""
    import threading
    target = tmp_path / ckpt.CHECKPOINT_NAME
    good, pipe = tmp_path / "good.pt", tmp_path / "pipe"
    torch.save(_state(), good)
    stop = threading.Event()

    def swap():
        n = 0
        while not stop.is_set():
            n += 1
            if n % 2:
                os.mkfifo(pipe)
                os.replace(pipe, target)
            else:
                shutil.copyfile(good, tmp_path / "copy.pt")
                os.replace(tmp_path / "copy.pt", target)

    def loads():
        for _ in range(200):
            try:
                ckpt.load_checkpoint(tmp_path, EXPECT)
            except TutorialError as error:
                assert error.key == "ckpt_guard.not_regular", error.key

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    try:
        assert _in_child(loads, 30) == "returned"
    finally:
        stop.set()
        swapper.join()


def test_o02_a_checkpoint_from_before_optimizer_was_recorded_is_adams(tmp_path, monkeypatch):
    """O02 (round 4): a checkpoint without optimizer_kind (written before --optimizer existed; Adam)
    resumed with --optimizer sgd was accepted and failed at the first step: KeyError: 'momentum'."""
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    old = _state()
    del old["optimizer_kind"]
    torch.save(old, tmp_path / ckpt.CHECKPOINT_NAME)
    with pytest.raises(TutorialError) as caught:
        ckpt.load_checkpoint(tmp_path, dict(EXPECT, optimizer_kind="sgd"))
    assert caught.value.key == "ckpt.changed" and "optimizer_kind=adam" in str(caught.value)
    assert "--optimizer" in str(caught.value)
    assert ckpt.load_checkpoint(tmp_path, EXPECT)["epoch"] == 1  # resumed with Adam, as it was made
