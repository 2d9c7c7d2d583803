"""The attendee's JupyterLab as a SLURM job (issue 34 item 3; review N7): one start script,
``scripts/lab_job.sh``, under ``slurm/lab.sbatch``, our Open OnDemand app (``ondemand/ddp_tutorial/``)
and TRUBA's *Custom* app (``ondemand/truba/bashrc.sh``).

The lab test renders the OnDemand app's ``template/script.sh.erb`` and ``submit.yml.erb`` with Ruby's
ERB (as OnDemand does: ``tests/helpers/ood_render.rb``) with the form's TRUBA day values (the site table's
``[day]``), submits exactly that script with the rendered sbatch options from the login node of the lab
that enforces TRUBA's written rules (``truba_lab``), reads the tunnel/URL lines from the job's log, opens
the URL in Chromium through a stand-in for the printed ``ssh -N -L`` (``tests/helpers/tunnel.py``), runs
All on notebook 00 (plus one cell that starts SLURM engines from the kernel in the class's shape, as 05
does, in the class's GPU reservation), then ``scancel``s the lab job: within 10 s no JupyterLab, kernel,
controller, engine or watchdog process is left on the lab's nodes and the engine job is gone from the queue.

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
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from ddp_tutorial import sites

import lab_ui

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
    sbatch_text = (REPO / "slurm" / "lab.sbatch").read_text()
    assert 'start=${DDP_TUTORIAL_CHECKOUT:-$SLURM_SUBMIT_DIR}/scripts/lab_job.sh' in sbatch_text
    assert sbatch_text.rstrip().endswith('exec bash "$start"')
    shown = ('echo "$checkout|$DDP_TUTORIAL_VENV|${DDP_TUTORIAL_ROOT-unset}|$DDP_TUTORIAL_LANG|'
             '$DDP_TUTORIAL_SLURM_PROFILE|${DDP_TUTORIAL_SLURM_ACCOUNT-unset}|${DDP_TUTORIAL_SLURM_RESERVATION-unset}|'
             '${DDP_TUTORIAL_SLURM_GPUS-unset}|$(env | grep -c ^SBATCH_)"')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDP_TUTORIAL_", "SBATCH_"))}
    for job, want in (({"bc_account": " ws-acct ", "ddp_job_reservation": "ws05", "ddp_job_gpus": "1"},
                       "ws-acct|ws05|1|0"),
                      ({"bc_account": "", "ddp_job_reservation": "", "ddp_job_gpus": ""}, "unset|unset|unset|0")):
        script = render(APP / "template" / "script.sh.erb", {
            "ddp_lang": "tr", "ddp_profile": "akya-cuda", "ddp_venv": "~/class env", "ddp_root": "",
            "ddp_checkout": "/x/it's here", **job})
        assert script.rstrip().endswith('exec bash "$checkout/scripts/lab_job.sh"')
        out = subprocess.run(["bash", "-c", script.replace('exec bash "$checkout/scripts/lab_job.sh"', shown)],
                             capture_output=True, text=True, env=dict(env, HOME="/home/u"), check=True).stdout
        assert out.strip() == f"/x/it's here|/home/u/class env|unset|tr|akya-cuda|{want}", out
    form = yaml.safe_load((APP / "form.yml").read_text())
    assert [o[1] for o in form["attributes"]["ddp_gpus"]["options"]] == ["0", "1", "2"]
    assert {"bc_num_hours", "bc_queue", "bc_account", "ddp_lang", "ddp_venv", "ddp_root",
            "ddp_profile", "ddp_reservation", "ddp_job_reservation", "ddp_job_gpus"} <= set(form["form"])
    assert set(form["form"]) == set(form["attributes"])   # every field shown has its settings, and no other
    assert not any(o.startswith("--gres") for o in sbatch_options(0))
    assert "--gres=gpu:2" in sbatch_options(2, "ws") and "--reservation=ws" in sbatch_options(2, "ws")


BASHRC = REPO / "ondemand" / "truba" / "bashrc.sh"
SHOW = ('echo "$DDP_TUTORIAL_VENV|$DDP_TUTORIAL_ROOT|$DDP_TUTORIAL_LANG|$(command -v jupyter)|'
        '$DDP_TUTORIAL_SLURM_PROFILE|$DDP_TUTORIAL_SLURM_GPUS|$DDP_TUTORIAL_SLURM_ACCOUNT|'
        '$DDP_TUTORIAL_SLURM_RESERVATION|$CONTAINER_JUPYTER|$(env | grep -c ^SBATCH_)"')


def filled(block: str, **values) -> str:
    """The ~/.bashrc block with its INSTRUCTOR lines (and DDP_CHECKOUT, DDP_WORK) given ``values``."""
    for name, value in values.items():
        block, n = re.subn(rf"^{name}=\S+", f"{name}={value}", block, flags=re.M)
        assert n == 1, f"the block has no line {name}="
    return block


def test_the_custom_app_bashrc_block(tmp_path):
    """TRUBA's *Custom* app: the ~/.bashrc block exports the class environment, data root, language and
    05's class shape (profile, 1 GPU per node, account, reservation: T5-2) inside a job only, only as
    DDP_TUTORIAL_* (never SBATCH_*, which redirect every later sbatch: T5-12), and makes the workshop copy."""
    venv = REPO / ".venv"
    block = filled(BASHRC.read_text(), DDP_CLASS_UNTIL="2999-12-31", DDP_CLASS_VENV=venv,
                   DDP_CLASS_DATA="/class/data", DDP_CLASS_ACCOUNT="ws-acct", DDP_CLASS_RESERVATION="ws05",
                   DDP_CHECKOUT=REPO, DDP_WORK=tmp_path / "workshop")
    show = SHOW
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDP_TUTORIAL_", "SLURM_", "SBATCH_"))}
    outside = subprocess.run(["bash", "-c", block + "\n" + show], capture_output=True, text=True,
                             env=dict(env, HOME=str(tmp_path)), check=True)
    assert outside.stdout.startswith("|||||||||0"), outside.stdout  # a login shell outside a job: nothing
    assert outside.stderr == "", outside.stderr
    inside = subprocess.run(["bash", "-c", block + "\n" + show], capture_output=True, text=True,
                            env=dict(env, HOME=str(tmp_path), SLURM_JOB_ID="7"), check=True)
    assert inside.stdout.strip() == (f"{venv}|/class/data|tr|{venv}/bin/jupyter|akya-cuda|1|ws-acct|ws05|"
                                     "|0"), inside.stdout   # the image's line left to fill: the venv is used
    assert inside.stderr == "", inside.stderr
    code = [line for line in BASHRC.read_text().splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in code if "SBATCH_" in line], "the block sets an SBATCH_ variable"
    assert sorted(p.name for p in (tmp_path / "workshop" / "tr").iterdir()) == sorted(
        p.name for p in (REPO / "notebooks" / "tr").glob("*.ipynb"))
    # What goes wrong is said (review OD03, OD04), and nothing is left half made.
    for change, said in ((dict(DDP_TUTORIAL_LANG="de"), "the language must be tr or en"),
                         ({}, "is no clone of the repository")):
        broken = block if change else block.replace(f"DDP_CHECKOUT={REPO}", f"DDP_CHECKOUT={tmp_path / 'none'}")
        work = tmp_path / "workshop-2"
        proc = subprocess.run(["bash", "-c", broken.replace(str(tmp_path / "workshop"), str(work)) + "\n" + show],
                              capture_output=True, text=True, env=dict(env, HOME=str(tmp_path), SLURM_JOB_ID="7",
                                                                       **change))
        assert proc.returncode == 0 and said in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert not work.exists(), sorted(map(str, work.rglob("*")))
    # The pages name the block's file and every value the instructor gives (the block itself is read there).
    filled_in = re.findall(r"^(DDP_CLASS_[A-Z]+)=.*# INSTRUCTOR", BASHRC.read_text(), re.MULTILINE)
    assert len(filled_in) == 6, filled_in
    for page in ("ondemand.md", "ondemand.tr.md"):
        text = (REPO / "docs" / page).read_text()
        assert "ondemand/truba/bashrc.sh" in text
        assert not [name for name in filled_in if f"`{name}`" not in text], f"docs/{page} does not name them all"


def _block(tmp_path: Path, block: str, *, job: bool = True, interactive: bool = False, before: str = "") -> tuple:
    """The block as ~/.bashrc runs it (in a job or not; ``before``: shell lines before it, e.g. a ``module``
    function): the DDP_TUTORIAL_* values it left (SHOW), and its own lines on stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDP_TUTORIAL_", "SLURM_", "SBATCH_"))}
    env.update(HOME=str(tmp_path), **({"SLURM_JOB_ID": "7"} if job else {}))
    proc = subprocess.run(["bash", *(["-i"] if interactive else []), "-c", before + "\n" + block + "\n" + SHOW],
                          capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip(), [line for line in proc.stderr.splitlines() if line.startswith("!! ddp-tutorial")]


def test_the_bashrc_block_holds_for_the_class_day_only(tmp_path):
    """T5-12: what the kit put into ~/.bashrc outlived the day (every later sbatch redirected, or refused once
    the reservation ended). After DDP_CLASS_UNTIL the block sets nothing and says, in a job and in an
    interactive shell, to delete it; a shell that is not interactive (scp, rsync) hears nothing."""
    block = filled(BASHRC.read_text(), DDP_CLASS_VENV=REPO / ".venv", DDP_CLASS_DATA="/class/data",
                   DDP_CLASS_ACCOUNT="ws-acct", DDP_CLASS_RESERVATION="ws05", DDP_CHECKOUT=REPO,
                   DDP_WORK=tmp_path / "workshop")
    over = filled(block, DDP_CLASS_UNTIL="2000-01-31")
    said = ("the ddp-tutorial block of ~/.bashrc is for a day that is over (2000-01-31): delete it "
            "(between the >>> and <<< lines)")
    for job, interactive in ((True, False), (False, True)):
        shown, lines = _block(tmp_path, over, job=job, interactive=interactive)
        assert shown.startswith("|||||||||0"), shown
        assert len(lines) == 1 and said in lines[0] and "silin (>>> ve <<< satırları arası)" in lines[0], lines
    assert _block(tmp_path, over, job=False) == ("|||||||||0", [])
    assert not (tmp_path / "workshop").exists()
    today = filled(block, DDP_CLASS_UNTIL=time.strftime("%Y-%m-%d"))   # the last day itself still holds
    assert _block(tmp_path, today)[0].startswith(f"{REPO / '.venv'}|/class/data|tr|")
    shown, lines = _block(tmp_path, block)   # the date left as it came: YYYY-MM-DD
    assert shown.startswith("|||||||||0") and len(lines) == 1 and "DDP_CLASS_UNTIL=YYYY-MM-DD" in lines[0], lines
    assert "is no date (YYYY-MM-DD)" in lines[0]


def test_the_bashrc_block_names_what_the_instructor_left_to_fill(tmp_path):
    """T5-2: a value left as INSTRUCTOR is said in one line and not set (05 then shows "account: — (your
    default)" rather than asking sbatch for an account named INSTRUCTOR); the rest is set."""
    block = filled(BASHRC.read_text(), DDP_CLASS_UNTIL="2999-12-31", DDP_CLASS_VENV=REPO / ".venv",
                   DDP_CHECKOUT=REPO, DDP_WORK=tmp_path / "workshop")
    shown, lines = _block(tmp_path, block)
    assert shown == f"{REPO / '.venv'}||tr|{REPO / '.venv'}/bin/jupyter|akya-cuda|1||||0", shown
    assert len(lines) == 1 and "still has INSTRUCTOR values: DDP_CLASS_DATA DDP_CLASS_ACCOUNT DDP_CLASS_RESERVATION" \
        in lines[0] and "eğitmenin doldurmadığı değerler var" in lines[0], lines


MODULE = """module() {  # a stand-in for Lmod's module: one Python module exists
  [ "$1" = load ] || return 1
  if [ "$2" = comp/python/3.12.2 ]; then export LOADED=$2; return 0; fi
  printf '\\nLmod has detected the following error:  The following module(s) are unknown: "%s"\\n' "$2" >&2
  return 1
}"""


def test_the_bashrc_block_loads_the_python_module_the_environment_was_built_with(tmp_path):
    """T5-17: the block loaded a hard-coded comp/python/3.12.0 and hid any failure (>/dev/null 2>&1). It loads
    what setup.sh --prefix recorded in DIR/ddp-tutorial.module, and a module that does not load is one line."""
    venv = tmp_path / "class-env"
    (venv / "bin").mkdir(parents=True)
    block = filled(BASHRC.read_text(), DDP_CLASS_UNTIL="2999-12-31", DDP_CLASS_VENV=venv, DDP_CLASS_DATA="/d",
                   DDP_CLASS_ACCOUNT="a", DDP_CLASS_RESERVATION="r", DDP_CHECKOUT=REPO, DDP_WORK=tmp_path / "w")
    for recorded, loaded, said in (("comp/python/3.12.2\n", "comp/python/3.12.2", None),
                                   ("comp/python/3.12.0\n", "", "module load comp/python/3.12.0 failed"),
                                   ("", "", None)):
        (venv / "ddp-tutorial.module").write_text(recorded)
        shown, lines = _block(tmp_path, block + '\necho "loaded:${LOADED:-}"', before=MODULE)
        assert f"loaded:{loaded}" in shown.splitlines()[0], shown
        assert shown.splitlines()[1].startswith(f"{venv}|/d|tr|"), shown   # the environment is set either way
        if said:
            assert len(lines) == 1 and said in lines[0] and "module(s) are unknown" in lines[0], lines
        else:
            assert lines == [], lines


SERVES_ONCE = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
options = dict(a[2:].split("=", 1) for a in sys.argv[2:] if a.startswith("--") and "=" in a)
class Ready(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *args):
        pass
server = HTTPServer((options["ip"], int(options["port"])), Ready)
server.timeout = 30
server.handle_request()   # lab_job.sh's readiness check, then the "server" ends
"""


def test_lab_job_names_the_sites_login_address_and_a_session_in_the_reservation(tmp_path):
    """T5-20: the tunnel line said USER@arf-ui1, a name a laptop on the VPN may not resolve; with the site known
    (the submit host is one of its login nodes, or DDP_TUTORIAL_SITE) it is the table's documented address.
    P3: a session sent into the class's GPU reservation (an old SBATCH_RESERVATION export, or the job's
    reservation is DDP_TUTORIAL_SLURM_RESERVATION) is said in the log, in one line."""
    venv = _stand_in_venv(tmp_path, SERVES_ONCE)
    address = sites.load("truba").section("login")["address"]
    cases = [({"SLURM_SUBMIT_HOST": "arf-ui1", "SBATCH_RESERVATION": "ws05"}, address, "ws05"),
             ({"SLURM_SUBMIT_HOST": "n9", "DDP_TUTORIAL_SITE": "truba", "SLURM_JOB_RESERVATION": "cpu-day",
               "DDP_TUTORIAL_SLURM_RESERVATION": "ws05"}, address, None),
             ({"SLURM_SUBMIT_HOST": "login7", "SLURM_JOB_RESERVATION": "ws05",
               "DDP_TUTORIAL_SLURM_RESERVATION": "ws05"}, "login7", "ws05"),
             ({"SLURM_SUBMIT_HOST": "arf-ui1", "DDP_TUTORIAL_LOGIN_HOST": "gw.example", "DDP_TUTORIAL_LANG": "tr"},
              "gw.example", None)]
    for more, login, reservation in cases:
        env = _lab_env(tmp_path, DDP_TUTORIAL_VENV=str(venv), **more)
        try:
            proc = _lab_job(env)
        finally:
            for p in Path(env["DDP_TUTORIAL_WORK"]).parent.glob(Path(env["DDP_TUTORIAL_WORK"]).name + "*"):
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink()
        assert proc.returncode == 0, proc.stdout + proc.stderr
        tunnel = re.search(r"== (?:tunnel, from your own computer|tünel, kendi bilgisayarınızdan): "
                           r"ssh -N -L (\d+):(\S+):\1 (\S+)@(\S+)$", proc.stdout, re.M)
        assert tunnel and tunnel.group(4) == login, (more, proc.stdout)
        warned = [line for line in proc.stderr.splitlines() if "reservation" in line or "rezervasyon" in line]
        if reservation:
            assert len(warned) == 1 and f"this session runs in reservation {reservation}" in warned[0], proc.stderr
            assert "unset SBATCH_RESERVATION" in warned[0] and "sbatch slurm/lab.sbatch" in warned[0]
        else:
            assert warned == [], proc.stderr


def test_the_reservation_field_is_a_name_only():
    """OD01: the form's reservation reaches sbatch as one option, or the page says what is wrong with it:
    a quote, a YAML escape or a newline (a crafted POST) can neither break the YAML nor add an option."""
    assert "--reservation=ws-2026.gpu_1" in sbatch_options(0, " ws-2026.gpu_1 ")
    for bad in ('x"', 'x", "--uid=0', "a\\u0041b", 'x"\n    - "--exclusive', "a b", "x\n- --exclusive"):
        proc = subprocess.run(["ruby", str(HELPERS / "ood_render.rb"), str(APP / "submit.yml.erb"),
                               json.dumps({"ddp_cpus": "4", "ddp_gpus": "0", "ddp_reservation": bad})],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1 and proc.stdout == "", (bad, proc.stdout)
        assert "a reservation's name has only letters, digits" in proc.stderr and "Rezervasyon" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_lab_sbatch_submitted_from_elsewhere_says_so(tmp_path):
    """LS01: lab.sbatch submitted from another folder (no DDP_TUTORIAL_CHECKOUT): one line saying where
    to submit it from, in the attendee's language, not bash's "No such file"."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDP_TUTORIAL_", "SLURM_"))}
    for lang, said in (("en", "submit the job from the checkout"), ("tr", "işi deponun klasöründen gönderin")):
        proc = subprocess.run(["bash", str(REPO / "slurm" / "lab.sbatch")], capture_output=True, text=True,
                              cwd=tmp_path, env=dict(env, SLURM_SUBMIT_DIR=str(tmp_path), DDP_TUTORIAL_LANG=lang))
        assert proc.returncode == 2 and said in proc.stderr and "DDP_TUTORIAL_CHECKOUT" in proc.stderr, proc.stderr
        assert len(proc.stderr.splitlines()) == 1 and "No such file" not in proc.stderr


