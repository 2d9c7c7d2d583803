"""The SLURM lab in TRUBA's shape refuses what TRUBA's guide forbids, in the guide's words (issue 45).

``truba_lab`` (tests/conftest.py; ``SlurmLab(site="truba")``): nodes akya1–akya4 (akya-cuda, 40 cores,
4 fake GPUs each) and barbun1 (barbun, 40 cores); ``debug`` over all of them (the default, 4 h), each
partition with the table's MaxTime; ``job_submit.lua`` written from ``ddp_tutorial/sites/truba.toml`` by
tests/helpers/job_submit.py; a login node named ``arf-ui1``. Each forbidden job is refused by ``sbatch``
and by ``sbatch --test-only`` (job_submit runs for both) with the rule's Turkish sentence, its source line
in the guide and the English meaning; the class day's own shapes (``[day]`` in the table) are accepted, and
a job of 05's shape runs. The tests without a mark check the generator alone.
"""

from __future__ import annotations

import pytest

from ddp_tutorial import sites

import job_submit

TRUBA = sites.load("truba")
DAY = TRUBA.section("day")
AKYA = TRUBA.partitions["akya-cuda"]


def _src(partition: str, rule: str) -> str:
    spec = TRUBA.partitions[partition].sources[rule]
    return spec if isinstance(spec, str) else ", ".join(spec)


# (what the job asks, the words the refusal must say: the guide's sentence with its source, the English meaning)
FORBIDDEN = {
    "gpu-partition-without-gpu": (
        ["-p", "akya-cuda", "-c", "10"],
        [f"akya-cuda: GPU kuyruklarına gönderilen işlerin GPU talep eden işler olması zorunludur "
         f"(TRUBA kılavuzu {_src('akya-cuda', 'gpu_only')})", "a GPU partition runs only jobs that ask for GPUs",
         "this job asks for 10 cores, 0 GPUs"]),
    "one-core-on-barbun": (
        ["-p", "barbun", "-c", "1"],
        [f"barbun: En az 20 çekirdek (TRUBA kılavuzu {_src('barbun', 'min_cores')})", "at least 20 cores per job",
         "this job asks for 1 core, 0 GPUs"]),
    "four-cores-per-gpu-on-akya": (
        ["-p", "akya-cuda", "--gres=gpu:4", "-c", "16"],
        [f"akya-cuda kümesi için 10*[GPU_SAYISI] çekirdek (TRUBA kılavuzu {_src('akya-cuda', 'cores_per_gpu')})",
         "at least 10 cores for each GPU asked", "this job asks for 16 cores, 4 GPUs"]),
    "five-hours-on-debug": (
        ["-p", "debug", "-c", "4", "-t", "05:00:00"],
        [f"debug: maksimum 4 saat (TRUBA kılavuzu {_src('debug', 'max_time')})", "at most 04:00:00",
         "time 05:00:00 (partition debug)"]),
    "five-cores-per-gpu-by-task": (
        ["-p", "akya-cuda", "-n", "2", "--gpus-per-task=1", "-c", "5"],
        [f"akya-cuda kümesi için 10*[GPU_SAYISI] çekirdek (TRUBA kılavuzu {_src('akya-cuda', 'cores_per_gpu')})",
         "this job asks for 10 cores, 2 GPUs"]),
    "fewer-cores-than-akya-minimum": (
        ["-p", "akya-cuda", "--gpus=1", "--cpus-per-gpu=4"],
        [f"akya-cuda: En az 10 çekirdek ve 1 GPU (TRUBA kılavuzu {_src('akya-cuda', 'min_cores')})",
         "at least 10 cores and 1 GPU per job"]),
}

# the class day's shapes, from the table's [day]: a JupyterLab session, and 05's job in akya-cuda
SESSION = ["-p", DAY["session_partition"], "-c", str(DAY["session_cores"]), "-t", DAY["session_time"]]
CLASS_JOB = ["-p", DAY["job_partition"], "-N", str(DAY["job_nodes"]), f"--gres=gpu:{DAY['job_gpus_per_node']}",
             "-c", str(AKYA.cores_per_gpu * DAY["job_gpus_per_node"]), "-t", DAY["job_time"]]


