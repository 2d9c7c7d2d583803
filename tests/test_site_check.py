"""``ddp-tutorial site-check``, the day-before check (issue 34 item 7), on the real two-node SLURM lab.

It runs on the lab's login node (the hub namespace, ``lab.login_command``), as the instructor runs it on
the site's login node: green with the lab's partition and a reservation created for the class, and with a
reservation that does not exist and a missing data root it says what to do, line by line, exit code 1.
Issue 45: its probe jobs are the least job the partition of the site's table accepts (T5-10, on the lab in
TRUBA's shape, whose job_submit.lua refuses the old shape); a reservation that starts later is read and named
(P2); inside a job SLURM granted GPUs, no usable GPU is ``!!`` in site-check and in the job's pre-check (P5);
the class environment is checked as another user runs it (P1); on a login node one line says to run it again
inside a session (T5-11).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ddp_tutorial import slurm
from ddp_tutorial.site_check import Line, check_venv, check_where, node_script
from ddp_tutorial.site_probe import probe_shape, slurm_settings
from ddp_tutorial.slurm.jobs import reservation_note

REPO = Path(__file__).resolve().parents[1]
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def class_data(tmp_path_factory) -> Path:
    from idx_files import write_mnist_like
    root = tmp_path_factory.mktemp("class-data")
    for dataset in ("mnist", "fashion-mnist"):
        write_mnist_like(root, dataset=dataset, n_train=256, n_test=64, seed=0)
    return root


def site_check(lab, *args: str, lang: str = "en", **extra: str) -> subprocess.CompletedProcess:
    environ = dict(lab.env, DDP_TUTORIAL_LANG=lang, PYTHONUNBUFFERED="1", **extra)
    environ.pop("DDP_TUTORIAL_ROOT", None)
    return subprocess.run(lab.login_command([sys.executable, "-m", "ddp_tutorial", "site-check", "--timeout", "90",
                                             *args]),
                          env=environ, capture_output=True, text=True, timeout=300, cwd=str(REPO))


@pytest.mark.slurm
def test_site_check_is_green_on_the_lab_with_a_class_reservation(slurm_cluster, class_data):
    lab = slurm_cluster
    lab.run(["scontrol", "create", "reservation", "ReservationName=class", "Users=root", "Nodes=n1,n2",
             "StartTime=now", "Duration=30", "Flags=IGNORE_JOBS"])
    try:
        done = site_check(lab, "--root", str(class_data), "--partition", "debug", "--reservation", "class")
    finally:
        lab.run(["scontrol", "delete", "ReservationName=class"], check=False)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    checks = lines[:-1]
    assert len(checks) == 8 and all(line.startswith("ok   ") for line in checks), done.stdout
    assert "reservation class" in checks[4] and "partition debug" in checks[4], checks[4]
    assert "; --time=1 --ntasks=1)" in checks[4], checks[4]  # no site table: the probe as before
    assert "reached this node at 10.233.0.254:" in checks[5], checks[5]
    assert checks[6].startswith("ok   interface rule on n") and "(10.233.0." in checks[6], checks[6]
    assert " lo " not in checks[6]
    assert checks[7].startswith("ok   site-check ran on ") and "(outside any SLURM job): run it again inside a " \
        "session (the OnDemand app or `sbatch slurm/lab.sbatch`)" in checks[7], checks[7]   # T5-11
    assert lines[-1] == "All 8 checks ok."


@pytest.mark.slurm
def test_site_check_says_what_to_do_for_a_wrong_reservation_and_missing_data(slurm_cluster, tmp_path):
    done = site_check(slurm_cluster, "--root", str(tmp_path / "no-data"), "--reservation", "nosuch", lang="tr")
    lines = done.stdout.splitlines()
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    bad = [line for line in lines if line.startswith("!!   ")]
    assert len(bad) == 3, done.stdout      # two data sets and the reservation; the probe ran without it (P2)
    data = [line for line in bad if "hazır değil" in line]
    assert len(data) == 2 and all("ddp-tutorial data prepare --dataset" in line for line in data), data
    assert bad[-1].startswith("!!   nosuch adlı bir rezervasyon yok: adı denetleyin (scontrol show reservation"), \
        bad[-1]
    assert "rezervasyonsuz SLURM'ün yanıtı" in bad[-1] and "Job " in bad[-1], bad[-1]
    assert any(line.startswith("tamam bir hesaplama düğümü (n") for line in lines), done.stdout
    assert lines[-1] == "8 denetimden 3 tanesi işlem istiyor (!! ile başlayan satırlar).", lines[-1]
    assert not slurm_cluster.queue()          # --test-only queued nothing


def test_a_line_is_ok_or_says_what_to_do_in_both_languages():
    line = Line(False, "site.iface_bad", dict(node="n1", address="127.0.1.1"))
    assert line.text("en").startswith("!!   interface rule on n1") and "DDP_TUTORIAL_IFNAME" in line.text("en")
    assert "lo dışında" in line.text("tr")


def test_the_probe_task_runs_the_templates_interface_rule_and_connects_back():
    from ddp_tutorial.slurm.render import IFNAME_RULE
    script = node_script("10.0.0.1", 4242, "tok")
    assert IFNAME_RULE in script and "/dev/tcp/10.0.0.1/4242" in script and "echo tok" in script
    assert subprocess.run(["bash", "-n", "-c", script]).returncode == 0


def site_check_process(lab, *args: str, timeout: str = "90", lang: str = "en") -> subprocess.Popen:
    environ = dict(lab.env, DDP_TUTORIAL_LANG=lang, PYTHONUNBUFFERED="1")
    environ.pop("DDP_TUTORIAL_ROOT", None)
    return subprocess.Popen(lab.login_command([sys.executable, "-m", "ddp_tutorial", "site-check", "--timeout", timeout,
                                               *args]),
                            env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO))


def probe_jobs(lab) -> list:
    return lab.run(["squeue", "-h", "-n", "site-check", "-o", "%i"], timeout=30).stdout.split()


def probe_sruns() -> list:
    """This machine's processes running a site-check probe srun."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            words = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if words and words[0].endswith(b"srun") and b"--job-name=site-check" in words:
            found.append(int(proc.name))
    return found