# ----------------------------------------------------------------------------- lab_job.sh by hand
def _stand_in_venv(tmp_path: Path, jupyter: str) -> Path:
    """A class environment whose ``jupyter`` is ``jupyter`` (a Python script): the real interpreter."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / "bin" / "jupyter").write_text(f"#!{sys.executable}\n{jupyter}")
    (venv / "bin" / "jupyter").chmod(0o755)
    return venv


def _lab_job(env: dict, timeout: float = 60) -> subprocess.CompletedProcess:
    """lab_job.sh to its end, in its own session: past ``timeout`` all of it is killed, its server too."""
    proc = subprocess.Popen(["bash", str(REPO / "scripts" / "lab_job.sh")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _lab_env(tmp_path: Path, **more) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDP_TUTORIAL_", "SLURM_"))}
    return dict(env, DDP_TUTORIAL_ROOT=os.environ.get("DDP_TUTORIAL_ROOT") or str(REPO / ".data"),
                DDP_TUTORIAL_WORK=str(REPO / "workshop" / f"lab-job-test-{secrets.token_hex(4)}"),
                TMPDIR=str(tmp_path), IPYTHONDIR=str(tmp_path / "ipython"), **more)  # this test's own


def test_lab_job_refuses_a_port_that_is_no_port_or_taken(tmp_path):
    """LJ04, LJ05: 0, 99999 and abc are refused in one line (0 never printed a URL, 99999 printed a wrong
    tunnel); LJ03: a port another program holds is refused before anything starts."""
    venv = _stand_in_venv(tmp_path, "raise SystemExit(1)")
    for port in ("0", "99999", "abc", "-1"):
        for lang, said in (("en", "a port is a number from 1 to 65535"), ("tr", "1 ile 65535 arasında bir sayı")):
            proc = _lab_job(_lab_env(tmp_path, DDP_TUTORIAL_VENV=str(venv), DDP_TUTORIAL_LAB_PORT=port,
                                     DDP_TUTORIAL_LANG=lang))
            assert proc.returncode == 2 and said in proc.stderr and proc.stdout == "", (port, proc.stderr)
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind((socket.gethostbyname(socket.gethostname()), 0))
    holder.listen(1)
    try:
        env = _lab_env(tmp_path, DDP_TUTORIAL_VENV=str(venv), DDP_TUTORIAL_LAB_PORT=str(holder.getsockname()[1]))
        proc = _lab_job(env)
        assert proc.returncode == 2 and f"port {holder.getsockname()[1]} is taken" in proc.stderr, proc.stderr
        assert not Path(env["DDP_TUTORIAL_WORK"]).exists(), "a refused start made a working copy"
    finally:
        holder.close()


IMPOSTOR = """
import os, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
port = int(next(a for a in sys.argv if a.startswith("--port=")).split("=")[1])
if os.fork() == 0:  # another program, not JupyterLab's process: it takes the port and answers 200 to anything
    os.setsid()
    if os.fork() == 0:
        seen = open(os.environ["IMPOSTOR_SAW"], "a")
        class Yes(BaseHTTPRequestHandler):
            def do_GET(self):
                seen.write(f"{self.path} {self.headers.get('Authorization')}\\n"); seen.flush()
                self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
        server = HTTPServer((sys.argv[sys.argv.index("--ip") + 1] if "--ip" in sys.argv else
                             next(a for a in sys.argv if a.startswith("--ip=")).split("=")[1], port), Yes)
        open(os.environ["IMPOSTOR_PID"], "w").write(str(os.getpid()))
        server.timeout = 0.5
        end = time.monotonic() + 30
        while time.monotonic() < end:
            server.handle_request()
    os._exit(0)
