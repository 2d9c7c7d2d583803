"""The notebook's engines in a REAL Jupyter kernel (jupyter_client's KernelManager, as JupyterLab
uses it): engines die with the kernel — shut down, restarted or SIGKILLed — and the kernel shows
live progress while engines start and while ``ipp.train`` runs.

Each test starts its own kernel; every process the kernel started (engines, nannies, the
controller, the watchdog) is found by PID as the kernel's descendants and must be gone within
10 s of the kernel's end.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from ddp_tutorial.ipp.engines import still_running

jupyter_client = pytest.importorskip("jupyter_client")

REPO = Path(__file__).resolve().parents[1]
GONE_WITHIN = 10.0  # seconds


def start_kernel(tmp_path, **env):
    km = jupyter_client.KernelManager(kernel_name="python3")
    kernel_env = {**os.environ, "PYTHONPATH": str(REPO), **env}
    km.start_kernel(cwd=str(tmp_path), env=kernel_env)
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)
    return km, kc


def execute(kc, code, timeout=240):
    """Run ``code`` in the kernel; returns [(seconds since the request, iopub message)] up to idle."""
    began = time.monotonic()
    seen = []
    reply = kc.execute_interactive(code, timeout=timeout,
                                   output_hook=lambda msg: seen.append((time.monotonic() - began, msg)))
    assert reply["content"]["status"] == "ok", reply["content"]
    return seen


def stdout_of(seen):
    return "".join(m["content"]["text"] for _, m in seen
                   if m["msg_type"] == "stream" and m["content"]["name"] == "stdout")


def kernel_processes(km):
    """The kernel and all it started, as psutil handles (they remember their start time)."""
    kernel = psutil.Process(km.provisioner.pid)
    return kernel, kernel.children(recursive=True)


def seconds_until_gone(processes, limit=60.0):
    began = time.monotonic()
    while still_running(processes) and time.monotonic() - began < limit:
        time.sleep(0.05)
    return time.monotonic() - began


START_TWO = ("from ddp_tutorial import ipp\n"
             "engines = ipp.start(2)\n"
             "import json\n"
             "print('PIDS', json.dumps(engines.pids + [engines.cluster.controller.pid]))\n")


def kernel_with_two_engines(tmp_path):
    km, kc = start_kernel(tmp_path, CI="true")
    seen = execute(kc, START_TWO)
    pids = json.loads(stdout_of(seen).split("PIDS", 1)[1].strip().splitlines()[0])
    kernel, descendants = kernel_processes(km)
    assert set(pids) <= {p.pid for p in descendants}, (pids, descendants)
    assert len(descendants) >= 4  # two engines (+ nannies), the controller, the watchdog
    return km, kc, kernel, descendants


@pytest.mark.parametrize("how", ["shutdown", "restart", "sigkill"])
def test_engines_die_with_the_kernel(tmp_path, how, capsys):
    km, kc, kernel, descendants = kernel_with_two_engines(tmp_path)
    try:
        began = time.monotonic()
        if how == "shutdown":
            km.shutdown_kernel(now=False)  # JupyterLab's Kernel → Shut Down Kernel
        elif how == "restart":
            km.restart_kernel(now=False)   # Kernel → Restart Kernel
        else:
            os.kill(kernel.pid, signal.SIGKILL)  # no handler of the kernel runs
        gone = seconds_until_gone(descendants + ([kernel] if how != "restart" else []), limit=60)
        total = time.monotonic() - began
        left = still_running(descendants)
        with capsys.disabled():
            print(f"\n[{how}] every engine, nanny, controller gone {total:.1f} s after the request "
                  f"({gone:.1f} s of waiting)", file=sys.stderr)
        assert not left, f"{how}: processes left behind: {[(p.pid, p.name()) for p in left]}"
        assert total < GONE_WITHIN, f"{how}: took {total:.1f} s"
        if how == "restart":  # the new kernel works and starts fresh engines
            kc.wait_for_ready(timeout=120)
            execute(kc, "from ddp_tutorial import ipp\nprint(ipp.current())\n")
    finally:
        kc.stop_channels()
        if km.has_kernel:
            km.shutdown_kernel(now=True)
        for p in still_running(descendants):  # never leave anything, whatever the outcome
            p.kill()


def test_a_live_kernel_shows_progress_while_engines_start_and_train_runs(tmp_path, mnist_root):
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    km = jupyter_client.KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(tmp_path), env={**env, "PYTHONPATH": str(REPO)})
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        # Engine start: the count line is shown at once and updated in place while it runs.
        seen = execute(kc, "from ddp_tutorial import ipp\nengines = ipp.start(2)\n")
        end = seen[-1][0]
        shown = [(at, m) for at, m in seen if m["msg_type"] in ("display_data", "update_display_data")
                 and "engines registered" in m["content"]["data"].get("text/plain", "")]
        assert shown and shown[0][1]["msg_type"] == "display_data", seen
        assert any(m["msg_type"] == "update_display_data" for _, m in shown)
        assert shown[0][0] < end - 1.0, "the count appeared only at the end"
        assert shown[-1][1]["content"]["data"]["text/plain"] == "engines registered: 2/2"  # stored: no timing

        # Training: rank 0's lines and a progress widget arrive while the cell runs. Three epochs: epoch 1 lies
        # whole between epoch 0's loss line and the last epoch's bar (the order checked below).
        code = ("from ddp_tutorial.config import TrainConfig\n"
                f"results = ipp.train(TrainConfig(dataset='mnist', root={str(mnist_root)!r}, epochs=3,"
                " threads=1, batch_size=2), n=2, keep=True)\n"
                "print('ACC', results[0].test_accuracy)\n")
        seen = execute(kc, code)
        end = seen[-1][0]
        lines = [i for i, (at, m) in enumerate(seen)
                 if m["msg_type"] == "stream" and "loss at rank 0 is" in m["content"]["text"]]
        widgets = [i for i, (at, m) in enumerate(seen) if m["msg_type"] == "display_data"
                   and "application/vnd.jupyter.widget-view+json" in m["content"]["data"]]
        assert "loss at rank 1 is" not in stdout_of(seen) and "ACC" in stdout_of(seen)
        timeline = [(round(at, 2), m["msg_type"]) for at, m in seen]
        assert len(lines) == 3 and len(widgets) == 3, timeline  # one bar per epoch, drawn by ipywidgets (tqdm.auto)
        # Issue 39 item 2: the order is what is guaranteed, not seconds before the end (a faster CPU would not keep
        # those). Streamed, not only at the end: epoch 0's loss line reaches the kernel before the last epoch's bar
        # (an epoch is 1 024 steps of batch 2 per rank, each with a gloo all-reduce: far longer than the kernel's
        # 0.2 s look on any CPU). Epoch k's bar comes before epoch k's loss line (a bar and a line that reach the
        # kernel in one look are sent bar first).
        assert lines[0] < widgets[-1], timeline
        assert all(bar < line for bar, line in zip(widgets, lines)), timeline
        execute(kc, "ipp.stop()\n")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _is_engine(process) -> bool:
    """An engine: forked from the ranks' server (ipp/forked.py, named ipengine) or ``python -m ipyparallel.engine``."""
    try:
        return process.name() == "ipengine" or "ipyparallel.engine" in process.cmdline()
    except psutil.Error:
        return False