def until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.3)
    return True


@pytest.mark.slurm
def test_the_day_before_a_reservation_that_starts_tomorrow_is_an_ok_line(slurm_cluster, class_data):
    """SC03: sbatch --test-only refuses a reservation that has not started ("Invalid time specified"); the
    line says when it starts and the port and interface probe runs without it. SE02: a job waiting for it
    says when that is."""
    lab = slurm_cluster
    lab.run(["scontrol", "create", "reservation", "ReservationName=tomorrow", "StartTime=now+1day", "Duration=480",
             "Nodes=ALL", "Users=root", "Flags=IGNORE_JOBS"])
    job = None
    try:
        done = site_check(lab, "--root", str(class_data), "--partition", "debug", "--reservation", "tomorrow")
        job = lab.run(["sbatch", "--parsable", "--reservation=tomorrow", "--output=/dev/null", "--wrap", "true"]
                      ).stdout.strip()
        assert until(lambda: slurm.job_info(job, env=lab.env).reason == "Reservation", 20), \
            slurm.job_info(job, env=lab.env)
        info = slurm.job_info(job, env=lab.env)
        note = reservation_note(info, env=lab.env)
        status = subprocess.run([sys.executable, "-m", "ddp_tutorial", "slurm", "status", job],
                                env=dict(lab.env, DDP_TUTORIAL_LANG="tr"), capture_output=True, text=True,
                                timeout=60, cwd=str(REPO))
    finally:
        if job:
            lab.run(["scancel", job], check=False)
        lab.run(["scontrol", "delete", "ReservationName=tomorrow"], check=False)
    checks = done.stdout.splitlines()[:-1]
    assert done.returncode == 0, done.stdout + done.stderr
    assert checks[4].startswith("ok   reservation tomorrow has not started yet: it starts at 20"), checks[4]
    assert "(in 24 h) and ends at 20" in checks[4] and "for users root" in checks[4], checks[4]
    assert "ran without it (partition debug" in checks[4], checks[4]
    assert checks[5].startswith("ok   a compute node (n") and checks[6].startswith("ok   interface rule on n"), \
        done.stdout
    assert note.startswith(" · reservation tomorrow starts at 20") and "waits for it" in note, note
    assert status.returncode == 0 and "tomorrow rezervasyonu 20" in status.stdout, status.stdout + status.stderr


