"""The one write rule of :mod:`ddp_tutorial.atomic`, on real files, links, pipes and devices.

Round 3 of the hostile sweep (C01/C02): as root, ``--json /dev/null`` turned ``/dev/null`` into a
0600 regular file and ``slurm render -o /dev/stdout`` replaced the ``/dev/stdout`` link. Device
files here are made in a temporary folder (``mknod``, root only) or inside a private mount
namespace (``unshare -m`` with a tmpfs over ``/dev``): the machine's own ``/dev`` is never touched,
whatever the code under test does.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ddp_tutorial import atomic, result
from ddp_tutorial.i18n import TutorialError

REPO = Path(__file__).resolve().parents[1]
ROOT = os.geteuid() == 0


def _mknod(path: Path, kind: int, major: int, minor: int) -> Path:
    if not ROOT:
        pytest.skip("making a device file needs root")
    os.mknod(path, kind | 0o666, os.makedev(major, minor))
    return path


def test_a_character_device_is_written_through_never_replaced(tmp_path):
    null = _mknod(tmp_path / "null", stat.S_IFCHR, 1, 3)  # a second /dev/null
    atomic.check_writable(null)
    atomic.write_json(null, {"secret": 1})
    assert stat.S_ISCHR(os.stat(null).st_mode)
    assert result.check_target(str(null)) == null  # J01: a writable device is a fine --json target
    assert [p.name for p in tmp_path.iterdir()] == ["null"]  # no temporary file left


def test_a_full_disk_names_the_file_that_could_not_be_written():
    """A write or fsync that fails for lack of space names no file; write_with names the target the caller
    gave, so every message built from the error says which file (round 5, DF01: it said `Cannot use ?`)."""
    with pytest.raises(OSError) as caught:
        atomic.write_with("/dev/full", lambda f: f.write(b"x" * 200_000))
    assert caught.value.errno == errno.ENOSPC
    assert caught.value.filename == "/dev/full"


def test_a_block_device_is_refused(tmp_path):
    disk = _mknod(tmp_path / "disk", stat.S_IFBLK, 7, 0)
    for call in (lambda: atomic.write_text(disk, "x"), lambda: atomic.check_writable(disk)):
        with pytest.raises(OSError) as caught:
            call()
        assert "block device" in caught.value.strerror
    assert stat.S_ISBLK(os.stat(disk).st_mode)


def test_a_symbolic_link_is_kept_and_its_target_written(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old\n")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert atomic.write_text(link, "new\n") == link
    assert link.is_symlink() and real.read_text() == "new\n"
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "made-by-the-write.json")
    atomic.write_text(dangling, "x\n")
    assert dangling.is_symlink() and (tmp_path / "made-by-the-write.json").read_text() == "x\n"
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(OSError) as caught:
        atomic.write_text(loop, "x")
    assert caught.value.errno == errno.ELOOP and loop.is_symlink()


def test_a_named_pipe_is_written_through_or_refused_at_once(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError) as caught:  # nobody reads: refused at once, never blocks
        atomic.write_text(fifo, "lost\n")
    assert caught.value.errno == errno.ENXIO and "named pipe" in caught.value.strerror
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()), daemon=True)
    reader.start()
    for _ in range(100):  # the reader opens the pipe: then the write goes through
        try:
            atomic.write_text(fifo, "through\n")
            break
        except OSError:
            threading.Event().wait(0.05)
    reader.join(timeout=10)
    assert got == ["through\n"] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(IsADirectoryError):
        atomic.write_text(tmp_path, "x")


def test_a_link_to_this_process_stdout_is_written_through(tmp_path):
    """The /dev/stdout case without touching /dev: a link to /proc/self/fd/1 in a temporary folder."""
    link = tmp_path / "out"
    link.symlink_to("/proc/self/fd/1")
    code = f"from ddp_tutorial import atomic; atomic.write_text({str(link)!r}, 'hello\\n')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "hello\n" and link.is_symlink()
    rendered = subprocess.run([sys.executable, "-m", "ddp_tutorial", "slurm", "render", "-o", str(link)],
                              capture_output=True, text=True, timeout=60, cwd=REPO)
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout.startswith("#!") and link.is_symlink()


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_new_files_are_readable_as_the_umask_allows(tmp_path, umask, mode):
    """P01: results were 0600 (mkstemp's mode) whatever the umask; now 0666 less the umask."""
    target = tmp_path / "r.json"
    code = (f"import os; os.umask({umask}); from ddp_tutorial import atomic; atomic.write_json({str(target)!r}, {{}});"
            f"atomic.write_text({str(tmp_path / 'job.sh')!r}, '#!/bin/sh\\n', mode=0o777)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=REPO)
    assert stat.S_IMODE(os.stat(target).st_mode) == mode
    assert stat.S_IMODE(os.stat(tmp_path / "job.sh").st_mode) == 0o777 & ~umask


def test_replacing_a_file_keeps_its_permissions(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("{}")
    target.chmod(0o640)
    atomic.write_json(target, {"a": 1})
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640


def test_check_target_refuses_a_block_device_in_the_users_language(tmp_path, monkeypatch):
    disk = _mknod(tmp_path / "disk", stat.S_IFBLK, 7, 0)
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr")
    with pytest.raises(TutorialError) as caught:
        result.check_target(str(disk))
    assert "blok aygıtı" in str(caught.value)


NAMESPACE_DEV = """
set -e
mount -t tmpfs -o mode=755 tmpfs /dev
mknod -m 666 /dev/null c 1 3; mknod -m 666 /dev/zero c 1 5
mknod -m 666 /dev/urandom c 1 9; mknod -m 666 /dev/random c 1 8
mkdir /dev/shm /dev/pts
ln -s /proc/self/fd /dev/fd; ln -s /proc/self/fd/0 /dev/stdin
ln -s /proc/self/fd/1 /dev/stdout; ln -s /proc/self/fd/2 /dev/stderr
"""


def _unshare_available() -> bool:
    if not ROOT or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True,
                          timeout=30).returncode == 0


@pytest.mark.skipif(not _unshare_available(), reason="needs root and unshare -m (a private mount namespace)")
def test_as_root_dev_null_and_dev_stdout_survive_the_cli(mnist_root, tmp_path):
    """The sweep's own commands, as root, in a private mount namespace with a tmpfs over /dev."""
    train = (f"{sys.executable} -m ddp_tutorial train --dataset mnist --root {mnist_root} --device cpu"
             " --threads 1 --train-subset 256 --batch-size 32 --epochs 1 --no-eval --no-progress --json /dev/null")
    script = NAMESPACE_DEV + f"""
cd {REPO}
{train} > {tmp_path}/train.log 2>&1
test -c /dev/null && echo NULL-IS-A-DEVICE
echo secret > /dev/null; test -z "$(cat /dev/null)" && echo NULL-IS-EMPTY
{sys.executable} -m ddp_tutorial slurm render -o /dev/stdout > {tmp_path}/job.sh
test -L /dev/stdout && echo STDOUT-IS-A-LINK
"""
    out = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                         capture_output=True, text=True, timeout=300)
    log = (tmp_path / "train.log").read_text() if (tmp_path / "train.log").exists() else ""
    assert out.returncode == 0, out.stdout + out.stderr + log
    for word in ("NULL-IS-A-DEVICE", "NULL-IS-EMPTY", "STDOUT-IS-A-LINK"):
        assert word in out.stdout, out.stdout + out.stderr + log
    assert (tmp_path / "job.sh").read_text().startswith("#!")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)  # and the machine's own, of course


