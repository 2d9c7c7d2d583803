"""What one notebook call leaves on the kept engines, and what a bad call is told (hostile review, round 5:
IP02, IP03, IP05, IP06, IP09, IP10, IP11, IP16, IP18). Real local engines, real gloo, real helper processes."""

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from ddp_tutorial import ipp
from ddp_tutorial.config import TrainConfig
from ddp_tutorial.i18n import TutorialError
from ddp_tutorial.ipp import remote
from ddp_tutorial.supervisor import is_stopped
from engine_checks import alive, no_engines_left  # noqa: F401 - the autouse fixture


def total(env):
    import torch
    import torch.distributed as dist
    value = torch.ones(1)
    dist.all_reduce(value)
    return value.item()


def nap(env):
    import time
    time.sleep(0.1)


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_bad_time_limits_are_refused_before_any_engine_starts(lang, monkeypatch, capsys, tmp_path):
    """IP02, IP03, IP05: nan ran unbounded, "10" was a raw TypeError after the engines started, a bad
    pg_timeout killed both engines ("exited with code 2")."""
    monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
    script = tmp_path / "script.py"
    script.write_text("print('never')\n")
    calls = [(lambda value: ipp.run(nap, n=2, timeout=value), ("timeout=", "timeout=None")),
             (lambda value: ipp.run_script(script, n=2, timeout=value), ("timeout=", "timeout=None")),
             (lambda value: ipp.train(TrainConfig(), n=2, timeout=value), ("timeout=", "timeout=None")),
             (lambda value: ipp.run(nap, n=2, pg_timeout=value), ("pg_timeout=", "pg_timeout=60"))]
    began = time.monotonic()
    for call, (named, example) in calls:
        for value in (float("nan"), float("inf"), "10", -5, 0, True, [3]):
            with pytest.raises(TutorialError) as caught:
                call(value)
            text = str(caught.value)
            assert text.startswith(f"{named}{value!r}") and example in text and "\n" not in text, text
    with pytest.raises(TutorialError, match="pg_timeout="):
        ipp.run(nap, n=2, pg_timeout=None)
    assert ipp.current() is None and time.monotonic() - began < 5
    assert "ipyparallel" not in capsys.readouterr().out  # no engine was started


MOVES_AND_STARTS_HELPERS = '''
import os, subprocess, sys
folder = os.path.dirname(os.path.abspath(__file__))
rank = os.environ["RANK"]
# a helper in a session of its own (a child of the engine) …
helper = subprocess.Popen(["sleep", "600"], start_new_session=True)
# … and one whose parent has already exited (ppid 1 at once)
subprocess.run(["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $! > " + sys.argv[1] + ".orphan." + rank], check=True)
with open(sys.argv[1] + ".child." + rank, "w") as f:
    f.write(str(helper.pid))
os.chdir(os.path.join(folder, "..", "elsewhere"))  # a common last line: and the engine stays there
'''


def held_listeners(port):
    """(address, pid) of every socket listening on ``port``."""
    return [(c.laddr.ip, c.pid) for c in psutil.net_connections("tcp") if c.status == "LISTEN" and c.laddr.port == port]