time.sleep(2.5)  # "JupyterLab" never listens, and ends
raise SystemExit(1)
"""


def test_lab_job_announces_only_its_own_server(tmp_path):
    """LJ03: the port answers, but the listening socket is not our server's: no URL is printed and the token
    is sent to no one (the old check, a TCP connect, printed the other program's server with the token)."""
    saw, pid_file = tmp_path / "impostor-saw", tmp_path / "impostor-pid"
    venv = _stand_in_venv(tmp_path, IMPOSTOR)
    env = _lab_env(tmp_path, DDP_TUTORIAL_VENV=str(venv), DDP_TUTORIAL_LAB_TOKEN="sekret-token-1234",
                   IMPOSTOR_SAW=str(saw), IMPOSTOR_PID=str(pid_file))
    try:
        proc = _lab_job(env)
        assert proc.returncode != 0 and "JupyterLab did not start" in proc.stderr, proc.stderr
        assert "then open" not in proc.stdout and "sekret-token-1234" not in proc.stdout + proc.stderr
        assert pid_file.exists(), "the stand-in never listened: the check above proves nothing"
        assert "sekret-token-1234" not in (saw.read_text() if saw.exists() else "")
    finally:
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        shutil.rmtree(env["DDP_TUTORIAL_WORK"], ignore_errors=True)
        for p in Path(env["DDP_TUTORIAL_WORK"]).parent.glob(Path(env["DDP_TUTORIAL_WORK"]).name + "*"):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink()


def test_lab_job_settings_copy_replaces_a_planted_link(tmp_path):
    """SY01: in a writable class environment, overrides.json planted as a link to another file: the
    settings copy replaces the link, the other file keeps its content (the old ``cp`` wrote through it)."""
    venv = _stand_in_venv(tmp_path, "raise SystemExit(1)")
    settings = venv / "share" / "jupyter" / "lab" / "settings"
    settings.mkdir(parents=True)
    victim = tmp_path / "victim_rc"
    victim.write_text("the victim's own file\n")
    (settings / "overrides.json").symlink_to(victim)
    env = _lab_env(tmp_path, DDP_TUTORIAL_VENV=str(venv))
    try:
        proc = _lab_job(env)
        assert "JupyterLab did not start" in proc.stderr, proc.stderr
        assert victim.read_text() == "the victim's own file\n"
        assert not (settings / "overrides.json").is_symlink()
        assert (settings / "overrides.json").read_text() == (REPO / "notebooks" / "lab" / "overrides.json").read_text()
        assert [p.name for p in settings.iterdir()] == ["overrides.json"]
    finally:
        for p in Path(env["DDP_TUTORIAL_WORK"]).parent.glob(Path(env["DDP_TUTORIAL_WORK"]).name + "*"):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink()


SESSION = """
import json, os, signal, subprocess, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
arg = lambda name: next(a.split("=", 1)[1] for a in sys.argv if a.startswith(f"--{name}="))
token = json.load(open(arg("config")))["IdentityProvider"]["token"]
here = os.environ["SESSION_DIR"]
cluster = os.path.join(here, "cluster-1-abcd.json")  # as a kernel's ipyparallel cluster, recorded by its Guard
open(cluster, "w").write("{}")
open(os.environ["DDP_TUTORIAL_CLUSTER_FILES"], "a").write(cluster + "\\n")
def outside(name, **env):  # a process out of the lab's process tree (setsid -f: reparented), with the marker
    subprocess.run(["setsid", "-f", sys.executable, "-c", f"import os, time; open({os.path.join(here, name)!r}, 'w')"
                    ".write(str(os.getpid())); time.sleep(120)"], env=dict(os.environ, **env), check=True)
outside("other-job", SLURM_JOB_ID="999")  # a job submitted from the lab, on this node: another job
outside("same-session")                   # a kernel's process that left the tree: this session's
def ending(*_):  # a kernel still alive at the end sees its controller stop and writes its cluster file again
    open(cluster, "w").write('{"state": "running"}')
    os._exit(0)
signal.signal(signal.SIGTERM, ending)
class Status(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.headers.get("Authorization") == f"token {token}" else 403)
        self.end_headers()
    def log_message(self, *args):
        pass
HTTPServer((arg("ip"), int(arg("port"))), Status).serve_forever()
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def test_lab_job_end_spares_other_jobs_and_removes_the_cluster_files(tmp_path):
    """LJ07 without SLURM: at the lab's end a marked process of another job (SLURM_JOB_ID of its own, as a
    job submitted from the lab has) lives on, a marked one of this session that left the process tree is
    ended. P7: the cluster file a kernel wrote again while the session ended is removed once all is gone."""
    venv = _stand_in_venv(tmp_path, SESSION)
    env = _lab_env(tmp_path, DDP_TUTORIAL_VENV=str(venv), SESSION_DIR=str(tmp_path))
    log = tmp_path / "lab.out"
    with log.open("w") as out:
        lab = subprocess.Popen(["bash", str(REPO / "scripts" / "lab_job.sh")], stdout=out, stderr=subprocess.STDOUT,
                               env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    pids = {}
    try:
        _wait_for("the address line", lambda: "== then open the address in" in log.read_text(), 60, log)
        for name in ("other-job", "same-session"):
            _wait_for(name, lambda: (tmp_path / name).exists() and (tmp_path / name).read_text(), 10, log)
            pids[name] = int((tmp_path / name).read_text())
        assert _alive(pids["other-job"]) and _alive(pids["same-session"])
        lab.send_signal(signal.SIGTERM)
        assert lab.wait(30) == 143, log.read_text()
        assert _alive(pids["other-job"]), "the lab's end killed a process of another job"
        assert not _alive(pids["same-session"]), "a process of the lab's own session outlived it"
        assert not (tmp_path / "cluster-1-abcd.json").exists(), "the session's cluster file was left"
    finally:
        if lab.poll() is None:
            os.killpg(lab.pid, signal.SIGKILL)
            lab.wait()
        for pid in pids.values():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(env["DDP_TUTORIAL_WORK"], ignore_errors=True)


AS_NOBODY = """
import os, sys, urllib.error, urllib.request
token = sys.stdin.read().strip()  # not on this check's own command line
log, port, address, *folders = sys.argv[1:]
found, read = [], 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        if token.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
            found.append(f"/proc/{pid}/cmdline")
    except OSError:
        pass