@pytest.mark.slurm
def test_a_probe_that_cannot_start_leaves_nothing_in_the_queue_on_timeout_or_sigterm(slurm_cluster, class_data):
    """SC04: with every node busy the probe gives up after --timeout and its job is gone from the queue.
    SG03: SIGTERM to site-check while its srun waits stops that srun (no orphan) and its pending job."""
    lab = slurm_cluster
    busy = lab.run(["sbatch", "--parsable", "-N2", "--exclusive", "--output=/dev/null", "--wrap", "sleep 300"]
                   ).stdout.strip()
    try:
        assert until(lambda: slurm.job_info(busy, env=lab.env).state == "RUNNING", 30)
        started = time.monotonic()
        proc = site_check_process(lab, "--root", str(class_data), timeout="4")
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - started
        assert proc.returncode == 1 and "Traceback" not in err, out + err
        assert "!!   no probe job ran on a compute node" in out and "did not start within 4 s" in out, out
        assert until(lambda: not probe_jobs(lab), 10), probe_jobs(lab)
        assert not probe_sruns()

        proc = site_check_process(lab, "--root", str(class_data), timeout="120")
        assert until(lambda: probe_jobs(lab) or proc.poll() is not None, 90), proc.communicate()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM, out + err
        assert "site-check stopped by SIGTERM" in err and "Traceback" not in err, err
        assert not probe_sruns()
        assert until(lambda: not probe_jobs(lab), 10), probe_jobs(lab)
    finally:
        lab.run(["scancel", busy], check=False)
    assert took < 60, took


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "0", "-1"])
def test_a_timeout_that_is_no_duration_is_refused_with_the_rule(value):
    """SC01 (nan, inf, 1e400: a traceback from selectors) and SC02 (0, -1: sbatch given no time, the names
    blamed): refused before any check, rc 2, in both languages."""
    for lang, words in (("en", "is not a number of seconds greater than 0"), ("tr", "0'dan büyük bir saniye sayısı")):
        done = subprocess.run([sys.executable, "-m", "ddp_tutorial", "site-check", "--no-slurm", "--timeout", value],
                              capture_output=True, text=True, timeout=60, cwd=str(REPO),
                              env=dict(os.environ, DDP_TUTORIAL_LANG=lang))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert words in done.stderr and f"'{value}'" in done.stderr and not done.stdout, done.stdout + done.stderr


LAB_SITE = """\
# The SLURM lab as a site table: workshop is a GPU partition (2 cores per GPU, at least 2 cores, 30 min).
[site]
name = "lab"
title = "the SLURM lab"
[login]
hosts = ["arf-ui1"]
[partitions.debug]
min_cores = 1
[partitions.workshop]
nodes = 2
cores_per_node = 8
gpus_per_node = 4
max_time = "00:30:00"
min_cores = 2
min_gpus = 1
cores_per_gpu = 2
gpu_only = true
"""


def probe_records(lab) -> list:
    """``scontrol show job`` of the probe jobs that ran (kept MinJobAge=600 s after their end)."""
    jobs = lab.run(["scontrol", "show", "job", "-o"], check=False, timeout=30).stdout.splitlines()
    return [line for line in jobs if "JobName=site-check " in line]