def test_a_scripts_chdir_and_helpers_do_not_outlive_it(mnist_root, tmp_path, monkeypatch):
    """IP09: after a script's os.chdir, ipp.train's checkpoint went into the script's folder while the message
    named the notebook's; IP11: helpers a script started outlived ipp.stop(); IP06: rank 0's held port listened
    on every interface while the kernel idled."""
    for name in ("notebook", "later", "scripts", "elsewhere"):
        (tmp_path / name).mkdir()
    script = tmp_path / "scripts" / "moves.py"
    script.write_text(MOVES_AND_STARTS_HELPERS)
    monkeypatch.chdir(tmp_path / "notebook")
    pids = tmp_path / "pid"

    assert ipp.run_script(script, [str(pids)], n=2, keep=True) == [None, None]
    engines = ipp.current()
    assert engines.client[engines.ids].apply_sync(os.getcwd) == [str(tmp_path / "notebook")] * 2

    port = engines.client[engines.ids[0]].apply_sync(lambda: __import__("ddp_tutorial.ipp.held_port").ipp.held_port
                                                     ._HELD_STORE[0].port)
    assert held_listeners(port) == [("127.0.0.1", engines.pids[0])], held_listeners(port)

    monkeypatch.chdir(tmp_path / "later")  # the kernel moves on: a relative path is the kernel's
    config = TrainConfig(dataset="mnist", root=str(mnist_root), epochs=1, threads=1, train_subset=256,
                         evaluate=False, checkpoint_dir="ck")
    ipp.train(config, n=2, keep=True)
    assert (tmp_path / "later" / "ck" / "checkpoint.pt").is_file()
    assert not (tmp_path / "elsewhere" / "ck").exists() and not (tmp_path / "notebook" / "ck").exists()

    helpers = [int(Path(f"{pids}.{kind}.{rank}").read_text()) for kind in ("child", "orphan") for rank in (0, 1)]
    assert all(alive(pid) for pid in helpers)
    assert psutil.Process(helpers[2]).ppid() not in engines.pids  # the orphans: only the marker finds them
    ipp.stop()
    assert not [pid for pid in helpers if alive(pid)], "helpers a script started outlived ipp.stop()"


def test_a_script_that_exits_with_a_text_is_said_to_exit_with_it(tmp_path, monkeypatch):
    """IP10: sys.exit("could not find the data") was "exited with code could not find the data". What rank 1's
    engine runs, here in this process (the error's text is what the notebook shows)."""
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    script = tmp_path / "exit_msg.py"
    script.write_text("import sys\nsys.exit('could not find the data')\n")
    place = remote.Place(rank=1, world_size=2, local_rank=1, nproc_per_node=2, master_addr="127.0.0.1",
                         master_port=29500, lang="en", use_cuda=False)
    with pytest.raises(RuntimeError) as caught:
        remote.run_script_on_engine(str(script), [], place, False)
    assert str(caught.value) == f"the script {script} exited: could not find the data"
    script.write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(RuntimeError, match="exited with code 3$"):
        remote.run_script_on_engine(str(script), [], place, False)
    script.write_text("import sys\nsys.exit(None)\n")
    assert remote.run_script_on_engine(str(script), [], place, False) is None


def test_an_engine_stopped_between_calls_is_said_to_be_stopped(monkeypatch):
    """IP16: engine 0 SIGSTOPped between two calls was called dead ("Engine 0 died while running task") after
    37 s; now the next call names it stopped at once."""
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    engines = ipp.start(2)
    pids = [p.pid for p in engines.processes] + [engines.cluster.controller.pid]
    os.kill(engines.pids[0], signal.SIGSTOP)
    deadline = time.monotonic() + 10  # a loaded machine takes a moment to stop it
    while not is_stopped(engines.pids[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    began = time.monotonic()
    with pytest.raises(TutorialError) as caught:
        ipp.run(total, n=2, pg_timeout=10, timeout=120)
    assert time.monotonic() - began < 15
    text = str(caught.value)
    assert f"rank 0 (engine {engines.ids[0]}, pid {engines.pids[0]}) is stopped (SIGSTOP or Ctrl-Z)" in text, text
    assert "died" not in text, text
    assert ipp.current() is None and not [p for p in pids if alive(p)]


def test_a_bad_interface_name_is_named_with_its_variable(monkeypatch):
    """IP18: DDP_TUTORIAL_IFNAME=bogus0 gave gloo's "enforce fail … Unable to find address for: bogus0"."""
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr")
    monkeypatch.setenv("DDP_TUTORIAL_IFNAME", "bogus0")  # the engines inherit it
    ipp.start(2)
    with pytest.raises(TutorialError) as caught:
        ipp.run(total, n=2, pg_timeout=15)
    text = str(caught.value)
    assert "DDP_TUTORIAL_IFNAME=bogus0: bu makinede" in text and "(olanlar: " in text, text
    assert "enforce" not in text, text
    assert ipp.current() is None