for folder in folders:  # every file this user can read there: the log, the working copy, the start's state
    for where, _, names in os.walk(folder):
        for name in names:
            try:
                with open(os.path.join(where, name), "rb") as file:
                    text = file.read()
            except OSError:
                continue
            read += 1
            if token.encode() in text:
                found.append(os.path.join(where, name))
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
try:
    code = opener.open(f"http://{address}:{port}/api/contents", timeout=10).status
except urllib.error.HTTPError as error:
    code = error.code
print(code, os.access(log, os.R_OK), read > 1, *found)
"""


@pytest.mark.timeout(240)
def test_lab_job_is_its_owners_alone(tmp_path):
    """LJ01 (class day P6): a second, unprivileged user of the node (uid 65534) finds the token on no command
    line and in no file it can read (the job's log included), and the API refuses it; the owner's token
    works. LJ11: a second lab on the same working copy is refused, naming the first. SIGTERM ends it all."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None or not os.access("/usr/bin/python3", os.X_OK):
        _need("root, setpriv and /usr/bin/python3", "the test acts as a second, unprivileged user (uid 65534)")
    # A folder everyone can enter (pytest's own is its owner's), as a readable clone is: the job's log (0644)
    # and the start's TMPDIR (its state folder) are there.
    shared = Path(tempfile.mkdtemp(prefix="ddp-lab-test-", dir="/tmp"))
    shared.chmod(0o755)
    log = shared / "lab.out"
    env = dict(_lab_env(tmp_path, DDP_TUTORIAL_VENV=str(REPO / ".venv"), DDP_TUTORIAL_LANG="en"), TMPDIR=str(shared))
    work = Path(env["DDP_TUTORIAL_WORK"]) / "en"
    with log.open("w") as out:
        lab = subprocess.Popen(["bash", str(REPO / "scripts" / "lab_job.sh")], stdout=out, stderr=subprocess.STDOUT,
                               env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    log.chmod(0o644)
    try:
        # JupyterLab's own log lines (its stderr, the same file) may come between the script's lines
        shown = _wait_for("the address line", lambda: re.search(
            r"== JupyterLab on (\S+):(\d+) .*\n(?:.*\n)*?== then open the address in (\S+) \(it holds the token; "
            r"only you can read it\): cat \3", log.read_text(errors="replace")), 180, log)
        port, url_file = int(shown.group(2)), Path(shown.group(3))
        assert url_file == Path(f"{work}.lab-url") and url_file.stat().st_mode & 0o777 == 0o600
        url = url_file.read_text().strip()
        token = re.fullmatch(rf"http://localhost:{port}/lab/tree/00_setup\.ipynb\?token=(\w+)", url).group(1)
        address = socket.gethostbyname(socket.gethostname())
        with socket.create_connection((address, port), 5):
            pass
        assert not _listens_everywhere(port), f"JupyterLab listens on every interface (port {port})"
        nobody = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
                                 "-I", "-c", AS_NOBODY, str(log), str(port), address, str(shared),
                                 str(work.parent)], input=token, capture_output=True, text=True, timeout=60)
        assert nobody.returncode == 0, nobody.stderr
        # 403, the log readable (the check reads what a readable clone shows), files read, the token in none
        assert nobody.stdout.split() == ["403", "True", "True"], f"uid 65534 saw: {nobody.stdout}"
        owner = urllib.request.build_opener(urllib.request.ProxyHandler({})).open(urllib.request.Request(
            f"http://{address}:{port}/api/contents", headers={"Authorization": f"token {token}"}), timeout=10)
        assert owner.status == 200
        second = _lab_job(env)  # the same working copy (the same language)
        assert second.returncode == 2 and f"pid {lab.pid}" in second.stderr and "is open in another JupyterLab" \
            in second.stderr, second.stderr
        assert url_file.exists(), "the refused second start removed the first's address file"
        os.kill(lab.pid, signal.SIGTERM)
        assert lab.wait(30) == 143
        assert not url_file.exists(), "the address file outlived its server"
    finally:
        if lab.poll() is None:
            os.killpg(lab.pid, signal.SIGKILL)
            lab.wait()
        for p in work.parent.parent.glob(work.parent.name + "*"):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink()
        shutil.rmtree(shared, ignore_errors=True)


