"""SLURM jobs: submit, state, wait, cancel, logs, results — and real jobs on the two-node test cluster.

Tests without a mark need no cluster. Tests marked ``slurm`` use the session fixture
``slurm_cluster`` (tests/helpers/slurmlab.py): munged, slurmctld and two slurmd "nodes" n1, n2 in
their own network namespaces, with fake GPUs. Jobs run this interpreter (``sys.executable``)
from the repository, so they see the code under test.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddp_tutorial import slurm
from ddp_tutorial.i18n import TutorialError

REPO = Path(__file__).resolve().parent.parent
BASH = "/bin/bash"


# The training every cluster job runs: 3000 learnable images, 8 short epochs (≈0.3 s each on
# 2 cores). The requeued jobs are interrupted after the first epoch, which leaves a window of
# about two seconds; the template jobs serve as their uninterrupted reference.
TRAIN = dict(dataset="mnist", epochs=8, batch_size=64, seed=0)
N_TRAIN, N_TEST = 3000, 1000
# The four jobs on one node check ports and overlap, not the training: 256 images (2 steps of a rank).
N_SMALL = 256



def test_missing_slurm_is_a_clear_error(tmp_path):
    script = slurm.write_script(slurm.render(slurm.JobSpec(run_dir=str(tmp_path / "runs"))), tmp_path / "job.sh")
    empty = {"PATH": str(tmp_path / "no-such-bin")}
    for call in (lambda: slurm.submit(script, env=empty), lambda: slurm.job_info("1", env=empty),
                 lambda: slurm.cancel("1", env=empty), lambda: slurm.wait("1", env=empty)):
        with pytest.raises(TutorialError) as caught:
            call()
        assert caught.value.key == "slurm.missing"
        assert "SLURM" in caught.value.text("en") and "SLURM" in caught.value.text("tr")


def test_submit_without_script(tmp_path):
    with pytest.raises(TutorialError) as caught:
        slurm.submit(tmp_path / "nope.sh")
    assert caught.value.key == "slurm.no_script"


def test_parse_scontrol():
    line = ("JobId=7 JobName=ddp tutorial UserId=root(0) JobState=COMPLETED Reason=None Dependency=(null) "
            "Requeue=1 Restarts=1 ExitCode=0:0 NodeList=n[1-2] StdOut=/tmp/runs/slurm-7.out WorkDir=/work/main")
    fields = slurm.parse_scontrol(line)
    assert fields["JobName"] == "ddp tutorial"
    assert fields["JobState"] == "COMPLETED" and fields["Restarts"] == "1"
    assert fields["StdOut"] == "/tmp/runs/slurm-7.out" and fields["NodeList"] == "n[1-2]"


def test_lab_says_what_is_missing(monkeypatch):
    import slurmlab

    monkeypatch.setattr(slurmlab.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(slurmlab.shutil, "which", lambda name, *a, **k: None)
    monkeypatch.setattr(slurmlab, "_in_sbin", lambda name: False)
    reasons = slurmlab.SlurmLab.missing()
    assert any("root" in r for r in reasons)
    assert any("slurmctld" in r and "apt-get install" in r for r in reasons)


# ------------------------------------------------------------------------------------------
# The real cluster


@pytest.mark.slurm
def test_cluster_two_hosts(slurm_cluster, tmp_path):
    """(a) The harness itself: srun across both nodes, and an sbatch job with (fake) GPUs."""
    lab = slurm_cluster
    out = lab.run(["srun", "-N2", "-n2", "sh", "-c", 'echo "$(hostname) $SLURM_PROCID $SLURM_NODEID"'])
    rows = sorted(line.split() for line in out.stdout.splitlines())
    assert rows == [["n1", "0", "0"], ["n2", "1", "1"]], out.stdout

    script = tmp_path / "hello.sh"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gres=gpu:2\n"
                      f"#SBATCH --output={tmp_path}/hello-%j.out\n"
                      'srun sh -c \'echo "$(hostname) $SLURM_PROCID gpus=$CUDA_VISIBLE_DEVICES"\'\n')
    job = slurm.submit(script, env=lab.env)
    info = slurm.wait(job, timeout=60, poll=0.3, max_poll=2, env=lab.env)
    assert info.succeeded, info
    rows = sorted(slurm.read_log(job, env=lab.env).split("\n"))
    assert [r for r in rows if r] == ["n1 0 gpus=0,1", "n2 1 gpus=0,1"]

    # The clean-up of crashed earlier labs leaves a living lab alone.
    from slurmlab import cleanup_stale
    assert not [item for item in cleanup_stale() if lab.tag in item or str(lab.dir) in item]
    # two partitions over the same two nodes: debug (the default) and workshop (a site's named partition)
    assert lab.run(["sinfo", "-h", "-o", "%P %T"]).stdout.split() == ["debug*", "idle", "workshop", "idle"]


@pytest.mark.slurm
def test_seed_gpu_script_is_accepted_by_sbatch(slurm_cluster, tmp_path):
    """(c) The seed's job — 2 nodes × 3 GPUs — rendered, parsed by bash and accepted by sbatch."""
    spec = slurm.JobSpec(template="seed", nodes=2, gpus_per_node=3, cpus_per_process=2, job_name="pytorch",
                         python=sys.executable, run_dir=str(tmp_path / "runs"), time="02:00:00")
    script = slurm.write_script(slurm.render(spec), tmp_path / "seed-gpu.sh")
    check = subprocess.run([BASH, "-n", str(script)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    answer = slurm.test_only(script, env=slurm_cluster.env)
    assert re.search(r"Job \d+ to start at .* on nodes n\[1-2\]", answer), answer
    assert slurm_cluster.queue() == []  # --test-only queues nothing
    # SLURM refuses what the nodes cannot give: 5 GPUs per node.
    too_many = slurm.write_script(slurm.render(slurm.JobSpec(gpus_per_node=5, run_dir=str(tmp_path))),
                                  tmp_path / "too-many.sh")
    with pytest.raises(TutorialError) as caught:
        slurm.test_only(too_many, env=slurm_cluster.env)
    assert caught.value.key == "slurm.command_failed"


def _spec(template: str, run_dir: Path, data: Path, **changes) -> slurm.JobSpec:
    values = dict(template=template, nodes=2, nproc_per_node=2, cpus_per_process=1, python=sys.executable,
                  workdir=str(REPO), run_dir=str(run_dir), root=str(data), time="00:10:00", **TRAIN)
    values.update(changes)
    return slurm.JobSpec(**values)


@pytest.fixture(scope="module")
def cluster_data(tmp_path_factory) -> Path:
    from idx_files import write_mnist_like

    root = tmp_path_factory.mktemp("slurm-data")
    write_mnist_like(root, dataset="mnist", n_train=N_TRAIN, n_test=N_TEST, seed=0)
    return root


@pytest.fixture(scope="module")
def small_data(tmp_path_factory) -> Path:
    from idx_files import write_mnist_like

    root = tmp_path_factory.mktemp("slurm-small-data")
    write_mnist_like(root, dataset="mnist", n_train=N_SMALL, n_test=N_SMALL // 4, seed=0)
    return root


@pytest.fixture(scope="module")
def template_jobs(slurm_cluster, cluster_data, tmp_path_factory):
    """(b) One job per template, 2 nodes × 2 CPU processes, all submitted at once; waited for."""
    lab = slurm_cluster
    base = tmp_path_factory.mktemp("slurm-templates")
    canary = base / "canary"
    # A value full of shell syntax rides along in every job's environment: it must stay text.
    note = f"$(touch {canary}); `touch {canary}`; ' \" && touch {canary}"
    jobs = {}
    for template in slurm.TEMPLATES:
        run_dir = base / template
        spec = _spec(template, run_dir, cluster_data, job_name=f"t-{template}", env=(("DDP_NOTE", note),))
        script = slurm.write_script(slurm.render(spec), base / f"{template}.sh")
        jobs[template] = (slurm.submit(script, env=lab.env), run_dir)
    done = {}
    for template, (job, run_dir) in jobs.items():
        info = slurm.wait(job, timeout=240, poll=0.5, max_poll=2, env=lab.env)
        log = slurm.read_log(job, env=lab.env) if slurm.log_path(job, env=lab.env).exists() else "(no log)"
        result = slurm.read_result(job, env=lab.env) if info.succeeded else None
        done[template] = dict(job=job, info=info, log=log, result=result, run_dir=run_dir)
    return dict(jobs=done, canary=canary)


LAUNCHER = {"seed": "spawn", "per-gpu": "slurm", "torchrun": "torchrun"}


@pytest.mark.slurm
@pytest.mark.parametrize("template", sorted(slurm.TEMPLATES))
def test_template_trains_across_two_nodes(template_jobs, template):
    job = template_jobs["jobs"][template]
    info, result, log = job["info"], job["result"], job["log"]
    assert info.state == "COMPLETED" and info.exit_code == 0, f"{info.describe()}\n{log}"
    assert result["world_size"] == 4
    assert result["num_nodes"] == 2
    assert result["launcher"] == LAUNCHER[template]
    assert result["test_accuracy"] > 70
    assert len(result["epochs"]) == TRAIN["epochs"]
    assert info.nodes == "n[1-2]"
    port = 15000 + int(job["job"]) % 15000
    assert f"n1:{port}" in log  # MASTER_ADDR from the node list, MASTER_PORT from the job id
    assert not template_jobs["canary"].exists()


@pytest.mark.slurm
def test_templates_agree_on_the_weights(template_jobs):
    """Same seed, same world size: spawn, srun-per-task and torchrun train the identical model."""
    digests = {t: j["result"]["weights_sha256"] for t, j in template_jobs["jobs"].items() if j["result"]}
    assert len(digests) == len(slurm.TEMPLATES) and len(set(digests.values())) == 1, digests


@pytest.mark.slurm
def test_cli_reports_a_finished_job(template_jobs, slurm_cluster, monkeypatch, capsys):
    from ddp_tutorial.cli import main

    for key in ("PATH", "SLURM_CONF"):
        monkeypatch.setenv(key, slurm_cluster.env[key])
    job = template_jobs["jobs"]["seed"]["job"]
    assert main(["slurm", "status", job]) == 0
    assert "COMPLETED" in capsys.readouterr().out
    assert main(["slurm", "wait", job, "--poll", "1"]) == 0
    capsys.readouterr()
    assert main(["slurm", "result", job]) == 0
    assert json.loads(capsys.readouterr().out)["world_size"] == 4
    assert main(["slurm", "logs", job, "--tail", "3"]) == 0
    assert "exit code 0" in capsys.readouterr().out
    assert main(["slurm", "status", "999999"]) == 1


def _signal_after_line(jobs, pattern: str, env, timeout: float) -> None:
    """Send SIGUSR1 to each job's batch script as soon as its log shows ``pattern``. The logs are read every
    0.1 s; slurmctld is asked where they are once, and whether a job ended early once a second (each
    question is an scontrol process)."""
    waiting = dict(jobs)
    logs = {name: slurm.log_path(job, env=env) for name, job in jobs.items()}
    deadline, next_question = time.monotonic() + timeout, 0.0
    while waiting and time.monotonic() < deadline:
        ask = time.monotonic() >= next_question
        if ask:
            next_question = time.monotonic() + 1.0
        for name, job in list(waiting.items()):
            path = logs[name]
            if path.exists() and re.search(pattern, path.read_text(errors="replace"), re.M):
                slurm.cancel(job, signal="USR1", batch=True, env=env)  # what --signal=B:USR1@S does
                del waiting[name]
            elif ask and slurm.job_info(job, env=env).finished:
                raise AssertionError(f"job {job} ({name}) ended before {pattern!r} appeared:\n"
                                     + (path.read_text(errors="replace") if path.exists() else "(no log)"))
        time.sleep(0.1)
    assert not waiting, f"{pattern!r} did not appear within {timeout} s in the logs of {waiting}"


def _final_weights(checkpoint_dir: Path):
    import torch
    from ddp_tutorial.checkpoint import checkpoint_path

    state = torch.load(checkpoint_path(checkpoint_dir), map_location="cpu", weights_only=True)
    return state["model"], state["epoch"]


@pytest.fixture(scope="module")
def requeued_jobs(slurm_cluster, cluster_data, tmp_path_factory):
    """(d) One job per template, 2 nodes × 2 processes, the template jobs' training with requeue on, all
    submitted at once: SIGUSR1 to each batch script once its log shows epoch 0 (inside the run, never before
    the training started) → checkpoint → exit 75 → scontrol requeue → the rerun; waited for. The two tests
    below read these runs (the same weights as the uninterrupted run; every worker of every launcher stopped):
    one run per template serves both, as neither changes what the run does."""
    lab = slurm_cluster
    base = tmp_path_factory.mktemp("slurm-requeue")
    jobs, scripts = {}, {}
    for template in sorted(slurm.TEMPLATES):
        spec = _spec(template, base / template, cluster_data, job_name=f"rq-{template}", signal_seconds=60,
                     requeue=True)
        script = slurm.write_script(slurm.render(spec), base / f"{template}.sh")
        jobs[template], scripts[template] = slurm.submit(script, env=lab.env), script.read_text()
    _signal_after_line(jobs, r"^epoch 0:", env=lab.env, timeout=180)
    done = {}
    for template, job in jobs.items():
        info = slurm.wait(job, timeout=240, poll=0.5, max_poll=2, env=lab.env)
        log = slurm.read_log(job, env=lab.env) if slurm.log_path(job, env=lab.env).exists() else "(no log)"
        result = slurm.read_result(job, env=lab.env) if info.succeeded else None
        done[template] = dict(job=job, info=info, log=log, result=result, script=scripts[template])
    return done


@pytest.mark.slurm
def test_requeue_resumes_with_the_same_weights(template_jobs, requeued_jobs, slurm_cluster):
    """(d) The requeued runs above end with the weights of the uninterrupted runs (the template jobs), for
    every template: spawn, srun per task and torchrun."""
    lab = slurm_cluster
    for template, job in requeued_jobs.items():
        info, log, result = job["info"], job["log"], job["result"]
        assert "#SBATCH --signal=B:USR1@60" in job["script"]
        assert info.state == "COMPLETED", f"{info.describe()}\n{log}"
        assert info.restarts == 1, log
        assert "SIGUSR1: asking the training to checkpoint and stop" in log
        assert "requeueing job" in log and "restart 1," in log
        assert result["resumed_from"] is not None
        reference = template_jobs["jobs"][template]
        assert result["epochs"] == pytest.approx(reference["result"]["epochs"], abs=1e-6)
        mine, epoch = _final_weights(slurm.checkpoint_dir(job["job"], env=lab.env))
        theirs, _ = _final_weights(slurm.checkpoint_dir(reference["job"], env=lab.env))
        assert epoch == TRAIN["epochs"]
        diff = max((mine[name] - tensor).abs().max().item() for name, tensor in theirs.items())
        same = result["weights_sha256"] == reference["result"]["weights_sha256"]
        print(f"{template}: resumed from {result['resumed_from']}, bit-identical={same}, max |Δw| = {diff:.3g}")
        assert diff <= 1e-6, f"{template}: resumed run differs from the uninterrupted one by {diff:.3g}"
        # Since Resume.settle_ddp_buckets, a resumed run is bit-identical at world 4 too.
        assert same, f"{template}: resumed weights are close ({diff:.3g}) but not bit-identical"


# The step's exit code after every worker stopped for the requeue: spawn and srun report the workers' 75, torchrun
# its own 1 after passing the signal on. srun's --kill-on-bad-exit counts the first task's exit (75 or 1) as a
# failure and terminates the tasks still ending (143: a full clean-clone run saw node 0's spawn parent, its ranks
# already stopped, terminated so). What never comes is 138: torchrun killed by the signal it should pass on.
STEP_CODE = {"seed": {"75", "143"}, "per-gpu": {"75", "143"}, "torchrun": {"1", "143"}}


@pytest.mark.slurm
def test_sigusr1_reaches_every_worker_of_every_template_on_the_lab(requeued_jobs):
    """Each template (seed: spawn per node; per-gpu: srun per process; torchrun per node), 2 nodes × 2
    processes, requeue on: SIGUSR1 to the batch script after epoch 0 → all 4 workers stop at one step with a
    checkpoint and exit 75 → scontrol requeue → the rerun resumes at that step and completes. (The torchrun
    template's launch on one node, SIGUSR1 to torchrun alone: tests/test_torchrun_preemption.py.)"""
    for template, job in requeued_jobs.items():
        info, log, result = job["info"], job["log"], job["result"]
        assert info.state == "COMPLETED" and info.restarts == 1, f"{template}: {info.describe()}\n{log}"
        stopped = re.findall(r"rank (\d): stop requested \(SIGUSR1\) — checkpoint written at epoch (\d+), step (\d+); "
                             r"exiting with code 75", log)
        assert sorted(rank for rank, _, _ in stopped) == ["0", "1", "2", "3"], f"{template}:\n{log}"
        assert len({(epoch, step) for _, epoch, step in stopped}) == 1, f"{template}:\n{log}"
        assert "requeueing job" in log and "restart 1," in log, f"{template}:\n{log}"
        # The step's own code after the signal. slurmstepd signals every process of the step, so the workers
        # get SIGUSR1 under any torchrun; torchrun told to handle it waits for their checkpoint and exits 1,
        # one that is not dies at once (138) and srun's --kill-on-bad-exit then races the workers' checkpoint.
        code = re.search(r"^training finished with exit code (\d+)", log, re.M).group(1)
        assert code in STEP_CODE[template], f"{template}: step exit code {code}\n{log}"
        position = {"epoch": int(stopped[0][1]), "step": int(stopped[0][2])}
        assert result["resumed_from"] == position, (template, result["resumed_from"], log)
        assert len(result["epochs"]) == TRAIN["epochs"] and result["world_size"] == 4
        print(f"{template}: job {job['job']} stopped by SIGUSR1 at {position}, requeued, resumed there")


@pytest.mark.slurm
def test_four_jobs_at_once_on_one_node(slurm_cluster, small_data, tmp_path):
    """(e) Four 2-process jobs share node n1 at the same time: ports from the job ids never collide."""
    lab = slurm_cluster
    jobs = []
    for i in range(4):
        spec = _spec("per-gpu", tmp_path / f"job{i}", small_data, nodes=1, epochs=1, job_name=f"four-{i}")
        script = slurm.write_script(slurm.render(spec), tmp_path / f"job{i}.sh")
        jobs.append(slurm.submit(script, sbatch_args=["--nodelist=n1"], env=lab.env))
    # Waited for one after the other: slurm.wait asks slurmctld less often while nothing changes.
    infos = {job: slurm.wait(job, timeout=240, poll=0.5, max_poll=2, env=lab.env) for job in jobs}
    assert all(info.finished for info in infos.values()), "jobs did not finish in time"
    starts = [infos[j].fields.get("StartTime") for j in jobs]
    ends = [infos[j].fields.get("EndTime") for j in jobs]
    assert max(starts) < min(ends), f"the jobs did not overlap: {starts} {ends}"
    ports = set()
    for job in jobs:
        log = slurm.read_log(job, env=lab.env)
        assert infos[job].succeeded, f"{infos[job].describe()}\n{log}"
        assert infos[job].nodes == "n1"
        assert "Address already in use" not in log
        assert slurm.read_result(job, env=lab.env)["world_size"] == 2
        ports.add(re.search(r"master n1:(\d+)", log).group(1))
    assert len(ports) == 4


def test_controller_address_from_slurm_config():
    from ddp_tutorial.ipp import slurm as ipp_slurm

    assert ipp_slurm.slurmctld_host("SlurmctldHost[0]        = slabctl(10.233.0.254)\n") == "10.233.0.254"
    assert ipp_slurm.slurmctld_host("Foo = 1\nSlurmctldHost[0] = levrek1\n") == "levrek1"
    assert ipp_slurm.slurmctld_host("nothing here") is None
    assert ipp_slurm.remote.address_towards("127.0.0.1") is None  # loopback: the nodes could not reach it
    with pytest.raises(TutorialError) as caught:
        ipp_slurm.check_address("10.255.255.77")  # not an address of this machine
    assert caught.value.key == "ipp.slurm_bad_address"


@pytest.fixture(scope="module")
def ipp_on_slurm(slurm_cluster, cluster_data, tmp_path_factory):
    """tests/helpers/ipp_slurm_driver.py, run on the lab's login node: engines through SLURM, training,
    and two failures. Returns what it reported."""
    lab = slurm_cluster
    base = tmp_path_factory.mktemp("ipp-slurm")
    out = base / "report.json"
    env = dict(lab.env, IPYTHONDIR=str(base / "ipython"), PYTHONUNBUFFERED="1", DDP_TUTORIAL_LANG="en")
    began = time.monotonic()
    proc = subprocess.run(lab.login_command([sys.executable, str(REPO / "tests" / "helpers" / "ipp_slurm_driver.py"),
                                             str(out), str(base / "runs"), str(cluster_data)]),
                          env=env, capture_output=True, text=True, timeout=600, cwd=str(REPO))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and out.exists(), output
    report = json.loads(out.read_text())
    report.update(output=output, seconds=time.monotonic() - began, ipython_dir=str(base / "ipython"))
    return report


@pytest.mark.slurm
def test_ipp_engines_started_through_slurm_train_across_nodes(ipp_on_slurm, template_jobs, slurm_cluster):
    """#4.6: from the login node, 2 nodes × 2 engines through SLURM; the controller listens on the
    login node's address on the nodes' network; ranks follow SLURM's task order; the training on
    them gives the same weights as the sbatch templates' jobs (same seed, world size 4)."""
    r = ipp_on_slurm
    assert "the controller listens on 10.233.0.254" in r["output"], r["output"]
    assert r["hosts"] == ["n1", "n1", "n2", "n2"] and r["local_ranks"] == [0, 1, 0, 1]
    assert r["master_addr"] == "10.233.0.1"  # rank 0's address on the nodes' network, not its node name
    assert [(w["rank"], w["host"], w["local_rank"], w["world_size"]) for w in r["where"]] == [
        (0, "n1", 0, 4), (1, "n1", 1, 4), (2, "n2", 0, 4), (3, "n2", 1, 4)]
    assert {w["sum"] for w in r["where"]} == {10.0}  # 1 + 2 + 3 + 4, all-reduced across the nodes
    train = r["train"]
    assert [t["rank"] for t in train] == [0, 1, 2, 3] and {t["world_size"] for t in train} == {4}
    assert {t["num_nodes"] for t in train} == {2}
    assert train[0]["test_accuracy"] > 70
    assert len({t["weights_sha256"] for t in train}) == 1
    digests = {j["result"]["weights_sha256"] for j in template_jobs["jobs"].values() if j["result"]}
    assert digests == {train[0]["weights_sha256"]}, (digests, train[0])
    assert r["same_engines"]
    assert all(on and frozen > 100_000 for on, frozen in r["collector"]), r["collector"]  # collector.loading


@pytest.mark.slurm
def test_ipp_slurm_failures_are_clear_and_leave_nothing(ipp_on_slurm, slurm_cluster):
    """A rank killed mid-collective: one clear error naming it, well before the process group's
    timeout, and the engines' job ended. A controller the nodes cannot reach: a clear error
    saying so, the job cancelled. Afterwards: no job in the queue and no engine process left."""
    r = ipp_on_slurm
    died = r["died"]
    assert died["key"] == "ipp.failed" and "rank 2" in died["message"], died
    assert died["seconds"] < 60, died
    assert not r["after_death_current"]
    unreachable = r["unreachable"]
    # The engines either give up connecting (the job fails) or wait: both are reported as such.
    assert unreachable["key"] in ("ipp.slurm_start_ended", "ipp.slurm_no_register"), unreachable
    assert "127.0.0.1" in unreachable["message"] and "controller_ip=" in unreachable["message"]
    assert not r["unreachable_current"]
    killed = r["killed_kernel"]  # a kernel SIGKILLed with SLURM engines: its watchdog cancels the job
    assert killed["job_id"] and killed["seconds"] < 10 and killed["states"][-1] == "", killed
    assert slurm_cluster.queue() == []
    leftovers = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if r["ipython_dir"] in text:
            leftovers.append(text)
    assert not leftovers, leftovers



# ------------------------------------------------------------------------------------------
# Your own script through `--script` (issue 11, req 5): a DDP script that imports nothing from
# ddp_tutorial, world 4 across both nodes, with each template that can run it.

USER_SCRIPT = REPO / "tests" / "helpers" / "user_scripts" / "allreduce.py"


def test_the_user_script_imports_nothing_from_the_package():
    import ast

    tree = ast.parse(USER_SCRIPT.read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert names and not [n for n in names if n.split(".")[0] == "ddp_tutorial"], names


@pytest.mark.slurm
def test_own_script_runs_on_two_nodes(slurm_cluster, tmp_path, capsys):
    from ddp_tutorial.cli import main

    lab = slurm_cluster
    jobs = {}
    for template in slurm.SCRIPT_TEMPLATES:
        out = tmp_path / template / "out"
        out.mkdir(parents=True)
        script = tmp_path / f"{template}.sh"
        assert main(["slurm", "render", "--template", template, "--nodes", "2", "--nproc-per-node", "2",
                     "--python", sys.executable, "--run-dir", str(tmp_path / template), "--time", "00:10:00",
                     "--job-name", f"own-{template}", "--script", str(USER_SCRIPT),
                     "--script-args", f"{out} --tag 'two words'", "-o", str(script)]) == 0, capsys.readouterr()
        jobs[template] = (slurm.submit(script, env=lab.env), out)
    for template, (job, out) in jobs.items():
        info = slurm.wait(job, timeout=240, poll=0.5, max_poll=2, env=lab.env)
        log = slurm.read_log(job, env=lab.env) if slurm.log_path(job, env=lab.env).exists() else "(no log)"
        assert info.succeeded, f"{template}: {info.describe()}\n{log}"
        records = sorted((json.loads(p.read_text()) for p in out.glob("rank-*.json")), key=lambda r: r["rank"])
        assert [r["rank"] for r in records] == [0, 1, 2, 3], (template, log)
        assert {r["sum"] for r in records} == {10.0}  # 1 + 2 + 3 + 4, all-reduced across the nodes
        assert {r["world_size"] for r in records} == {4}
        assert [r["host"] for r in records] == ["n1", "n1", "n2", "n2"], records
        assert {r["tag"] for r in records} == {"two words"}
        envs = [r["env"] for r in records]
        assert [e["RANK"] for e in envs] == ["0", "1", "2", "3"]
        assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "0", "1"]
        assert {e["WORLD_SIZE"] for e in envs} == {"4"} and {e["LOCAL_WORLD_SIZE"] for e in envs} == {"2"}
        assert {e["MASTER_ADDR"] for e in envs} == {"n1"}
        port = 15000 + int(job) % 15000
        assert f"n1:{port}" in log  # the rendezvous / master port from the job id
        if template == "per-gpu":
            assert {e["MASTER_PORT"] for e in envs} == {str(port)}
        print(template, job, "MASTER_PORT seen by the script:", sorted({e["MASTER_PORT"] for e in envs}))


@pytest.mark.slurm
def test_own_script_follows_the_preemption_contract(slurm_cluster, tmp_path):
    """slurm/README.md's pattern, copied into tests/helpers/user_scripts/preempt.py: SIGUSR1 → the script's
    own checkpoint → exit 75 → scontrol requeue → the rerun resumes from the checkpoint."""
    lab = slurm_cluster
    jobs, where = {}, {}
    for template in slurm.SCRIPT_TEMPLATES:
        run_dir = tmp_path / template
        run_dir.mkdir()
        spec = slurm.JobSpec(template=template, nodes=2, nproc_per_node=1, python=sys.executable,
                             run_dir=str(run_dir), time="00:10:00", job_name=f"own-rq-{template}",
                             signal_seconds=60, requeue=True, script=str(USER_SCRIPT.parent / "preempt.py"),
                             script_args=(str(run_dir / "ckpt.pt"), str(run_dir / "result.json"), "6"))
        script = slurm.write_script(slurm.render(spec), tmp_path / f"{template}.sh")
        jobs[template] = slurm.submit(script, env=lab.env)
        where[template] = run_dir
    _signal_after_line(jobs, r"^epoch 1$", env=lab.env, timeout=180)
    for template, job in jobs.items():
        info = slurm.wait(job, timeout=240, poll=0.5, max_poll=2, env=lab.env)
        log = slurm.read_log(job, env=lab.env)
        assert info.state == "COMPLETED", f"{template}: {info.describe()}\n{log}"
        assert info.restarts == 1, log
        assert "requeueing job" in log and "restart 1," in log
        result = json.loads((where[template] / "result.json").read_text())
        assert result["restart"] == "1" and 2 <= result["started_at"] < 6, (result, log)


@pytest.mark.slurm
def test_partition_and_reservation_reach_the_job_and_a_wrong_name_is_named(slurm_cluster, tmp_path):
    """Issue 34.5 on the lab: a reservation made with `scontrol create reservation`, a job rendered with the
    lab's second partition and that reservation — previewed, accepted by `sbatch --test-only`, run inside it —
    and SBATCH_RESERVATION honoured for a script without the line. A wrong reservation or partition gets our
    message naming what to change. Accounts: the lab has no slurmdbd (AccountingStorageType=none), so SLURM
    checks no account and any --account is accepted; only a site (`sacctmgr`) can refuse one."""
    lab = slurm_cluster
    name = f"ddp-ws-{lab.tag[-6:]}"
    where = tmp_path / "where.py"
    where.write_text("import os, socket\nprint(socket.gethostname(), os.environ.get('SLURM_JOB_PARTITION'), "
                     "os.environ.get('SLURM_JOB_RESERVATION'))\n")

    def script(file: str, **changes) -> tuple:
        spec = slurm.JobSpec(**dict(dict(template="per-gpu", nodes=2, nproc_per_node=1, python=sys.executable,
                                         run_dir=str(tmp_path / "runs"), time="00:05:00", script=str(where)),
                                    **changes))
        return spec, slurm.write_script(slurm.render(spec), tmp_path / file)

    lab.run(["scontrol", "create", "reservation", f"ReservationName={name}", "StartTime=now", "Duration=10",
             "Users=root", "Nodes=ALL", "Flags=IGNORE_JOBS"])
    try:
        spec, path = script("in.sh", partition="workshop", reservation=name, account="ddp-class")
        shown = slurm.preview(spec, environ={})
        assert "workshop" in shown and name in shown and "ddp-class" in shown
        assert "accepts" in slurm.check_accepted(path, spec, env=dict(lab.env, DDP_TUTORIAL_LANG="en"))
        plain_spec, plain = script("plain.sh")
        jobs = [slurm.submit(path, env=lab.env), slurm.submit(plain, env=dict(lab.env, SBATCH_RESERVATION=name))]
        for job in jobs:
            info = slurm.wait(job, timeout=120, poll=0.3, max_poll=1, env=lab.env)
            assert info.succeeded, (info.describe(), slurm.read_log(job, env=lab.env))
            assert info.fields.get("Reservation") == name, info.fields
        rows = sorted(slurm.read_log(jobs[0], env=lab.env).split())
        assert rows.count(name) == 2 and rows.count("workshop") == 2, rows

        for file, changes, key, named in (("bad-res.sh", dict(reservation="no-such-res"), "slurm.refused.reservation",
                                           "no-such-res"),
                                          ("bad-part.sh", dict(partition="no-such-part"), "slurm.refused.partition",
                                           "no-such-part")):
            bad_spec, bad = script(file, **changes)
            with pytest.raises(TutorialError) as caught:
                slurm.check_accepted(bad, bad_spec, env=lab.env)
            assert caught.value.key == key, caught.value.text("en")
            assert named in caught.value.text("en") and named in caught.value.text("tr")
        assert lab.queue() == []  # --test-only queues nothing
    finally:
        lab.run(["scontrol", "delete", f"ReservationName={name}"], check=False)
