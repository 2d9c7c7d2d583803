"""The class's one job shape (issue 45): notebook 05's job, 05 §4's engines and 08's capstone job come from the
same ``DDP_TUTORIAL_SLURM_*`` variables (T5-5, T5-2, P3); their logs go to the site's scratch folder where there is
one (T5-18); a job submitted from inside a session does not inherit the session's own SLURM variables (T5-15);
engine jobs are never requeued (§5.4); a requeue that made no progress stops (P8).

The notebooks' own cells are run (read from notebooks/src/*.cells), on a machine whose PATH has no ``sbatch``: each
cell builds, previews and writes its job, and stops where it would submit. The session test and the requeue
functions run for real: a job on the SLURM lab (fixture ``slurm_cluster``), the template's bash on real checkpoint
files.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from ddp_tutorial import slurm
from ddp_tutorial.i18n import TutorialError, localize_code, t
from ddp_tutorial.slurm import class_shape
from ddp_tutorial.slurm.jobs import without_session

REPO = Path(__file__).resolve().parent.parent
CELLS = REPO / "notebooks" / "src"
CLASS = {"DDP_TUTORIAL_SLURM_PROFILE": "akya-cuda", "DDP_TUTORIAL_SLURM_GPUS": "1",
         "DDP_TUTORIAL_SLURM_ACCOUNT": "ws-acct", "DDP_TUTORIAL_SLURM_RESERVATION": "ddp-day"}
#: The class shape on TRUBA: akya-cuda, 2 nodes × 1 GPU × 10 cores, with the class's account and reservation.
CLASS_LINES = ("#SBATCH --partition=akya-cuda ", "#SBATCH --account=ws-acct ", "#SBATCH --reservation=ddp-day ",
               "#SBATCH --nodes=2 ", "#SBATCH --gres=gpu:1 ", "#SBATCH --cpus-per-task=10 ")


def _cell(notebook: str, marker: str, lang: str = "en") -> str:
    """The code cell of ``notebook`` that contains ``marker``, in ``lang``."""
    text = (CELLS / notebook).read_text(encoding="utf-8")
    cells = [c.split("\n", 1)[1] for c in re.split(r"^(?==== )", text, flags=re.M) if c.startswith("=== code")]
    found = [c for c in cells if marker in c]
    assert len(found) == 1, (notebook, marker, len(found))
    return localize_code(found[0], lang)


@pytest.fixture
def the_class(monkeypatch, tmp_path):
    """The instructor's class variables, no site table (logs stay in runs), no sbatch on PATH."""
    for key in list(os.environ):
        if key.startswith(("SBATCH_", "DDP_TUTORIAL_SLURM_")):
            monkeypatch.delenv(key)
    for key, value in CLASS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("DDP_TUTORIAL_SITE", "none")
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    empty = tmp_path / "no-slurm-here"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _sbatch_lines(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith("#SBATCH"))


# -- T5-5 / T5-2 / P3: one shape for 05, its engines and 08 (the review's scripts 26 and 27, fixed) -------------

def test_05s_job_is_the_class_shape(the_class):
    namespace = {"CLUSTER": True, "NB": {"dataset": "mnist", "root": str(the_class / "data")},
                 "RUN_DIR": the_class / "runs", "PROFILE_NAME": slurm.workshop_profile(), "sys": sys, "slurm": slurm}
    out = io.StringIO()
    with redirect_stdout(out):
        exec(_cell("05_cluster_slurm.cells", "slurm.class_job("), namespace)
    script = (the_class / "runs" / "seed.sbatch").read_text()
    for line in CLASS_LINES:
        assert line in script, _sbatch_lines(script)
    shown = out.getvalue()
    assert "ws-acct  (in the job script)" in shown and "ddp-day  (in the job script)" in shown, shown
    assert "GPUs per node: 1; cores per node: 10" in shown and "logs, results, checkpoints:" in shown, shown
    assert t("slurm.missing", command="sbatch") in shown  # it stopped where it would have submitted


