"""Local engines forked from the ranks' server (ddp_tutorial.ipp.forked): what ``python -m ipyparallel.engine``
gave them must still hold, and nothing may outlive the process that started them.

Real processes: the launcher is tests/helpers/forked_engines_probe.py, which starts ipyparallel's controller and
two forked engines without ipp.start's watchdog or atexit stop, so these tests see the launcher's own behaviour.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ddp_tutorial.ipp.engines import kill, with_helpers

PROBE = Path(__file__).resolve().parent / "helpers" / "forked_engines_probe.py"
GONE_WITHIN = 15.0


def _start(mode: str, tmp_path: Path):
    out = tmp_path / "engines.json"
    probe = subprocess.Popen([sys.executable, str(PROBE), mode, str(out)], cwd=tmp_path, start_new_session=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 150
    while not out.exists():
        if probe.poll() is not None or time.monotonic() > deadline:
            probe.kill()
            pytest.fail(f"the probe wrote nothing (exit {probe.poll()}): {probe.communicate()[0][-3000:]}")
        time.sleep(0.2)
    return probe, json.loads(out.read_text())


def _gone(pids, within=GONE_WITHIN):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        if not left:
            return []
        time.sleep(0.1)
    return left


def _cleanup(probe, seen):
    """SIGKILL the probe, the engines and the controller with its schedulers (they would be orphans, ppid 1)."""
    kill(with_helpers([probe.pid, *seen]))


def test_a_forked_engine_is_an_ipengine_that_ends_with_its_launcher(tmp_path):
    """What ipyparallel's launcher gives an engine: its arguments, a session of its own (the kernel's Ctrl-C is not
    its), the launcher's folder, and the launcher's environment at the moment of the start, not the server's. Then
    SIGKILL of the launcher (a kernel killed: no atexit, no watchdog here): the engines end with it (they wait for
    their launcher), and so does the server they were forked from."""
    probe, seen = _start("wait", tmp_path)
    pids = [engine["pid"] for engine in seen["engines"]]
    server = psutil.Process(pids[0]).ppid()
    try:
        assert server != seen["launcher"] and psutil.Process(server).ppid() == seen["launcher"], "not forked"
        for engine in seen["engines"]:
            assert engine["name"] == "ipengine" and engine["argv"][0] == "ipengine", engine
            assert engine["sid"] == engine["pid"], engine
            assert engine["cwd"] == str(tmp_path), engine
            assert engine["moment"] == "after the server started", engine
        probe.kill()
        probe.wait(timeout=30)
        assert not _gone(pids + [server]), "forked engines (or their server) outlived their launcher"
    finally:
        _cleanup(probe, pids + [server, seen["controller"]])


def test_a_launcher_that_exits_leaving_a_stopped_engine_ends_and_takes_it_along(tmp_path):
    """multiprocessing joins its children at the interpreter's exit: an engine among them, stopped (SIGSTOP) or
    merely left running, would hold the kernel's exit for good. The engines are not its children there; they end
    with the launcher, the stopped one too."""
    probe, seen = _start("leave", tmp_path)
    pids = [engine["pid"] for engine in seen["engines"]]
    try:
        probe.wait(timeout=60)
        assert probe.returncode == 0, probe.communicate()[0][-3000:]
        assert not _gone(pids), "engines outlived the launcher that exited"
    except subprocess.TimeoutExpired:
        pytest.fail("the launcher did not exit: it waits for the engines it left running")
    finally:
        _cleanup(probe, pids + [seen["controller"]])


UNGUARDED = """import sys
sys.path.insert(0, {helpers!r})
with open({runs!r}, "a") as f:
    f.write("ran\\n")
import forked_engines_probe
forked_engines_probe.main("once", {out!r})
"""


@pytest.mark.parametrize("how", ["file", "stdin"])
def test_a_script_without_a_main_guard_starts_its_engines_once(tmp_path, how):
    """multiprocessing runs the launcher's main module again in each child (as ``__mp_main__``): a script without
    ``if __name__ == "__main__":`` started its engines again inside every engine, and one read from stdin
    (``python - <<EOF``) could not start any ("No such file or directory: '<stdin>'"). An engine needs neither."""
    runs, out = tmp_path / "runs", tmp_path / "engines.json"
    script = UNGUARDED.format(helpers=str(PROBE.parent), runs=str(runs), out=str(out))
    if how == "file":
        (tmp_path / "driver.py").write_text(script)
        done = subprocess.run([sys.executable, "driver.py"], cwd=tmp_path, capture_output=True, text=True, timeout=180)
    else:
        done = subprocess.run([sys.executable, "-"], input=script, cwd=tmp_path, capture_output=True, text=True,
                              timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert runs.read_text() == "ran\n", "the script ran again in the engines"
    assert [engine["name"] for engine in json.loads(out.read_text())["engines"]] == ["ipengine"] * 2


def _my_pid(env):
    return os.getpid()


def test_a_python_not_checked_gets_ipyparallels_own_engines(monkeypatch):
    """Where the fork server's preparation was not checked (another CPython, another system), ipp starts
    ipyparallel's own engines, a fresh ``python -m ipyparallel.engine`` each, and runs on them as before."""
    from ddp_tutorial import ipp
    from ddp_tutorial.ipp import forked
    ipp.stop()
    monkeypatch.setattr(forked, "CHECKED_PYTHONS", ())
    engines = ipp.start(2)
    try:
        for pid in engines.pids:
            assert "ipyparallel.engine" in psutil.Process(pid).cmdline(), psutil.Process(pid).cmdline()
        assert ipp.run(_my_pid, n=2, keep=True) == engines.pids
    finally:
        ipp.stop()