def _listens_everywhere(port: int) -> bool:
    """Whether a socket listens on ``port`` at 0.0.0.0 or :: (this network namespace)."""
    for table, anywhere in (("/proc/net/tcp", "00000000"), ("/proc/net/tcp6", "0" * 32)):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            if state == "0A" and local == f"{anywhere}:{port:04X}":
                return True
    return False


GUARDED_KERNEL = """
import subprocess, sys, time
from ddp_tutorial.ipp.watchdog import Guard
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
guard = Guard([child.pid], job_id="4242", files=[sys.argv[1]])
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
    cluster, clusters = tmp_path / "cluster-1-abcd.json", tmp_path / "cluster-files"
    cluster.write_text("{}")
    bin_dir.mkdir()
    (bin_dir / "scancel").write_text(f'#!/bin/sh\necho "$@" >> {called}\n')
    (bin_dir / "scancel").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", DDP_TUTORIAL_ENGINE_JOBS=str(jobs),
               DDP_TUTORIAL_CLUSTER_FILES=str(clusters))
    kernel = subprocess.Popen([sys.executable, "-c", GUARDED_KERNEL, str(cluster)], stdout=subprocess.PIPE, text=True,
                              env=env)
    try:
        child_pid, watchdog_pid = map(int, kernel.stdout.readline().split())
        assert jobs.read_text() == "4242\n" and clusters.read_text() == f"{cluster}\n"
        time.sleep(0.5)  # the watchdog has read its targets
        os.kill(watchdog_pid, signal.SIGTERM)
        began = time.monotonic()
        while psutil.pid_exists(child_pid) and psutil.Process(child_pid).status() != psutil.STATUS_ZOMBIE \
                and time.monotonic() - began < 10:
            time.sleep(0.05)
        assert called.read_text().split() == ["4242"]
        assert not cluster.exists(), "the watchdog left the cluster file"
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
    """Run → Run All Cells on the open notebook (until it takes effect); wait until no cell is queued or running."""
    panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    panel.locator(".jp-Cell").first.wait_for(timeout=90_000)
    page.wait_for_timeout(1500)
    began, started, idle = lab_ui.run_all(page, panel), False, 0
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


def job_fields(lab, job: str) -> dict:
    """``scontrol show job``'s fields of one job (Partition, Reservation, NumNodes, NumCPUs, TimeLimit, TRES …)."""
    shown = lab.run(["scontrol", "show", "job", "-o", job]).stdout
    return dict(word.split("=", 1) for word in shown.split() if "=" in word)


