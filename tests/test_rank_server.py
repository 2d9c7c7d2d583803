"""The ranks of a launch are forked from one server that imported torch once (ddp_tutorial.supervisor.rank_context).

What that must not change: each rank still starts with its launcher's environment of that moment, a
SIGUSR1 sent to the whole process group (SLURM signals every process of a step) reaches the ranks and
does not end the server, and nothing outlives the launcher. Real processes; the launcher is
tests/helpers/rank_server_probe.py, which imports no torch itself.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PROBE = Path(__file__).resolve().parent / "helpers" / "rank_server_probe.py"


def _session_processes(sid: int):
    left = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                left.append(int(entry.name))
    return left


def _run(mode: str, out: Path, **kwargs) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "RANK_SERVER_VARIABLE"}
    return subprocess.Popen([sys.executable, str(PROBE), mode, str(out)], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


def test_ranks_start_with_torch_imported_and_the_launchers_environment_of_that_moment(tmp_path):
    launcher = _run("start", tmp_path)
    output, _ = launcher.communicate(timeout=240)
    assert launcher.returncode == 0, output
    found = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert sorted(found) == ["1-0", "1-1", "2-0", "2-1", "3-0", "3-1"], output
    for name, rank in found.items():
        # torch is there, yet the rank has used almost no CPU: importing torch costs over a second of CPU
        assert rank["torch"] and rank["cpu"] < 0.5, (name, rank)
        assert rank["comm"] == f"rank{name[-1]}", (name, rank)  # named for top and ps, not "python"
        # the server imported torch with the cycle collector off, froze it, and forks ranks with the collector on
        assert rank["collector"] and rank["frozen"] > 100_000, (name, rank)
    # set before the first launch, changed after the server started, then removed: each launch's ranks see that moment's
    assert [found[f"{launch}-0"]["variable"] for launch in (1, 2, 3)] == ["first", "second", None]
    assert found["2-1"]["variable"] == "second" and found["3-1"]["variable"] is None
    time.sleep(0.5)
    assert _session_processes(launcher.pid) == [], "the server or a rank outlived its launcher"


def _wait_ready(launcher: subprocess.Popen, out: Path) -> None:
    deadline = time.monotonic() + 180
    while len(list(out.glob("ready-*"))) < 2 and launcher.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(list(out.glob("ready-*"))) == 2, launcher.communicate(timeout=30)[0]


def test_a_killed_launcher_takes_its_ranks_and_the_server_along_a_stopped_rank_too(tmp_path):
    """SIGKILL (the OOM killer, one task's scancel) leaves the launcher no time to stop anything: the ranks,
    whose parent is the server, must still end at once, rank 1 even while it is stopped (SIGSTOP), and the
    server's socket must not stay in /tmp."""
    launcher = _run("hold", tmp_path)
    _wait_ready(launcher, tmp_path)
    assert Path((tmp_path / "address").read_text()).is_socket()
    stopped = int((tmp_path / "ready-1").read_text())
    os.kill(stopped, signal.SIGSTOP)
    while Path(f"/proc/{stopped}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        time.sleep(0.01)  # stopped now, all its threads
    launcher.kill()
    launcher.wait(timeout=30)
    deadline = time.monotonic() + 10
    while _session_processes(launcher.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _session_processes(launcher.pid)
    assert not left, [Path(f"/proc/{pid}/cmdline").read_bytes()[:100] for pid in left]
    # nor in /tmp: the server's socket and the pymp-… folder multiprocessing made for the launcher, which was
    # given no time to remove them (a killed Jupyter kernel, SLURM's KillWait): the server did
    address = Path((tmp_path / "address").read_text())
    assert address.parent.name.startswith("pymp-") and not address.parent.exists(), sorted(address.parent.iterdir())


def test_a_launcher_killed_with_its_process_group_leaves_nothing_in_tmp(tmp_path):
    """As Jupyter kills a kernel that does not answer (SIGKILL to its whole process group): the ranks, which are
    in the launcher's group, end with it; the server has a group of its own (server_exit.py), so it lives the
    moment it takes to see them gone and to remove its socket and the pymp-… folder from /tmp."""
    launcher = _run("hold", tmp_path)
    _wait_ready(launcher, tmp_path)
    ranks = [int((tmp_path / f"ready-{r}").read_text()) for r in (0, 1)]
    assert {os.getpgid(pid) for pid in ranks} == {launcher.pid}  # the launcher's group (a session of its own here)
    os.killpg(launcher.pid, signal.SIGKILL)
    launcher.wait(timeout=30)
    deadline = time.monotonic() + 10
    while _session_processes(launcher.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _session_processes(launcher.pid), "the server or a rank outlived its launcher"
    address = Path((tmp_path / "address").read_text())
    assert not address.parent.exists(), sorted(address.parent.iterdir())


def test_sigusr1_to_the_whole_process_group_reaches_the_ranks_and_spares_the_server(tmp_path):
    launcher = _run("usr1", tmp_path)
    _wait_ready(launcher, tmp_path)
    os.killpg(launcher.pid, signal.SIGUSR1)  # as SLURM signals a step: every process, the server included
    output, _ = launcher.communicate(timeout=120)
    assert launcher.returncode == 0, output
    assert [(tmp_path / f"got-{r}").read_text() for r in (0, 1)] == ["True", "True"], output
    time.sleep(0.5)
    assert _session_processes(launcher.pid) == [], "the server or a rank outlived its launcher"


LAUNCH_AND_REPORT = """
import sys
from ddp_tutorial.cli import main
sys.argv = ["ddp-tutorial", "train", "--nproc-per-node", "2", "--epochs", "1", "--train-subset", "256", "--quiet",
            "--no-eval", "--dataset", "mnist", "--root", sys.argv[1], "--device", sys.argv[2]]
try:
    code = main()
except SystemExit as end:
    code = end.code
print("launcher imported torch:", "torch" in sys.modules, flush=True)
sys.exit(code)
"""


def test_a_launcher_of_several_ranks_never_imports_torch_itself(mnist_root):
    """Its ranks' server imports torch and counts the GPUs for the device rule (--device auto): the launcher, one
    per node under SLURM, stays a light process. The rule still refuses what it refused (--device cuda here)."""
    for device, code in (("auto", 0), ("cuda", 2)):  # (--device cpu asks nothing: no count, no torch either)
        env = dict(os.environ, DDP_TUTORIAL_LANG="en")
        run = subprocess.run([sys.executable, "-c", LAUNCH_AND_REPORT, str(mnist_root), device], env=env,
                             capture_output=True, text=True, timeout=240)
        assert run.returncode == code, (device, run.stdout, run.stderr)
        if code == 0:  # (a refusal may look at torch for its reason: gpu.why_no_gpu)
            assert "launcher imported torch: False" in run.stdout, (device, run.stdout, run.stderr)
    assert "no usable CUDA GPU" in run.stderr and "Traceback" not in run.stderr, run.stderr