# ---------------------------------------------------------------------- the generator alone
def test_time_formats():
    assert [job_submit.minutes(t) for t in ("04:00:00", "3-00:00:00", "30", "2:30", "1-02:03", "3-12")] == \
        [240, 4320, 30, 3, 1563, 5040]
    assert [job_submit.duration_tr(t) for t in ("04:00:00", "3-00:00:00", "00:15:00")] == \
        ["4 saat", "3 gün", "15 dakika"]


def test_words_are_the_guides_with_their_source():
    said = job_submit.words(TRUBA, AKYA)
    assert said["min"] == ("akya-cuda: En az 10 çekirdek ve 1 GPU (TRUBA kılavuzu "
                           "1-kaynaklar/arf/arf_kuyruk_bilgisi.rst:113) — at least 10 cores and 1 GPU per job")
    assert set(said) == {"min", "gpu_only", "cores_per_gpu", "max_time"}
    assert set(job_submit.words(TRUBA, TRUBA.partitions["barbun"])) == {"min", "max_time"}
    text = job_submit.lua(TRUBA, ["debug", "akya-cuda", "barbun"])
    assert 'local DEFAULT_PARTITION = "debug"' in text and '["akya-cuda"]' in text and '["orfoz"]' not in text


# ---------------------------------------------------------------------- on the lab
def _sbatch(lab, args, test_only=False):
    cmd = ["sbatch", *(["--test-only"] if test_only else []), *args, "-o", "/dev/null", "--wrap", "true"]
    return lab.run(cmd, check=False, timeout=30)


@pytest.mark.slurm
def test_lab_has_the_sites_shape(truba_lab):
    lab = truba_lab
    rows = lab.run(["sinfo", "-h", "-N", "-o", "%N %P %c %G %l"]).stdout.split("\n")
    got = sorted(tuple(r.split()) for r in rows if r.strip())
    want = sorted([(f"akya{i}", p, "40", "gpu:v100:4", t) for i in range(1, 5)  # typed: the table names the GPU
                   for p, t in (("debug*", "4:00:00"), ("akya-cuda", "3-00:00:00"))]
                  + [("barbun1", "debug*", "40", "(null)", "4:00:00"),
                     ("barbun1", "barbun", "40", "(null)", "3-00:00:00")])
    assert got == want
    assert TRUBA.partitions["akya-cuda"].cores_per_node == 40 and TRUBA.partitions["debug"].max_time == "04:00:00"


@pytest.mark.slurm
def test_debug_picks_a_node_type_by_constraint(truba_lab):
    """TRUBA's debug spans every node type; -C <partition name> picks one (the nodes' features)."""
    out = truba_lab.run(["srun", "-p", "debug", "-C", "barbun", "-c", "4", "hostname"], timeout=30).stdout.split()
    assert out == ["barbun1"]
    out = truba_lab.run(["srun", "-p", "debug", "-C", "akya-cuda", "--mem=100G", "hostname"], timeout=30).stdout
    assert out.strip().startswith("akya")


@pytest.mark.slurm
def test_login_node_has_the_sites_name(truba_lab):
    import subprocess

    out = subprocess.run(truba_lab.login_command(["hostname"]), env=truba_lab.env, capture_output=True,
                         text=True, timeout=30, check=True).stdout.strip()
    assert out == "arf-ui1" and TRUBA.is_login_host(out)


@pytest.mark.slurm
@pytest.mark.parametrize("test_only", [False, True], ids=["sbatch", "test-only"])
@pytest.mark.parametrize("case", sorted(FORBIDDEN))
def test_forbidden_job_is_refused_in_the_sites_words(truba_lab, case, test_only):
    args, said = FORBIDDEN[case]
    before = truba_lab.queue()
    proc = _sbatch(truba_lab, args, test_only)
    assert proc.returncode != 0, f"accepted: {args}\n{proc.stdout}{proc.stderr}"
    for words in said:
        assert words in proc.stderr, f"{words!r} missing from:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr
    assert not set(truba_lab.queue()) - set(before)  # no job queued (an earlier test's job may end meanwhile)


@pytest.mark.slurm
def test_srun_is_refused_too(truba_lab):
    proc = truba_lab.run(["srun", "-p", "akya-cuda", "-c", "10", "true"], check=False, timeout=30)
    assert proc.returncode != 0 and "GPU talep eden işler" in proc.stderr, proc.stderr