@pytest.mark.slurm
def test_the_probe_jobs_are_shaped_from_the_site_table_and_a_reservation_in_30_minutes_is_named(
        slurm_cluster, class_data, tmp_path):
    """T5-10: on a GPU partition of the site's table both probes ask for a GPU and its cores (the old probe:
    1 core, no GPU). P2: a reservation created to start in 30 minutes is read (start, end, nodes, users), the
    line is ok, the probe runs without it; one that shuts this user out is a !!."""
    lab = slurm_cluster
    table = tmp_path / "lab.toml"
    table.write_text(LAB_SITE)
    before = {line.split()[0] for line in probe_records(lab)}
    lab.run(["scontrol", "create", "reservation", "ReservationName=hour05", "StartTime=now+30minutes",
             "Duration=60", "Nodes=n2", "Users=root", "PartitionName=workshop"])
    lab.run(["scontrol", "create", "reservation", "ReservationName=others", "StartTime=now+30minutes",
             "Duration=60", "Nodes=n1", "Users=nobody"])
    try:
        done = site_check(lab, "--root", str(class_data), "--partition", "workshop", "--reservation", "hour05",
                          DDP_TUTORIAL_SITE=str(table))
        closed = site_check(lab, "--root", str(class_data), "--partition", "workshop", "--reservation", "others",
                            DDP_TUTORIAL_SITE=str(table), lang="tr")
    finally:
        for name in ("hour05", "others"):
            lab.run(["scontrol", "delete", f"ReservationName={name}"], check=False)
    checks = done.stdout.splitlines()[:-1]
    assert done.returncode == 0, done.stdout + done.stderr
    assert checks[4].startswith("ok   reservation hour05 has not started yet: it starts at 20"), checks[4]
    assert "(in 30 min)" in checks[4] or "(in 29 min)" in checks[4], checks[4]
    assert "on n2, for users root and accounts (null)" in checks[4], checks[4]
    assert "ran without it (partition workshop, account -; --time=1 --ntasks=1 --gres=gpu:1 --cpus-per-task=2)" \
        in checks[4] and "using 2 processors" in checks[4], checks[4]
    assert checks[5].startswith("ok   a compute node (n"), checks[5]
    records = [line for line in probe_records(lab) if line.split()[0] not in before]
    assert len(records) == 2, records   # this run's probe, and the closed run's
    for record in records:
        assert "NumCPUs=2 " in record and "TresPerNode=gres:gpu:1" in record and "Partition=workshop " in record, record
        assert "TimeLimit=00:02:00" in record, record
    bad = [line for line in closed.stdout.splitlines() if line.startswith("!!   ")]
    assert closed.returncode == 1 and len(bad) == 1, closed.stdout + closed.stderr
    assert bad[0].startswith("!!   others rezervasyonu (") and "kullanıcılar nobody" in bad[0], bad[0]
    assert "root için açık değil: merkezden sınıfın kullanıcılarını ya da hesabını" in bad[0], bad[0]
    assert "tamam bir hesaplama düğümü (n" in closed.stdout, closed.stdout   # the probe ran without it


@pytest.mark.slurm
def test_on_trubas_lab_the_probe_is_accepted_and_the_old_shape_is_refused(truba_lab, class_data):
    """T5-10 on the lab that enforces TRUBA's written rules (job_submit.lua): site-check's probes on akya-cuda
    are accepted and run (1 GPU, 10 cores); the old probe (1 core, no GPU) is refused in the guide's words.
    T5-11: on the login node arf-ui1 the last line says so."""
    lab = truba_lab
    done = site_check(lab, "--root", str(class_data), "--partition", "akya-cuda", DDP_TUTORIAL_SITE="truba")
    lines = done.stdout.splitlines()
    slurm_line = next(line for line in lines if "SLURM" in line and "partition akya-cuda" in line)
    assert slurm_line.startswith("ok   SLURM accepts a job (partition akya-cuda, account -, reservation -; "
                                 "--time=1 --ntasks=1 --gres=gpu:1 --cpus-per-task=10)"), done.stdout
    assert any(line.startswith("ok   a compute node (akya") for line in lines), done.stdout
    assert lines[-2].startswith("ok   site-check ran on arf-ui1 (a login node of "), lines[-2]
    old = lab.run(["sbatch", "--test-only", "--partition=akya-cuda", "--time=1", "--ntasks=1", "--wrap", "true"],
                  check=False)
    assert old.returncode != 0 and "GPU" in old.stderr, old.stdout + old.stderr


@pytest.mark.slurm
def test_no_usable_gpu_inside_a_gpu_job_is_a_failure_in_site_check_and_in_the_jobs_pre_check(
        slurm_cluster, class_data, tmp_path):
    """P5 with the lab's fake GPUs (CUDA_VISIBLE_DEVICES is set, there is no driver: the real case): the torch
    line is !! (not "this node has no GPU: run it in a GPU job"), and a rendered GPU job stops at its
    pre-check with exit code 2 and that line, instead of failing on every rank."""
    import torch
    if torch.cuda.device_count():
        pytest.skip("this machine's torch sees a GPU")
    lab = slurm_cluster
    environ = dict(lab.env, DDP_TUTORIAL_LANG="en")
    environ.pop("DDP_TUTORIAL_ROOT", None)
    inside = subprocess.run(["srun", "--gres=gpu:1", "-c", "1", "-t", "5", sys.executable, "-m", "ddp_tutorial",
                             "site-check", "--no-slurm", "--root", str(class_data)], capture_output=True, text=True,
                            timeout=180, cwd=str(REPO), env=environ)
    torch_line = inside.stdout.splitlines()[1]
    assert inside.returncode == 1, inside.stdout + inside.stderr
    assert torch_line.startswith("!!   torch ") and "SLURM granted this job GPUs (SLURM_STEP_GPUS=" in torch_line, \
        torch_line
    assert "run site-check --no-slurm inside a GPU job" not in inside.stdout
    spec = slurm.JobSpec(template="seed", nodes=1, gpus_per_node=1, nproc_per_node=1, cpus_per_process=1,
                         python=sys.executable, workdir=str(REPO), run_dir=str(tmp_path / "runs"),
                         root=str(class_data), time="00:05:00", dataset="mnist", epochs=1)
    script = slurm.write_script(slurm.render(spec), tmp_path / "gpu-job.sh")
    job = slurm.submit(script, env=environ)
    info = slurm.wait(job, timeout=120, poll=0.5, env=environ)
    log = (tmp_path / "runs" / f"slurm-{job}.out").read_text()
    assert info.exit_code == 2, (info, log)
    assert "!! SLURM granted this job GPUs (SLURM_JOB_GPUS=" in log, log
    assert "Traceback" not in log and "no usable CUDA GPU" not in log, log