def test_05s_engines_are_the_class_shape(the_class):
    from ddp_tutorial import ipp
    from ddp_tutorial.ipp import slurm as engines

    namespace = {"CLUSTER": True, "ipp": ipp, "slurm": slurm, "RUN_DIR": the_class / "runs",
                 "PROFILE_NAME": slurm.workshop_profile()}
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(TutorialError) as stopped:
        exec(_cell("05_cluster_slurm.cells", "ipp.start_slurm("), namespace)
    assert stopped.value.key == "slurm.missing"  # after the preview, where it would have submitted
    shown = out.getvalue()
    assert "akya-cuda  (in the job script)" in shown and "ws-acct  (in the job script)" in shown, shown
    assert "ddp-day  (in the job script)" in shown and "GPUs per node: 1; cores per node: 10" in shown, shown
    # the engines' job script, as start_slurm renders it from the same defaults
    spec = engines._engine_spec("akya-cuda", dict(nodes=2, gpus_per_node=None, nproc_per_node=None),
                                dict(time_limit="00:30:00", run_dir=str(the_class / "runs")))
    script = slurm.render_engines(spec)
    for line in (*CLASS_LINES[:5], "#SBATCH --ntasks-per-node=1 ", "#SBATCH --cpus-per-task=10 "):
        assert line in script, _sbatch_lines(script)


def test_08s_job_is_the_class_shape_and_says_to_wait_for_the_instructor(the_class):
    from ddp_tutorial.atomic import write_text

    capstone = the_class / "capstone"
    capstone.mkdir()
    namespace = {"os": os, "CAPSTONE": capstone, "NB": {"root": str(the_class / "data")}, "write_text": write_text}
    out = io.StringIO()
    with redirect_stdout(out):
        exec(_cell("08_own_model.cells", "slurm.class_job("), namespace)
    script = (capstone / "cnn_ddp.sbatch").read_text()
    for line in CLASS_LINES:
        assert line in script, _sbatch_lines(script)
    assert "#SBATCH --ntasks-per-node=1 " in script and "--gres=gpu:4" not in script
    assert "ws-acct  (in the job script)" in out.getvalue()
    for lang, words in (("en", "only if the instructor says so"), ("tr", "Yalnızca eğitmen söylerse gönderin")):
        assert words in localize_code((CELLS / "08_own_model.cells").read_text(encoding="utf-8"), lang)
    assert "slurm.PROFILES[os.environ" not in (CELLS / "08_own_model.cells").read_text(encoding="utf-8")


def test_sbatch_variables_still_win_and_the_preview_says_so(the_class, monkeypatch):
    monkeypatch.setenv("SBATCH_RESERVATION", "other")
    job = slurm.class_job("seed", epochs=1)
    assert job.reservation == "ddp-day"  # the #SBATCH line is the class's
    shown = slurm.class_preview(job)
    assert "from $SBATCH_RESERVATION, which wins over the job script" in shown
    assert t("slurm.preview.overridden", name="SBATCH_RESERVATION", value="other", option="reservation",
             script="ddp-day") in shown


