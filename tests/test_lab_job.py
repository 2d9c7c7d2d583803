"""The attendee's JupyterLab as a SLURM job (issue 34 item 3; review N7): one start script,
``scripts/lab_job.sh``, under ``slurm/lab.sbatch``, our Open OnDemand app (``ondemand/ddp_tutorial/``)
and TRUBA's *Custom* app (``ondemand/truba/bashrc.sh``).

The lab test renders the OnDemand app's ``template/script.sh.erb`` and ``submit.yml.erb`` with Ruby's
ERB (as OnDemand does: ``tests/helpers/ood_render.rb``), submits exactly that script with the rendered
sbatch options to the two-node SLURM lab, reads the tunnel/URL lines from the job's log, opens the
URL in Chromium through a stand-in for the printed ``ssh -N -L`` (``tests/helpers/tunnel.py``), runs
All on notebook 00 (plus one cell that starts SLURM engines from the kernel, as 05 does), then
``scancel``s the lab job: within 10 s no JupyterLab, kernel, controller, engine or watchdog process
is left on the lab's nodes and the engine job is gone from the queue.

Without Ruby, Chromium or Playwright the tests skip with the reason (fail under ``CI=true``).

    .venv/bin/python -m pytest -q tests/test_lab_job.py
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
APP = REPO / "ondemand" / "ddp_tutorial"
HELPERS = REPO / "tests" / "helpers"
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
LAB_WORDS = ("jupyter", "ipykernel", "ipengine", "ipcontroller", "ipyparallel", "watchdog.py")


def _need(what: str, reason: str):
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{what} is required under CI: {reason}")
    pytest.skip(f"{what}: {reason}")


def render(template: Path, values: dict) -> str:
    """One ERB file of the OnDemand app, rendered by Ruby as OnDemand renders it."""
    if shutil.which("ruby") is None:
        _need("ruby", "renders the OnDemand app's ERB files (apt-get install ruby)")
    proc = subprocess.run(["ruby", str(HELPERS / "ood_render.rb"), str(template), json.dumps(values)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def sbatch_options(gpus: int, reservation: str = "", cpus: int = 4) -> list:
    rendered = yaml.safe_load(render(APP / "submit.yml.erb", {"ddp_cpus": str(cpus), "ddp_gpus": str(gpus),
                                                               "ddp_reservation": reservation}))
    assert rendered["batch_connect"]["template"] == "basic"
    return rendered["script"]["native"]


def test_every_way_runs_the_one_start_script():
    """slurm/lab.sbatch and the OnDemand template both exec scripts/lab_job.sh; the form offers
    0/1/2 GPUs, and they reach sbatch as --gres only when asked for."""
    assert 'exec bash "${DDP_TUTORIAL_CHECKOUT:-$SLURM_SUBMIT_DIR}/scripts/lab_job.sh"' in (
        REPO / "slurm" / "lab.sbatch").read_text()
    script = render(APP / "template" / "script.sh.erb", {
        "ddp_lang": "tr", "ddp_profile": "akya-cuda", "ddp_venv": "~/class env", "ddp_root": "",
        "ddp_checkout": "/x/it's here"})
    assert script.rstrip().endswith('exec bash "$checkout/scripts/lab_job.sh"')
    out = subprocess.run(["bash", "-c", script.replace('exec bash "$checkout/scripts/lab_job.sh"',
                                                       'echo "$checkout|$DDP_TUTORIAL_VENV|${DDP_TUTORIAL_ROOT-unset}|'
                                                       '$DDP_TUTORIAL_LANG|$DDP_TUTORIAL_SLURM_PROFILE"')],
                         capture_output=True, text=True, env=dict(os.environ, HOME="/home/u"), check=True).stdout
    assert out.strip() == "/x/it's here|/home/u/class env|unset|tr|akya-cuda"
    form = yaml.safe_load((APP / "form.yml").read_text())
    assert [o[1] for o in form["attributes"]["ddp_gpus"]["options"]] == ["0", "1", "2"]
    assert {"bc_num_hours", "bc_queue", "bc_account", "ddp_lang", "ddp_venv", "ddp_root",
            "ddp_profile", "ddp_reservation"} <= set(form["form"])
    assert not any(o.startswith("--gres") for o in sbatch_options(0))
    assert "--gres=gpu:2" in sbatch_options(2, "ws") and "--reservation=ws" in sbatch_options(2, "ws")


def test_the_custom_app_bashrc_block(tmp_path):
    """TRUBA's *Custom* app: the ~/.bashrc block exports the class environment, data root and
    language inside a job only, and makes the workshop copy."""
    block = (REPO / "ondemand" / "truba" / "bashrc.sh").read_text()
    venv = REPO / ".venv"
    block = (block.replace("DDP_CLASS_VENV=/arf/home/INSTRUCTOR/ddp/venv", f"DDP_CLASS_VENV={venv}")
             .replace("DDP_CHECKOUT=$HOME/ddp-tutorial", f"DDP_CHECKOUT={REPO}")
             .replace("DDP_WORK=$HOME/ddp-tutorial/workshop", f"DDP_WORK={tmp_path / 'workshop'}"))
    show = 'echo "$DDP_TUTORIAL_VENV|$DDP_TUTORIAL_ROOT|$DDP_TUTORIAL_LANG|$(command -v jupyter)"'
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDP_TUTORIAL_", "SLURM_"))}
    outside = subprocess.run(["bash", "-c", block + "\n" + show], capture_output=True, text=True,
                             env=dict(env, HOME=str(tmp_path)), check=True).stdout
    assert outside.startswith("||"), outside  # a login shell outside a job: nothing changes
    inside = subprocess.run(["bash", "-c", block + "\n" + show], capture_output=True, text=True,
                            env=dict(env, HOME=str(tmp_path), SLURM_JOB_ID="7"), check=True).stdout
    assert inside.strip() == f"{venv}|{tmp_path}/ddp-data|tr|{venv}/bin/jupyter", inside
    assert sorted(p.name for p in (tmp_path / "workshop" / "tr").iterdir()) == sorted(
        p.name for p in (REPO / "notebooks" / "tr").glob("*.ipynb"))
    lines = (REPO / "ondemand" / "truba" / "bashrc.sh").read_text().splitlines()
    code = [re.sub(r"\s+# .*$", "", line) for line in lines if line.strip() and not line.lstrip().startswith("#")]
    for page in ("ondemand.md", "ondemand.tr.md"):  # the pages show exactly this block
        assert "\n".join(code) in (REPO / "docs" / page).read_text(), f"docs/{page} shows another ~/.bashrc block"


GUARDED_KERNEL = """
import subprocess, sys, time
from ddp_tutorial.ipp.watchdog import Guard
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
guard = Guard([child.pid], job_id="4242")
print(child.pid, guard.process.pid, flush=True)
time.sleep(120)
"""


def test_the_watchdog_ends_the_engine_job_on_sigterm(tmp_path):
    """The end of an OnDemand session's job (scancel, walltime) is SIGTERM to every process of it,
    the watchdog's too (review N7): the watchdog first ends what it guards and cancels the engine
    job, whose id the kernel also wrote to $DDP_TUTORIAL_ENGINE_JOBS. ``scancel`` here is a stand-in
    that records its arguments (the real one on the lab: the test below)."""
    import psutil
    bin_dir, called, jobs = tmp_path / "bin", tmp_path / "scancel-called", tmp_path / "engine-jobs"
    bin_dir.mkdir()
    (bin_dir / "scancel").write_text(f'#!/bin/sh\necho "$@" >> {called}\n')
    (bin_dir / "scancel").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", DDP_TUTORIAL_ENGINE_JOBS=str(jobs))
    kernel = subprocess.Popen([sys.executable, "-c", GUARDED_KERNEL], stdout=subprocess.PIPE, text=True, env=env)
    try:
        child_pid, watchdog_pid = map(int, kernel.stdout.readline().split())
        assert jobs.read_text() == "4242\n"
        time.sleep(0.5)  # the watchdog has read its targets
        os.kill(watchdog_pid, signal.SIGTERM)
        began = time.monotonic()
        while psutil.pid_exists(child_pid) and psutil.Process(child_pid).status() != psutil.STATUS_ZOMBIE \
                and time.monotonic() - began < 10:
            time.sleep(0.05)
        assert called.read_text().split() == ["4242"]
        assert not psutil.pid_exists(child_pid) or psutil.Process(child_pid).status() == psutil.STATUS_ZOMBIE
    finally:
        kernel.kill()
        kernel.wait()


# ----------------------------------------------------------------------------- the lab test
def _net_inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def lab_processes(lab) -> list[str]:
    """Processes on the lab's nodes (their network namespaces) that belong to a JupyterLab session."""
    nodes = {_net_inode(f"/run/netns/{ns}") for ns in lab.node_ns.values()} - {None}
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if _net_inode(f"/proc/{pid}/ns/net") not in nodes:
            continue
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(w in args for w in LAB_WORDS):
            found.append(f"{pid} {args.strip()[:140]}")
    return found