def world_folder() -> Path:
    """A folder every user may enter (pytest's tmp_path is 0700: a check as another user would be vacuous)."""
    folder = Path(tempfile.mkdtemp(prefix="site-check-venv-"))
    folder.chmod(0o755)
    return folder


def fake_env(folder: Path, interpreter: Path) -> Path:
    """A class environment's shape: bin/python → ``interpreter``, pyvenv.cfg naming its folder as home."""
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").symlink_to(interpreter)
    (folder / "pyvenv.cfg").write_text(f"home = {interpreter.parent}\n")
    return folder


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not Path(SYSTEM_PYTHON).is_file(),
                    reason="needs root, setpriv and /usr/bin/python3 (to run the environment as nobody)")
def test_the_class_environment_is_checked_as_another_user_runs_it():
    """P1: an environment whose python links to an interpreter behind a folder closed to others (the
    instructor's home, mode 700) is a !! naming that folder, both as root (it also runs it as nobody) and as a
    real non-root user (the folders' modes); an environment on the system's Python is ok, and really runs
    as nobody."""
    base = world_folder()
    try:
        good = fake_env(base / "good", Path(SYSTEM_PYTHON))
        home = base / "home"
        (home / "bin").mkdir(parents=True)
        (home / "bin" / "python3").symlink_to(SYSTEM_PYTHON)
        home.chmod(0o700)
        bad = fake_env(base / "bad", home / "bin" / "python3")
        for lang, folder, words in (("en", good, "ok   class environment "),
                                    ("en", bad, "!!   class environment "), ("tr", bad, "!!   sınıf ortamı ")):
            line = check_venv(folder).text(lang)
            assert line.startswith(words), line
        assert "another user can run it" in check_venv(good).text("en") and "it ran as nobody (65534)" in \
            check_venv(good).text("en")
        closed = check_venv(bad).text("en")
        assert f"other users cannot run it: {home} (mode 700) is closed to them" in closed, closed
        assert "never from one in your home" in closed
        assert check_venv(base / "none").text("en").startswith("!!   class environment ") and \
            "bash scripts/setup.sh --site truba --prefix DIR" in check_venv(base / "none").text("en")
        # the same check as a real non-root user (the modes only): nobody runs site_check's function
        code = ("import sys; sys.path.insert(0, sys.argv[1]); from ddp_tutorial.site_check import check_venv; "
                "from pathlib import Path; [print(check_venv(Path(f)).text('en')) for f in sys.argv[2:]]")
        done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", SYSTEM_PYTHON, "-c",
                               code, str(REPO), str(good), str(bad)], capture_output=True, text=True, timeout=60,
                              cwd="/", env={"PATH": "/usr/bin:/bin", "DDP_TUTORIAL_LANG": "en"})
        out = done.stdout.splitlines()
        assert done.returncode == 0 and len(out) == 2, done.stdout + done.stderr
        assert out[0].startswith("ok   ") and "every folder on the way is open to others" in out[0], out[0]
        assert out[1].startswith("!!   ") and f"{home} (mode 700)" in out[1], out[1]
    finally:
        home_mode = base / "home"
        if home_mode.exists():
            home_mode.chmod(0o755)
        shutil.rmtree(base)