@pytest.mark.slurm
@pytest.mark.parametrize("args", [SESSION, CLASS_JOB, ["-p", "barbun", "-c", "20"], ["-c", "4"],
                                  ["-p", "akya-cuda", "--gpus=2", "--cpus-per-gpu=10"],
                                  ["-p", "akya-cuda", "-n", "2", "--gpus-per-task=1", "-c", "10"]],
                         ids=["class-session", "05-class-job", "barbun-20", "default-partition", "cpus-per-gpu",
                              "gpus-per-task"])
def test_allowed_shape_is_accepted(truba_lab, args):
    proc = _sbatch(truba_lab, args, test_only=True)
    assert proc.returncode == 0, f"{args}\n{proc.stdout}{proc.stderr}"
    proc = _sbatch(truba_lab, [*args, "--hold"])
    assert proc.returncode == 0 and proc.stdout.startswith("Submitted batch job"), proc.stderr
    truba_lab.run(["scancel", proc.stdout.split()[-1]])


@pytest.mark.slurm
def test_class_job_runs_from_the_login_node(truba_lab, tmp_path):
    """05's shape (2 akya-cuda nodes × 1 GPU, 10 cores each) runs; submitted from arf-ui1."""
    import subprocess

    tmp_path.chmod(0o755)
    out = tmp_path / "job.out"
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n"
                      'srun sh -c \'echo "$(hostname) $SLURM_PROCID gpus=$CUDA_VISIBLE_DEVICES '
                      'cpus=$SLURM_CPUS_PER_TASK from=$SLURM_SUBMIT_HOST"\'\n')
    proc = subprocess.run(truba_lab.login_command(["sbatch", "--wait", *CLASS_JOB, "-o", str(out), str(script)]),
                          env=truba_lab.env, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr + out.read_text() if out.exists() else proc.stderr
    rows = sorted(out.read_text().split("\n"))
    assert [r for r in rows if r] == ["akya1 0 gpus=0 cpus=10 from=arf-ui1", "akya2 1 gpus=0 cpus=10 from=arf-ui1"]


@pytest.mark.slurm
def test_lab_and_the_tables_check_agree(truba_lab):
    """The lab (SLURM + job_submit.lua) and ``Site.check_job`` (what ``slurm render`` refuses) say the same
    for every uniform job shape that fits the lab's nodes: nodes × (GPUs, cores) per node, and a time (150
    shapes; the lab's one barbun node takes no 2-node job, which the table's 119 would)."""
    disagree = []
    for partition in ("akya-cuda", "barbun", "debug"):
        for nodes in [n for n in (1, 2) if n <= len(truba_lab.partitions[partition])]:
            for gpus in (0, 1, 4):
                for cores in (1, 4, 10, 20, 40):
                    for time in ("03:00:00", "05:00:00"):
                        args = ["-p", partition, "-N", str(nodes), "--ntasks-per-node=1", "-c", str(cores),
                                "-t", time, *([f"--gres=gpu:{gpus}"] if gpus else [])]
                        refused = _sbatch(truba_lab, args, test_only=True).returncode != 0
                        broken = TRUBA.check_job(partition, nodes=nodes, gpus_per_node=gpus, cores_per_node=cores,
                                                 time=time)
                        if refused != bool(broken):
                            disagree.append((args, "lab refuses" if refused else "lab accepts", broken))
    assert not disagree, "\n".join(map(str, disagree))


@pytest.mark.slurm
def test_a_lab_whose_rules_cannot_load_does_not_start(monkeypatch):
    """slurmctld ends on a job_submit.lua it cannot load; the lab says so with its log, at once (never a lab
    without its rules, never a client's timeout)."""
    import time

    from slurmlab import LabError, SlurmLab

    monkeypatch.setattr(job_submit, "lua", lambda *args, **kwargs: "this is not lua (\n")
    lab = SlurmLab(site="truba")
    t0 = time.monotonic()
    with pytest.raises(LabError) as caught:
        lab.start(timeout=60)
    assert "slurmctld exited" in str(caught.value) and "job_submit" in str(caught.value)
    assert time.monotonic() - t0 < 15 and not lab.path().exists()