def test_a_result_that_can_be_written_nowhere_is_printed_on_stderr(tmp_path):
    """D04: with the target and the fallback both unwritable (a file-size limit), only the digest survived."""
    code = ("from ddp_tutorial import result\nfrom ddp_tutorial.i18n import TutorialError\n"
            "r = result.TrainResult(rank=0, world_size=1, dataset='mnist', backend='gloo', device='cpu', seed=0,"
            " lr=0.001, batch_size=32, epochs=[0.5, 0.25], weights_sha256='abc')\n"
            f"try:\n    result.write({str(tmp_path / 'r.json')!r}, r)\nexcept TutorialError as e:\n"
            "    print('KEY', e.key)\n")
    limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))  # noqa: E731 - `ulimit -f`, as the sweep
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO,
                         preexec_fn=limit, env=dict(os.environ, DDP_TUTORIAL_LANG="en"))
    assert "KEY result.lost" in out.stdout, out.stdout + out.stderr
    printed = [line for line in out.stderr.splitlines() if line.startswith("{")]
    assert printed and json.loads(printed[0])["epochs"] == [0.5, 0.25]


@pytest.mark.skipif(not ROOT, reason="switching to another user needs root")
def test_a_user_may_send_the_result_to_dev_null():
    """J01: as an ordinary user `--json /dev/null` was refused ('Permission denied': a probe file in /dev)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: user 65534 (nobody), the package already imported; never returns into pytest
        os.close(read)
        try:
            os.setgid(65534)
            os.setuid(65534)
            answer = f"OK {result.check_target('/dev/null')}"
        except BaseException as error:  # noqa: BLE001
            answer = f"{type(error).__name__}: {error}"
        os.write(write, answer.encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    answer = os.read(read, 4000).decode()
    os.close(read)
    assert answer == "OK /dev/null", answer


def test_render_o_never_widens_the_permissions_of_a_script_it_replaces(tmp_path):
    """S15 (round 4): `slurm render -o` over a 0700 script, or through a link to a 0600 file, made it
    0755 (`mode=0o777` less the umask): a token given with --env became world-readable."""
    keep, secret, link = tmp_path / "keep.sh", tmp_path / "secret.sh", tmp_path / "link.sh"
    keep.write_text("x\n")
    keep.chmod(0o700)
    secret.write_text("export WANDB_API_KEY=old\n")
    secret.chmod(0o600)
    link.symlink_to(secret)
    for target in (keep, link):
        done = subprocess.run([sys.executable, "-m", "ddp_tutorial", "slurm", "render", "--template", "per-gpu",
                               "--env", "WANDB_API_KEY=abc123", "-o", str(target)], capture_output=True, text=True,
                              timeout=60, cwd=REPO, preexec_fn=lambda: os.umask(0o022))
        assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(keep.stat().st_mode) == 0o700
    assert link.is_symlink() and stat.S_IMODE(secret.stat().st_mode) == 0o700  # only the owner may run it
    assert "abc123" in secret.read_text()


def test_a_deeply_nested_result_file_is_one_message(tmp_path, monkeypatch):
    """J04 (round 4): a result file of 200 000 nested '[' gave a RecursionError traceback."""
    from ddp_tutorial import slurm
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    (tmp_path / "result-102.json").write_text("[" * 200_000)
    with pytest.raises(TutorialError) as caught:
        slurm.read_result(102, run_dir=str(tmp_path))
    assert caught.value.key == "slurm.bad_result" and "result-102.json" in str(caught.value)


def test_the_tail_of_a_big_log_is_read_from_its_end(tmp_path):
    """J05 (round 4): `slurm logs --tail 2` on a 303 MB log took 808 MB (the whole file read and split)."""
    import tracemalloc
    from ddp_tutorial import slurm
    line = b"NCCL INFO " + b"x" * 100 + b"\n"
    with open(tmp_path / "slurm-103.out", "wb") as log:
        for _ in range(30):
            log.write(line * 10_000)  # ≈ 33 MB
        log.write("ünlü satır 1\nlast line 2\n".encode())
    small = tmp_path / "small"
    small.mkdir()
    (small / "slurm-104.out").write_text("a\nb\nc\n")
    tracemalloc.start()
    try:
        text = slurm.read_log(103, run_dir=str(tmp_path), tail=2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert text == "ünlü satır 1\nlast line 2\n"
    assert peak < 4 * 1024 * 1024, peak
    assert slurm.read_log(104, run_dir=str(small), tail=5) == "a\nb\nc\n"
    assert slurm.read_log(104, run_dir=str(small), tail=1) == "c\n"
    assert slurm.read_log(103, run_dir=str(tmp_path), tail=3).startswith("NCCL INFO xxx")