def test_where_it_runs_a_login_node_or_outside_a_job_says_to_run_it_inside_a_session(monkeypatch):
    """T5-11: on a login node of the site's table, or outside any SLURM job, one ok line says to run site-check
    again inside a session; inside a job on a compute node there is no such line."""
    from ddp_tutorial import sites
    truba = sites.load("truba")
    monkeypatch.setattr("socket.gethostname", lambda: "arf-ui2.yonetim")
    monkeypatch.setenv("SLURM_JOB_ID", "12")
    line = check_where(truba)
    assert line.ok and line.text("en").startswith("ok   site-check ran on arf-ui2.yonetim (a login node of TRUBA")
    assert "ports between compute nodes" in line.text("en") and "bir oturumun içinde" in line.text("tr")
    monkeypatch.setattr("socket.gethostname", lambda: "akya3")
    assert check_where(truba) is None and check_where(None) is None
    monkeypatch.delenv("SLURM_JOB_ID")
    assert "(outside any SLURM job)" in check_where(None).text("en")


def test_each_partitions_probe_breaks_none_of_its_written_rules():
    """T5-10: the probe on each partition of TRUBA's table breaks none of its rules (Site.check_job); the old
    probe (1 core, no GPU) breaks the GPU partitions' and the CPU partitions' minimums."""
    from ddp_tutorial import sites
    truba = sites.load("truba")
    for name, partition in truba.partitions.items():
        for minutes in (1, 2):
            shape = dict(flag.lstrip("-").split("=") for flag in probe_shape(partition, minutes))
            gpus = int(shape.get("gres", "gpu:0").split(":")[1])
            assert not truba.check_job(name, nodes=1, gpus_per_node=gpus,
                                       cores_per_node=int(shape.get("cpus-per-task", 1)), time=shape["time"]), name
    old = [v.rule for v in truba.check_job("akya-cuda", nodes=1, gpus_per_node=0, cores_per_node=1, time="1")]
    assert "gpu_only" in old and "min_cores" in old, old
    assert [v.rule for v in truba.check_job("barbun", nodes=1, gpus_per_node=0, cores_per_node=1)] == ["min_cores"]
    assert probe_shape(None, 2) == ["--time=2", "--ntasks=1"]


def test_the_class_settings_come_from_the_packages_variables_before_sbatchs(monkeypatch):
    """T5-12: DDP_TUTORIAL_SLURM_* (and the profile's partition) first, SBATCH_* only from an older ~/.bashrc."""
    env = {"DDP_TUTORIAL_SLURM_PROFILE": "akya-cuda", "SBATCH_PARTITION": "barbun", "SBATCH_ACCOUNT": "old",
           "DDP_TUTORIAL_SLURM_ACCOUNT": "class", "SBATCH_RESERVATION": "old"}
    assert slurm_settings({}, env) == dict(partition="akya-cuda", account="class", reservation="old")
    assert slurm_settings(dict(partition="debug", reservation="r"), {}) == dict(partition="debug", account="",
                                                                                 reservation="r")


@pytest.mark.slurm
def test_inside_a_session_the_probe_is_a_job_of_its_own_and_there_is_no_login_line(slurm_cluster, class_data):
    """T5-11 (with T5-15): site-check run again inside a session, as its login-node line asks (here a one-core
    job step), probes with a job of its own on a compute node, never a step of the session (its SLURM_* are
    not handed on), and says nothing about a login node."""
    lab = slurm_cluster
    environ = dict(lab.env, DDP_TUTORIAL_LANG="en", PYTHONUNBUFFERED="1")
    environ.pop("DDP_TUTORIAL_ROOT", None)
    before = {line.split()[0] for line in probe_records(lab)}
    done = subprocess.run(["srun", "-N1", "-n1", "-c1", "-t", "5", "--job-name=session", sys.executable, "-m",
                           "ddp_tutorial", "site-check", "--timeout", "30", "--root", str(class_data),
                           "--partition", "debug"], capture_output=True, text=True, timeout=240, cwd=str(REPO),
                          env=environ)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[-1] == "All 7 checks ok.", done.stdout + done.stderr
    assert not any("site-check ran on" in line for line in lines), done.stdout
    assert lines[5].startswith("ok   a compute node (n"), lines[5]
    records = [line for line in probe_records(lab) if line.split()[0] not in before]
    assert len(records) == 1 and "JobName=site-check " in records[0], records