def test_without_the_class_variables_the_seed_shape_and_no_account(monkeypatch):
    for key in list(os.environ):
        if key.startswith(("SBATCH_", "DDP_TUTORIAL_SLURM_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("DDP_TUTORIAL_SITE", "none")
    monkeypatch.setenv("DDP_TUTORIAL_SLURM_PROFILE", "akya-cuda")
    job = slurm.class_job("seed")
    assert (job.gpus_per_node, job.cpus_per_process, job.account, job.reservation) == (3, 10, None, None)
    monkeypatch.setenv("DDP_TUTORIAL_SLURM_PROFILE", "generic")
    job = slurm.class_job("torchrun", cpu_processes=2, script="x.py")
    assert (job.gpus_per_node, job.nproc_per_node, job.cpus_per_process, job.partition) == (0, 2, 1, None)


@pytest.mark.parametrize("lang", ["en", "tr"])
@pytest.mark.parametrize("value,key", [("abc", "class_shape.bad_gpus"), ("-1", "class_shape.bad_gpus"),
                                       ("5", "class_shape.too_many_gpus")])
def test_a_wrong_gpu_count_is_one_clear_line(value, key, lang, monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
    monkeypatch.setenv("DDP_TUTORIAL_SLURM_PROFILE", "akya-cuda")
    monkeypatch.setenv("DDP_TUTORIAL_SLURM_GPUS", value)
    with pytest.raises(TutorialError) as caught:
        slurm.class_job()
    assert caught.value.key == key and "\n" not in str(caught.value) and "DDP_TUTORIAL_SLURM_GPUS" in str(caught.value)


# -- T5-18: logs and checkpoints in the site's scratch folder, where there is one ------------------------------

def _site(tmp_path: Path) -> Path:
    toml = tmp_path / "site.toml"
    toml.write_text(f'[site]\nname = "lab"\n\n[storage]\noutputs = "{tmp_path}/scratch/$USER"\n'
                    'outputs_source = "slurm-betik-ozellik.rst:52"\n')
    return toml


def test_the_class_job_writes_to_the_sites_scratch_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_SITE", str(_site(tmp_path)))
    monkeypatch.setenv("DDP_TUTORIAL_SLURM_PROFILE", "generic")
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    monkeypatch.setenv("USER", "alice")
    (tmp_path / "scratch" / "alice").mkdir(parents=True)
    runs = tmp_path / "scratch" / "alice" / "ddp-runs"
    job = slurm.class_job("seed", epochs=1)
    assert job.run_dir == str(runs)
    assert f"#SBATCH --output={runs}/slurm-%j.out " in slurm.render(job)
    assert "(the scratch folder where LAB's guide wants job outputs, slurm-betik-ozellik.rst:52)" in \
        slurm.class_preview(job)
    assert slurm.class_run_dir("notebook-05", default="elsewhere") == str(runs / "notebook-05")
    assert slurm.class_job("seed", run_dir="mine").run_dir == "mine"  # the user's run_dir wins
    from ddp_tutorial.ipp import slurm as engines
    assert engines._engine_spec("generic", dict(nodes=1), {}).run_dir == str(runs)


def test_without_a_usable_scratch_folder_the_logs_stay_in_runs_and_the_preview_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_SITE", str(_site(tmp_path)))
    monkeypatch.setenv("DDP_TUTORIAL_SLURM_PROFILE", "generic")
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    monkeypatch.setenv("USER", "bob")  # tmp_path/scratch/bob does not exist
    monkeypatch.chdir(tmp_path)
    job = slurm.class_job("seed", epochs=1)
    assert job.run_dir == "runs" and "#SBATCH --output=runs/slurm-%j.out " in slurm.render(job)
    shown = slurm.class_preview(job)
    assert f"logs, results, checkpoints: {tmp_path}/runs — LAB's guide wants job outputs in " \
           f"{tmp_path}/scratch/bob (slurm-betik-ozellik.rst:52)" in shown, shown
    assert not (tmp_path / "scratch").exists()  # nothing made in the user's name


def test_on_a_truba_profile_here_the_scratch_folder_is_absent_and_named(monkeypatch):
    monkeypatch.delenv("DDP_TUTORIAL_SITE", raising=False)
    monkeypatch.setenv("DDP_TUTORIAL_SLURM_PROFILE", "akya-cuda")
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr")
    monkeypatch.setenv("USER", "ayse")
    assert not Path("/arf/scratch/ayse").exists()
    job = slurm.class_job("seed", epochs=1)
    assert job.run_dir == "runs"
    assert "/arf/scratch/ayse" in class_shape.outputs_line(job) and "scratch" in class_shape.outputs_line(job)


# -- T5-15: a job submitted from inside a session does not inherit the session's own variables ------------------

def test_the_session_variables_are_dropped_inside_a_job_only():
    session = {"SLURM_JOB_ID": "7", "SLURM_CPUS_PER_TASK": "4", "SRUN_CPUS_PER_TASK": "4",
               "SLURM_CPU_BIND": "quiet,mask_cpu:0x3", "SLURM_MEM_PER_CPU": "2000", "SLURMD_NODENAME": "n1",
               "PMI_RANK": "0", "SLURM_CONF": "/etc/slurm/slurm.conf", "SBATCH_ACCOUNT": "acct", "PATH": "/bin",
               "DDP_TUTORIAL_SLURM_RESERVATION": "ddp-day"}
    assert without_session(session) == {"SLURM_CONF": "/etc/slurm/slurm.conf", "SBATCH_ACCOUNT": "acct",
                                        "PATH": "/bin", "DDP_TUTORIAL_SLURM_RESERVATION": "ddp-day"}
    login = {k: v for k, v in session.items() if k != "SLURM_JOB_ID"}
    assert without_session(login) == login  # outside a job: what the user set stays


def test_the_engines_sbatch_drops_them_too(monkeypatch):
    from ddp_tutorial.ipp import slurm as engines

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert engines.submit_command() == ["sbatch"]
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SRUN_CPUS_PER_TASK", "4")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    command = engines.submit_command()
    assert command[0] == "env" and command[-1] == "sbatch"
    assert ["-u", "SLURM_JOB_ID"] == command[command.index("SLURM_JOB_ID") - 1:command.index("SLURM_JOB_ID") + 1]
    assert "SRUN_CPUS_PER_TASK" in command and "SLURM_CONF" not in command


CHILD = """#!/bin/bash
#SBATCH --nodes=1 --ntasks-per-node=1 --cpus-per-task=1 --time=2
#SBATCH --output={out}
echo "child batch: SLURM_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK"
srun bash -c 'echo "child step: SLURM_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK"'
echo "child srun exit $?"
"""
# The session: a -c 2 job whose environment holds what a job's environment holds (SRUN_CPUS_PER_TASK, as SLURM
# 22.05's release notes advise every job script to export, and as the package's templates do); from it, the
# package submits a -c 1 job, as a notebook kernel in the session does.
SESSION = """#!/bin/bash
#SBATCH --nodes=1 --ntasks=1 --cpus-per-task=2 --time=3
#SBATCH --output={out}
export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK
cd {repo} && {python} -c 'import sys; from ddp_tutorial import slurm; print("child", slurm.submit(sys.argv[1]))' {child}
"""


@pytest.mark.slurm
def test_a_job_submitted_from_a_session_has_its_own_cores(slurm_cluster, tmp_path):
    lab = slurm_cluster
    child = tmp_path / "child.sh"
    child.write_text(CHILD.format(out=tmp_path / "child.out"))
    session = tmp_path / "session.sh"
    session.write_text(SESSION.format(out=tmp_path / "session.out", repo=REPO, python=sys.executable, child=child))
    job = slurm.submit(session, env=lab.env)
    info = slurm.wait(job, timeout=120, poll=0.5, max_poll=2, env=lab.env)
    log = (tmp_path / "session.out").read_text()
    assert info.succeeded, f"{info.describe()}\n{log}"
    child_job = re.search(r"^child (\d+)$", log, re.M).group(1)
    child_info = slurm.wait(child_job, timeout=120, poll=0.5, max_poll=2, env=lab.env)
    out = (tmp_path / "child.out").read_text()
    # Before T5-15 the child's srun read the session's SRUN_CPUS_PER_TASK=2 and failed:
    # "Unable to create step for job N: More processors requested than permitted".
    assert child_info.succeeded and "child step: SLURM_CPUS_PER_TASK=1" in out, out
    assert "child srun exit 0" in out and "More processors" not in out, out


# -- §5.4: the engines' job is never requeued ---------------------------------------------------------------------

def test_engine_jobs_opt_out_of_requeue():
    for spec in (slurm.JobSpec(nodes=2, gpus_per_node=2), slurm.JobSpec(nodes=1)):
        for lang in ("en", "tr"):
            assert re.search(r"^#SBATCH --no-requeue$", slurm.render_engines(spec, lang=lang), re.M)
    assert "--no-requeue" not in slurm.render(slurm.JobSpec(epochs=1))


# -- P8: a requeue that made no progress stops ------------------------------------------------------------------

def _requeue_part(template: str, lang: str) -> str:
    """The rendered template's progress functions and its code after the training ended, with STATUS=75."""
    text = slurm.render(slurm.JobSpec(template=template, nodes=2, nproc_per_node=2, requeue=True,
                                      signal_seconds=60, time="00:10:00", epochs=2), lang=lang)
    functions = text[text.index("checkpoint_position() {"):text.index("\n", text.index("STARTED_AT_FILE="))]
    branch = text[text.index('if [ "$STATUS" -ne 0 ] && [ "$STOP_REQUESTED" -eq 1 ]'):]
    return f"{functions}\nSTATUS=75\nSTOP_REQUESTED=1\n{branch}"


def _checkpoint(directory: Path, epoch: int, step: int) -> None:
    from ddp_tutorial.checkpoint import save_checkpoint
    directory.mkdir(exist_ok=True)
    save_checkpoint(directory, dict(model={}, optimizer={}, epoch=epoch, step=step))


def _tools(tmp_path: Path) -> str:
    """A PATH with the one outside command the code needs besides bash's own (cat), and no SLURM: where the
    code would requeue, ``scontrol`` is "command not found" and the exit code stays the script's."""
    tools = tmp_path / "tools"
    if not tools.is_dir():
        tools.mkdir()
        (tools / "cat").symlink_to("/bin/cat")
    return str(tools)


def _after_exit_75(code: str, tmp_path: Path, **changes):
    env = dict(PATH=_tools(tmp_path), PYTHONPATH=str(REPO), PYTHON=sys.executable, RUN_DIR=str(tmp_path),
               CHECKPOINTS=str(tmp_path / "checkpoint-7"), REQUEUE="1", SLURM_JOB_ID="7")
    env.update(changes)
    return subprocess.run(["/bin/bash", "-c", code], env={k: v for k, v in env.items() if v is not None},
                          capture_output=True, text=True, timeout=60)


def test_a_requeue_without_progress_stops_and_says_why(tmp_path):
    """Every template renders the same code after exit 75 (asserted); it runs here once, through P8's loop."""
    parts = {template: _requeue_part(template, "en") for template in sorted(slurm.TEMPLATES)}
    assert len(set(parts.values())) == 1, sorted(parts)
    code = parts["seed"]
    checkpoints = tmp_path / "checkpoint-7"
    marker = checkpoints / ".requeued-at"

    _checkpoint(checkpoints, 0, 0)  # the first run was signalled before its first step
    run = _after_exit_75(code, tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert ("!! job 7 is not requeued: its checkpoint has not moved past where this run started (epoch 0, step 0)"
            in run.stdout) and "--preempt-signal" in run.stdout and "requeueing" not in run.stdout
    assert not marker.exists()

    _checkpoint(checkpoints, 3, 80)  # progress: requeued, and where it stood is kept for the next run
    run = _after_exit_75(code, tmp_path)
    assert "requeueing job 7" in run.stdout and run.returncode == 75, run.stdout + run.stderr
    assert marker.read_text().split() == ["3", "80"]

    run = _after_exit_75(code, tmp_path)  # the next run resumed at 3/80 and stopped there again (P8's loop)
    assert run.returncode == 2 and "(epoch 3, step 80)" in run.stdout, run.stdout + run.stderr

    _checkpoint(checkpoints, 3, 81)
    assert _after_exit_75(code, tmp_path).returncode == 75
    _checkpoint(checkpoints, 4, 0)
    assert _after_exit_75(code, tmp_path).returncode == 75
    assert marker.read_text().split() == ["4", "0"]


def test_where_a_checkpoint_stands_is_read_as_resume_reads_it_without_torch(tmp_path):
    """``python -m ddp_tutorial.resume DIR``, which every template runs after exit 75, answers from the file
    ``--resume`` loads (a real model's, mid-epoch, with the random state) without importing torch; what the
    pickle names is never imported or called; a file that is no checkpoint has no position."""
    import pickle
    import zipfile

    import torch
    from ddp_tutorial.checkpoint import checkpoint_path, save_checkpoint, stands_at
    from ddp_tutorial.model import DeepNeuralNetwork

    model = DeepNeuralNetwork(3, 784, 32, 10)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.zeros(2, 784)).sum().backward()
    optimizer.step()
    folder = tmp_path / "checkpoint-7"
    folder.mkdir()
    save_checkpoint(folder, dict(model=model.state_dict(), optimizer=optimizer.state_dict(), epoch=3, step=80,
                                 partial_loss=[1.5, 2.5], partial_steps=[80, 80], rng=torch.get_rng_state()))
    saved = torch.load(checkpoint_path(folder), map_location="cpu", weights_only=True)
    assert stands_at(folder) == (saved["epoch"], saved["step"]) == (3, 80)

    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "ddp_tutorial.resume", str(folder)],
                         cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0 and run.stdout == "3 80\n", run.stdout + run.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}
    assert "ddp_tutorial.checkpoint_position" in imported and "torch" not in imported

    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    with zipfile.ZipFile(checkpoint_path(folder), "w") as archive:  # torch.save's layout, with a payload in it
        archive.writestr("checkpoint/data.pkl", pickle.dumps(dict(epoch=4, step=0, model=Payload()), protocol=2))
    assert stands_at(folder) == (4, 0) and not marker.exists()

    for content in (b"", b"not a zip", checkpoint_path(folder).read_bytes()[:60]):
        checkpoint_path(folder).write_bytes(content)
        assert stands_at(folder) is None, content
    checkpoint_path(folder).unlink()
    assert stands_at(folder) is None
    os.mkfifo(checkpoint_path(folder))  # refused at once, as --resume refuses it, never waited on
    assert stands_at(folder) is None


def test_the_no_progress_line_is_in_the_jobs_language(tmp_path):
    _checkpoint(tmp_path / "checkpoint-7", 1, 0)
    (tmp_path / "checkpoint-7" / ".requeued-at").write_text("1 0\n")
    run = _after_exit_75(_requeue_part("seed", "tr"), tmp_path)
    assert run.returncode == 2
    assert "!! iş 7 yeniden kuyruğa alınmıyor: kontrol noktası bu çalıştırmanın başladığı yerden (epoch 1, adım 0) " \
           "ileri gitmedi" in run.stdout, run.stdout


def test_a_users_own_script_is_requeued_as_before(tmp_path):
    """Its checkpoints are its own: the template cannot read them, and requeues after exit 75 as before."""
    text = slurm.render(slurm.JobSpec(template="per-gpu", nodes=1, nproc_per_node=1, requeue=True,
                                      signal_seconds=60, time="00:10:00", script="own.py"), lang="en")
    functions = text[text.index("checkpoint_position() {"):text.index("\n", text.index("STARTED_AT_FILE="))]
    branch = text[text.index('if [ "$STATUS" -ne 0 ] && [ "$STOP_REQUESTED" -eq 1 ]'):]
    run = _after_exit_75(f"{functions}\nSTATUS=75\nSTOP_REQUESTED=1\n{branch}", tmp_path, CHECKPOINTS=None)
    assert run.returncode == 75 and "requeueing job 7" in run.stdout, run.stdout + run.stderr


def _wait_for_line(job: str, pattern: str, env, timeout: float) -> str:
    """The job's log once it shows ``pattern``: read every 0.1 s; slurmctld is asked where it is once, and
    whether the job ended early once a second (each question is an scontrol process)."""
    path = slurm.log_path(job, env=env)
    deadline, next_question = time.monotonic() + timeout, 0.0
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        if re.search(pattern, text, re.M):
            return text
        if time.monotonic() >= next_question:
            next_question = time.monotonic() + 1.0
            if slurm.job_info(job, env=env).finished:
                raise AssertionError(f"job {job} ended before {pattern!r} appeared:\n{text}")
        time.sleep(0.1)
    raise AssertionError(f"{pattern!r} did not appear within {timeout} s in job {job}'s log")


@pytest.mark.slurm
def test_a_requeued_run_stopped_before_its_first_step_is_not_requeued_again(slurm_cluster, tmp_path):
    """P8 on the lab: the first run is stopped after epoch 0 (progress: requeued), the requeued run while its
    processes still start (as a warning at a run's start does): its checkpoint has not moved, the job ends.
    One node × 2 processes: the decision is the batch script's, on its one batch host, whatever the job's size."""
    from idx_files import write_mnist_like

    lab = slurm_cluster
    write_mnist_like(tmp_path / "data", dataset="mnist", n_train=3000, n_test=1000, seed=0)
    spec = slurm.JobSpec(template="seed", nodes=1, nproc_per_node=2, cpus_per_process=1, python=sys.executable,
                         workdir=str(REPO), run_dir=str(tmp_path / "runs"), root=str(tmp_path / "data"),
                         time="00:10:00", dataset="mnist", epochs=8, batch_size=64, seed=0, job_name="p8",
                         signal_seconds=60, requeue=True)
    job = slurm.submit(slurm.write_script(slurm.render(spec, lang="en"), tmp_path / "p8.sh"), env=lab.env)
    _wait_for_line(job, r"^epoch 0:", lab.env, timeout=180)
    slurm.cancel(job, signal="USR1", batch=True, env=lab.env)  # what --signal=B:USR1@S does
    _wait_for_line(job, r"restart 1,", lab.env, timeout=180)
    time.sleep(0.5)  # the batch script's trap is set; its training processes are still starting
    slurm.cancel(job, signal="USR1", batch=True, env=lab.env)
    info = slurm.wait(job, timeout=180, poll=0.5, max_poll=2, env=lab.env)
    log = slurm.read_log(job, env=lab.env)
    recorded = (tmp_path / "runs" / f"checkpoint-{job}" / ".requeued-at").read_text().split()
    assert info.state == "FAILED" and info.exit_code == 2 and info.restarts == 1, f"{info.describe()}\n{log}"
    assert log.count("requeueing job") == 1, log
    assert (f"!! job {job} is not requeued: its checkpoint has not moved past where this run started "
            f"(epoch {recorded[0]}, step {recorded[1]})") in log, log