def _wait_for(what: str, ok, timeout: float, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = ok()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; job log:\n"
                         f"{log.read_text(errors='replace')[-3000:] if log.exists() else '-'}")


class Tunnel:
    """``ssh -N -L PORT:NODE:PORT``: 127.0.0.1:PORT here, NODE:PORT as the login node reaches it."""

    def __init__(self, lab, node: str, port: int):
        hosts = dict(reversed(line.split()[:2]) for line in lab.path("etc", "hosts").read_text().splitlines()
                     if line.strip())
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.listener.bind(("127.0.0.1", port))  # the printed port, as ssh -L would use it
        except OSError:
            self.listener.bind(("127.0.0.1", 0))      # taken here: any port does for the test
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        fd = self.listener.fileno()
        self.proc = subprocess.Popen(
            lab.login_command([sys.executable, "-I", str(HELPERS / "tunnel.py"), str(fd), hosts[node], str(port)]),
            pass_fds=(fd,), env=lab.env, stdin=subprocess.DEVNULL)

    def close(self):
        self.proc.kill()
        self.proc.wait(10)
        self.listener.close()


def _run_all(page, shots: Path, budget: float = 240) -> str:
    """Run → Run All Cells on the open notebook; wait until no cell is queued or running."""
    panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    panel.locator(".jp-Cell").first.wait_for(timeout=90_000)
    page.wait_for_timeout(1500)
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile("^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Run All Cells$")).first.click()
    began, started, idle = time.monotonic(), False, 0
    while time.monotonic() - began < budget:
        busy = any("*" in p for p in panel.locator(".jp-CodeCell .jp-InputPrompt").all_text_contents())
        started = started or busy
        idle = 0 if busy else idle + 1
        if started and idle >= 5:
            break
        page.wait_for_timeout(400)
    page.screenshot(path=str(shots / "lab-job-00-finished.png"), full_page=True)
    print(f"Run All on 00 took {time.monotonic() - began:.0f} s")
    return panel.text_content() or ""