def ondemand_session(site) -> dict:
    """The session a TRUBA attendee starts from the OnDemand form: its defaults (partition, hours, cores, GPUs),
    which are the site table's [day] session, and notebook 05's class shape from [day] as the instructor sets
    the form's fields for the day (profile: the day's job partition, one of the form's choices; GPUs per node)."""
    form = yaml.safe_load((APP / "form.yml").read_text())["attributes"]
    day = site.section("day")
    session = {"partition": form["bc_queue"]["value"], "hours": int(form["bc_num_hours"]["value"]),
               "cores": int(form["ddp_cpus"]["value"]), "gpus": int(form["ddp_gpus"]["value"]),
               "profile": day["job_partition"], "job_gpus": int(day["job_gpus_per_node"]),
               "job_nodes": int(day["job_nodes"])}
    assert (session["partition"], session["cores"], f"{session['hours']:02d}:00:00") == (
        day["session_partition"], day["session_cores"], day["session_time"]), (session, day)
    assert session["profile"] in [choice[1] for choice in form["ddp_profile"]["options"]]
    assert site.check_job(session["partition"], nodes=1, gpus_per_node=session["gpus"],
                          cores_per_node=session["cores"], time=day["session_time"]) == []
    return session


def _delete_reservation(lab, name: str, timeout: float = 30) -> None:
    """``scontrol delete`` the reservation once no job of it is left (SLURM keeps a reservation that holds jobs)."""
    deadline = time.monotonic() + timeout
    while lab.run(["scontrol", "delete", f"ReservationName={name}"], check=False).returncode != 0:
        if time.monotonic() > deadline or name not in lab.run(["scontrol", "show", "reservation"], check=False).stdout:
            return
        time.sleep(0.5)