#: The kernel's own helpers, started once and ended with it: the server the engines and ranks are forked from
#: (ddp_tutorial.supervisor.rank_context) and multiprocessing's resource tracker.
KERNEL_HELPERS = ("from multiprocessing.forkserver import main", "from multiprocessing.resource_tracker import main")


def _is_kernel_helper(process) -> bool:
    try:
        return any(helper in " ".join(process.cmdline()) for helper in KERNEL_HELPERS) and process.name() != "ipengine"
    except psutil.Error:
        return False


def test_the_stop_button_while_engines_start_stops_what_was_started(tmp_path):
    """I01: KeyboardInterrupt during ipp.start() left the controller (9 processes), 2 engines and 2
    nannies running for good, unguarded; the next start built a second cluster."""
    km, kc = start_kernel(tmp_path, CI="true")
    kernel = psutil.Process(km.provisioner.pid)
    seen = {}
    try:
        # stop_on_error=False: the next request (the look at ipp.current() below) is not aborted. After an error
        # ipykernel 7 aborts the requests that reach it before its own "stop aborting" message, and on a loaded
        # machine the next one did ({'status': 'aborted'}).
        request = kc.execute("from ddp_tutorial import ipp\nengines = ipp.start(2)\n", stop_on_error=False)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # press the button once engines are being started
            seen.update({p.pid: p for p in kernel.children(recursive=True)})
            if any(_is_engine(p) for p in still_running(list(seen.values()))):
                break
            time.sleep(0.1)
        else:
            pytest.fail("no engine process appeared within 120 s")
        km.interrupt_kernel()
        while True:
            reply = kc.get_shell_msg(timeout=120)
            if reply["parent_header"].get("msg_id") == request:
                break
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt", reply
        began = time.monotonic()
        while time.monotonic() - began < GONE_WITHIN:  # what started after the press counts too
            seen.update({p.pid: p for p in kernel.children(recursive=True)})
            if not still_running(list(seen.values())):
                break
            time.sleep(0.1)
        left = [p for p in still_running(list(seen.values())) if not _is_kernel_helper(p)]
        assert not left, f"left behind: {[(p.pid, p.cmdline()[-2:]) for p in left]}"
        assert "CURRENT None" in stdout_of(execute(kc, "print('CURRENT', ipp.current())\n"))
        seen.update({p.pid: p for p in kernel.children(recursive=True)})
        km.shutdown_kernel(now=False)  # and the kernel's helpers end with the kernel
        seconds_until_gone(list(seen.values()), limit=GONE_WITHIN)
        left = still_running(list(seen.values()))
        assert not left, f"left behind by the kernel: {[(p.pid, p.cmdline()[-2:]) for p in left]}"
    finally:
        kc.stop_channels()
        if km.has_kernel:
            km.shutdown_kernel(now=True)
        for p in still_running(list(seen.values())):
            p.kill()