@pytest.mark.slurm
@pytest.mark.browser
@pytest.mark.timeout(480)
def test_the_lab_job_in_chromium_ends_with_its_allocation(slurm_cluster, tmp_path):
    lab = slurm_cluster
    if not os.access(CHROMIUM, os.X_OK):
        _need("chromium", f"{CHROMIUM} not found (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _need("playwright", "the Python package is not installed (pip install playwright)")
    # The plain batch job is accepted as it stands (the same start script; not started twice here).
    lab.run(["sbatch", "--test-only", "slurm/lab.sbatch"], cwd=REPO)

    data_root = os.environ.get("DDP_TUTORIAL_ROOT") or str(REPO / ".data")
    script = tmp_path / "script.sh"
    script.write_text(render(APP / "template" / "script.sh.erb", {
        "ddp_lang": "en", "ddp_profile": "generic", "ddp_venv": str(REPO / ".venv"), "ddp_root": data_root,
        "ddp_checkout": str(REPO)}))
    work = REPO / "workshop" / f"lab-job-test-{secrets.token_hex(4)}"
    log = tmp_path / "lab.out"
    # bc_num_hours and the job's name/output are what OnDemand itself adds to the rendered options
    options = sbatch_options(0) + ["--time=01:00:00", "--job-name=ood-ddp-lab", f"--output={log}"]
    env = dict(lab.env, DDP_TUTORIAL_WORK=str(work))
    submitted = subprocess.run(["sbatch", "--parsable", *options, str(script)], env=env, cwd=tmp_path,
                               capture_output=True, text=True, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    tunnel = None
    try:
        text = _wait_for("the URL line", lambda: re.search(
            r"ssh -N -L (\d+):(\S+):\1 \S+@\S+\n== then open: (http://localhost:\d+/lab/tree/00_setup\.ipynb\?token=\w+)",
            log.read_text(errors="replace") if log.exists() else ""), 180, log)
        port, node, url = int(text.group(1)), text.group(2), text.group(3)
        assert node in lab.node_names, text.group(0)
        # A last cell starts engines through SLURM from the kernel (as 05 does) and leaves them running.
        notebook_path = work / "en" / "00_setup.ipynb"
        notebook = json.loads(notebook_path.read_text(encoding="utf-8"))
        notebook["cells"].append({
            "cell_type": "code", "execution_count": None, "id": "lab-job-test-engines", "metadata": {}, "outputs": [],
            "source": f"engines_left_running = ipp.start_slurm(nodes=1, engines_per_node=1, "
                      f"run_dir={str(tmp_path / 'engines')!r}, time_limit='00:10:00')"})
        notebook_path.write_text(json.dumps(notebook, ensure_ascii=False, indent=1), encoding="utf-8")
        tunnel = Tunnel(lab, node, port)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(url.replace(f"localhost:{port}", f"localhost:{tunnel.port}"))
                shown = _run_all(page, tmp_path)
            finally:
                browser.close()
        assert "'sum': 2" in shown, f"00's engine cell did not all-reduce on two engines: {shown[-3000:]}"
        assert "Traceback" not in shown, shown[-3000:]
        engines = [j for j in lab.queue() if j != job]
        assert engines, "the kernel started no SLURM engine job: the check below would prove nothing"
        before = lab_processes(lab)
        assert any("ipengine" in p or "ipyparallel" in p for p in before) and any("jupyter" in p for p in before)

        lab.run(["scancel", job])
        cancelled = time.monotonic()
        left, queued = before, engines
        while (left or queued) and time.monotonic() - cancelled < 10:
            time.sleep(0.25)
            left, queued = lab_processes(lab), [j for j in lab.queue() if j in engines + [job]]
        print(f"{len(before)} session process(es) and engine job(s) {engines} before scancel; "
              f"{len(left)} process(es), jobs {queued} left after {time.monotonic() - cancelled:.1f} s")
        assert not left, f"processes left 10 s after scancel: {left}"
        assert not queued, f"jobs still in the queue 10 s after scancel: {queued}"
        assert "cancelling the engine jobs" in log.read_text(errors="replace")
        # ipyparallel's file of the kernel's SLURM cluster goes too (the watchdog removes it): left behind, it made
        # every later JupyterLab (its ipyparallel extension) create a `log` folder in the attendee's working copy.
        security = Path(os.path.expanduser("~/.ipython/profile_default/security"))
        stale = [f.name for f in security.glob("cluster-*.json")
                 if any(f'"job_id": "{j}"' in f.read_text(errors="replace") for j in engines)]
        assert not stale, f"cluster files of the cancelled engine jobs {engines} left: {stale}"
    finally:
        if tunnel:
            tunnel.close()
        lab.run(["scancel", job], check=False)
        shutil.rmtree(work, ignore_errors=True)