@pytest.mark.slurm
@pytest.mark.browser
@pytest.mark.timeout(480)
def test_the_lab_job_in_chromium_ends_with_its_allocation(truba_lab, tmp_path):
    """A TRUBA attendee's day on the lab that enforces TRUBA's rules (job_submit.lua): the OnDemand app's
    session with the form's values (debug, 4 cores, 3 h, no GPU, outside the class's GPU reservation),
    submitted from the login node arf-ui1; JupyterLab in Chromium through the tunnel, 00's Run All; 05's
    engines started from the kernel in the class shape (akya-cuda, 1 GPU and 10 cores per node, the
    reservation); a job submitted from the lab on the session's node (debug, 1 core). Every job is accepted
    by the site's rules; scancel of the session ends all of it but that last job."""
    lab = truba_lab
    if not os.access(CHROMIUM, os.X_OK):
        _need("chromium", f"{CHROMIUM} not found (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _need("playwright", "the Python package is not installed (pip install playwright)")
    site = lab.site
    session = ondemand_session(site)
    # The plain batch job is accepted as it stands (the same start script; not started twice here).
    lab.run(lab.login_command(["sbatch", "--test-only", "slurm/lab.sbatch"]), cwd=REPO)

    earlier = set(lab.queue())   # the jobs of other tests: the clean-up below leaves them alone
    # The class's GPU reservation, as the instructor makes it for the day: the job partition's nodes.
    reservation, account = f"lj-{secrets.token_hex(2)}", "ddpclass"
    lab.run(["scontrol", "create", "reservation", f"ReservationName={reservation}", "StartTime=now",
             "Duration=00:30:00", f"Nodes={','.join(lab.partitions[session['profile']])}", "Users=root",
             f"PartitionName={session['profile']}", "Flags=IGNORE_JOBS"])   # another test's job may still end there
    data_root = os.environ.get("DDP_TUTORIAL_ROOT") or str(REPO / ".data")
    script = tmp_path / "script.sh"
    script.write_text(render(APP / "template" / "script.sh.erb", {
        "ddp_lang": "en", "ddp_profile": session["profile"], "ddp_venv": str(REPO / ".venv"), "ddp_root": data_root,
        "ddp_checkout": str(REPO), "bc_account": account, "ddp_job_reservation": reservation,
        "ddp_job_gpus": str(session["job_gpus"])}))
    work = REPO / "workshop" / f"lab-job-test-{secrets.token_hex(4)}"
    log = tmp_path / "lab.out"
    # This test's own IPython folder: its cluster files can reach no other test's JupyterLab
    ipython = tmp_path / "ipython"
    # What OnDemand's SLURM adapter adds to the rendered options: the queue (bc_queue), the account, the
    # hours (bc_num_hours), the job's name and output.
    options = sbatch_options(session["gpus"], cpus=session["cores"]) + [
        f"--partition={session['partition']}", f"--account={account}", f"--time={session['hours']:02d}:00:00",
        "--job-name=ood-ddp-lab", f"--output={log}"]
    env = dict(lab.env, DDP_TUTORIAL_WORK=str(work), IPYTHONDIR=str(ipython))
    submitted = subprocess.run(lab.login_command(["sbatch", "--parsable", *options, str(script)]), env=env,
                               cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    tunnel, other = None, None
    try:
        held = job_fields(lab, job)
        assert (held["Partition"], held["NumCPUs"], held["TimeLimit"], held.get("Reservation", "")) == (
            session["partition"], str(session["cores"]), f"{session['hours']:02d}:00:00", ""), held
        text = _wait_for("the address line", lambda: re.search(
            r"ssh -N -L (\d+):(\S+):\1 \S+@\S+\n== then open the address in (\S+) \(",
            log.read_text(errors="replace") if log.exists() else ""), 180, log)
        port, node, url_file = int(text.group(1)), text.group(2), Path(text.group(3))
        assert node in lab.node_names, text.group(0)
        assert node not in lab.partitions[session["profile"]], f"the CPU session sits on {node}, in the reservation"
        assert url_file.stat().st_mode & 0o777 == 0o600, oct(url_file.stat().st_mode)
        url = url_file.read_text().strip()
        token = re.fullmatch(rf"http://localhost:{port}/lab/tree/00_setup\.ipynb\?token=(\w+)", url).group(1)
        assert token not in log.read_text(errors="replace"), "the token is in the job's log"
        jupyter = [int(p.split()[0]) for p in lab_processes(lab) if "jupyter-lab" in p]
        assert jupyter and all(token.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in jupyter)
        # A last cell starts engines through SLURM from the kernel as 05 does (the class's shape from the
        # session's DDP_TUTORIAL_SLURM_* values) and leaves them running.
        notebook_path = work / "en" / "00_setup.ipynb"
        notebook = json.loads(notebook_path.read_text(encoding="utf-8"))
        notebook["cells"].append({
            "cell_type": "code", "execution_count": None, "id": "lab-job-test-engines", "metadata": {}, "outputs": [],
            "source": f"engines_left_running = ipp.start_slurm(nodes={session['job_nodes']}, "
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
        engines = [j for j in lab.queue() if j != job and j not in earlier]
        assert engines, "the kernel started no SLURM engine job: the check below would prove nothing"
        shape = job_fields(lab, engines[0])
        assert (shape["Partition"], shape.get("Reservation", ""), shape["NumNodes"], shape["Account"]) == (
            session["profile"], reservation, str(session["job_nodes"]), account), shape
        assert shape.get("TresPerNode", "").endswith(f"gpu:{session['job_gpus']}"), shape   # gres:gpu:1
        print(f"session job {job} on {node} ({held['Partition']}, {held['NumCPUs']} cores, {held['TimeLimit']}); "
              f"engine job {engines[0]} on {shape['NodeList']} ({shape['Partition']}, reservation "
              f"{shape['Reservation']}, {shape['TresPerNode']} per node)")
        before = lab_processes(lab)
        assert any("ipengine" in p or "ipyparallel" in p for p in before) and any("jupyter" in p for p in before)
        # A job submitted from the lab (as 05's slurm.submit or `!sbatch` in a cell: the lab's environment,
        # its marker included) on the lab's node, in the session's partition (a GPU-less job belongs on no GPU
        # partition), is another job: the lab's end leaves it running (LJ07).
        environ = Path(f"/proc/{jupyter[0]}/environ").read_text(errors="replace").split("\0")
        lab_env = dict(v.split("=", 1) for v in environ if "=" in v)
        assert "DDP_TUTORIAL_LAB_SESSION" in lab_env
        started_file = tmp_path / "other-started"
        sent = subprocess.run(["sbatch", "--parsable", "-p", session["partition"], "-c", "1", "-w", node,
                               "-o", str(tmp_path / "other.out"), "--wrap", f"touch {started_file}; exec sleep 300"],
                              env=lab_env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
        other = sent.stdout.strip().split(";")[0]
        assert other, f"the job submitted from the lab was refused: {sent.stderr}"
        _wait_for("the job submitted from the lab to start", started_file.exists, 60, tmp_path / "other.out")

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
        time.sleep(2)  # a job the clean-up had signalled would be ending by now
        state = lab.run(["squeue", "-h", "-j", other, "-o", "%T"], check=False).stdout.strip()
        accounting = lab.run(["sacct", "-n", "-j", other, "-o", "State,ExitCode"], check=False).stdout
        assert state == "RUNNING", f"the job submitted from the lab ended with the lab: {state or 'gone'} {accounting}"
        # ipyparallel's cluster files of the kernel's clusters go too (lab_job.sh removes them once every process
        # of the session is gone): left behind, a later JupyterLab's ipyparallel extension loads them.
        stale = sorted(str(f.relative_to(ipython)) for f in ipython.rglob("cluster-*.json"))
        assert not stale, f"cluster files of the ended session left: {stale}"
        assert not url_file.exists(), "the address file outlived its server"
    finally:
        if tunnel:
            tunnel.close()
        mine = [j for j in lab.queue() if j not in earlier]   # the session, its engines, the job from the lab
        if mine:
            lab.run(["scancel", *mine], check=False)
        _delete_reservation(lab, reservation)
        shutil.rmtree(work, ignore_errors=True)