def test_a_dead_controller_leaves_no_scheduler_after_a_clean_shutdown(tmp_path):
    """I02: the controller's scheduler processes (ppid 1 once it died) survived the stop that follows
    (ipp.train stops the engines when it finds the controller dead; the guard is then released)."""
    km, kc, kernel, descendants = kernel_with_two_engines(tmp_path)
    try:
        controller = next(p for p in descendants if p.pid == int(stdout_of(execute(
            kc, "print('CONTROLLER', engines.cluster.controller.pid)\n")).split("CONTROLLER")[1].split()[0]))
        schedulers = controller.children(recursive=True)
        assert schedulers, "ipyparallel's controller started no scheduler process"
        controller.kill()
        controller.wait(timeout=30)
        execute(kc, "ipp.stop()\n")  # what ipp.train does when it finds the controller dead
        seconds_until_gone(schedulers, limit=GONE_WITHIN)
        left = still_running(schedulers)
        assert not left, f"left behind by ipp.stop(): {[(p.pid, p.cmdline()[-2:]) for p in left]}"
        km.shutdown_kernel(now=False)  # JupyterLab's Kernel → Shut Down Kernel
        seconds_until_gone(descendants, limit=GONE_WITHIN)
        left = still_running(descendants)
        assert not left, f"left behind: {[(p.pid, p.cmdline()[-2:]) for p in left]}"
    finally:
        kc.stop_channels()
        if km.has_kernel:
            km.shutdown_kernel(now=True)
        for p in still_running(descendants):
            p.kill()
