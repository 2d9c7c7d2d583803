"""The benchmark's contention mode: busy processes it starts and always stops, and the idle-vs-loaded
record it writes (no timing assertions: benchmarks are not tests)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from idx_files import write_mnist_like

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # benchmarks/ sits beside the package in the repository; it is not installed

from benchmarks.contention import busy_processes  # noqa: E402
from ddp_tutorial import figures, i18n  # noqa: E402


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped) counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_busy_processes_spin_and_are_stopped_on_leaving():
    with busy_processes(2, seconds=60) as pids:
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        deadline = time.monotonic() + 60  # a loaded machine starts interpreters slowly
        while not all(_cpu_seconds(p) > 0.2 for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(_cpu_seconds(p) > 0.2 for p in pids)  # they really burn CPU
    assert not any(_alive(p) for p in pids)


def test_busy_processes_are_stopped_by_an_error_and_end_by_themselves():
    with pytest.raises(KeyboardInterrupt):
        with busy_processes(1, seconds=60) as pids:
            raise KeyboardInterrupt  # what Ctrl-C raises in the benchmark
    assert not _alive(pids[0])
    # Bounded in time: even a busy process nobody stops ends after its deadline.
    with busy_processes(1, seconds=0.5) as pids:
        deadline = time.monotonic() + 30
        while _alive(pids[0]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pids[0])


def test_sigterm_to_the_benchmark_stops_its_busy_processes(tmp_path):
    script = ("import sys, time; sys.path.insert(0, %r)\n"
              "from benchmarks.contention import busy_processes\n"
              "with busy_processes(2, seconds=120) as pids:\n"
              "    print(*pids, flush=True)\n"
              "    time.sleep(120)\n") % str(REPO)
    child = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in child.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


@pytest.mark.timeout(600)
def test_contention_mode_records_idle_and_loaded_for_package_and_seed(tmp_path):
    root = write_mnist_like(tmp_path / "data", "mnist", n_train=512, n_test=128, seed=0)
    out, figure = tmp_path / "contention.json", tmp_path / "fig.png"
    env = dict(os.environ, PYTHONUNBUFFERED="1", DDP_TUTORIAL_LANG="tr")
    done = subprocess.run([sys.executable, "-m", "benchmarks.throughput", "--contention", "1", "--dataset", "mnist",
                           "--root", str(root), "--world", "1", "--repeats", "1", "--threads", "1",
                           "--json", str(out), "--figure", str(figure), "--quiet"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=580)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert "table" not in report and "scaling" not in report  # --contention alone measures only that
    contention = report["contention"]
    assert contention["busy"] == 1
    for variant in ("package", "seed"):
        for condition in ("idle", "loaded"):
            row = contention["rows"][variant][condition]
            assert row["samples_per_second"] > 0 and row["repeats"] == 1
            (run,) = contention["runs"][variant][condition]
            assert run["condition"] == condition and run["samples"] == 512 and run["load_before"] is not None
    ratios = contention["ratios"]
    assert ratios["loaded_over_idle"] == pytest.approx(contention["rows"]["package"]["loaded"]["samples_per_second"]
                                                       / contention["rows"]["package"]["idle"]["samples_per_second"])
    assert set(contention["goals"]) == {"loaded_over_idle", "package_over_seed_loaded"}
    assert i18n.t("bench.goal.loaded_over_idle", lang="tr") in done.stdout  # the report, in Turkish
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the contention figure (no scaling figure here)
    (fig,) = figures.report_figures(report, lang="en")
    assert fig.axes[0].get_title() == i18n.t("plot.title_contention", lang="en")
    assert [tick.get_text() for tick in fig.axes[0].get_xticklabels()] == [
        i18n.t("plot.idle", lang="en"), i18n.t("plot.loaded", lang="en", busy=1)]
