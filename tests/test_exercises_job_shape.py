"""Issue 49 P2: notebook 05's two job exercises hold a job to ONE set of shape rules
(ddp_tutorial/exercises/job_shape.py): the #SBATCH numbers, the training started by srun, and the partition's
written rules from the site table (ddp_tutorial/sites). Each rule is broken once in ``fixed_sbatch``'s repaired
seed script and once in ``ddp_job``'s solution, both on akya-cuda (4 GPUs and 40 cores a node, 10 cores per GPU):
both checks refuse it with the same message, in both languages.

Before, ``fixed_sbatch`` accepted three of these that ``ddp_job`` refused (the attendee's review): ``--gres=gpu:5``
("10 GPUs"), a training line without srun, ``--cpus-per-task=64``; and ``ddp_job`` accepted too few cores per GPU.
"""

from __future__ import annotations

import string

import pytest

from ddp_tutorial import exercises as ex
from ddp_tutorial import i18n
from ddp_tutorial.exercises.core import CORRECT, WRONG

pytestmark = pytest.mark.exercises

DDP_LAUNCH = "srun --kill-on-bad-exit=1 python -m torch.distributed.run"

# rule: (edits of fixed_sbatch's script, edits of ddp_job's), each edit (old, new)
RULES = {
    "gpus_per_node": ([("--gres=gpu:3", "--gres=gpu:5")], [("--gres=gpu:4", "--gres=gpu:5")]),
    "cores_per_node": ([("--cpus-per-task=30", "--cpus-per-task=64")], [("--cpus-per-task=40", "--cpus-per-task=64")]),
    "cores_per_gpu": ([("--cpus-per-task=30", "--cpus-per-task=8")], [("--cpus-per-task=40", "--cpus-per-task=20")]),
    "no_cpus": ([("#SBATCH --cpus-per-task=30\n", "")], [("#SBATCH --cpus-per-task=40\n", "")]),
    "nodes": ([("--nodes=2", "--nodes=30"), ("--ntasks=2", "--ntasks=30")], [("--nodes=2", "--nodes=30")]),
    "max_time": ([("--time=02:00:00", "--time=4-00:00:00")], [("--time=00:30:00", "--time=4-00:00:00")]),
    "gpu_only": ([("#SBATCH --gres=gpu:3 # number of GPUs used in each node\n", "")], [("#SBATCH --gres=gpu:4\n", "")]),
    "ntasks": ([("--ntasks=2", "--ntasks=6")], [("#SBATCH --nodes=2\n", "#SBATCH --nodes=2\n#SBATCH --ntasks=6\n")]),
    "number": ([("--nodes=2", "--nodes=two")], [("--nodes=2", "--nodes=two")]),
    "zero": ([("--cpus-per-task=30", "--cpus-per-task=0")], [("--cpus-per-task=40", "--cpus-per-task=0")]),
    "no_srun": ([("srun -N 2 -n 2 python", "python")], [(DDP_LAUNCH, "python -m torch.distributed.run")]),
    "no_training": ([("srun -N 2 -n 2 python 01_distributed.py\n", "")],
                    [(DDP_LAUNCH, "srun --kill-on-bad-exit=1 echo")]),
}


@pytest.fixture(params=["en", "tr"])
def lang(request, monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", request.param)
    return request.param


@pytest.fixture
def job_folder(tmp_path, monkeypatch):
    """ddp_job's submission folder (runs/ in it), no SLURM on the PATH: both checks grade by reading."""
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    monkeypatch.delenv("DDP_TUTORIAL_SITE", raising=False)  # the shipped table: TRUBA's
    return tmp_path


def _edited(text, edits):
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    return text


def _fixed_sbatch_on_akya():
    """fixed_sbatch's solution, written for akya-cuda: 3 GPUs × 10 cores."""
    from ddp_tutorial.exercises.cluster import SBATCH_CODE
    namespace = {}
    exec(SBATCH_CODE, namespace)
    return _edited(namespace["fixed_sbatch"], [("--partition=palamut-cuda", "--partition=akya-cuda"),
                                               ("--cpus-per-task=48", "--cpus-per-task=30")])


def _pieces(key, lang):
    return [literal for literal, *_ in string.Formatter().parse(i18n.messages(lang)[key]) if literal.strip()]


def test_both_solutions_pass_on_akya_cuda(job_folder):
    from ddp_tutorial.exercises.job_script import solution_text
    assert ex.fixed_sbatch.evaluate(_fixed_sbatch_on_akya()).status == CORRECT
    assert ex.ddp_job.evaluate(solution_text()).status == CORRECT


@pytest.mark.parametrize("rule", sorted(RULES))
def test_fixed_sbatch_and_ddp_job_refuse_each_shape_rule_alike(rule, lang, job_folder):
    from ddp_tutorial.exercises.job_script import solution_text
    fixed_edits, job_edits = RULES[rule]
    key = f"ex.job_shape.{rule}"
    for exercise, job in ((ex.fixed_sbatch, _edited(_fixed_sbatch_on_akya(), fixed_edits)),
                          (ex.ddp_job, _edited(solution_text(), job_edits))):
        outcome = exercise.evaluate(job)
        assert outcome.status == WRONG and outcome.key == key, (exercise.name, outcome.text)
        for piece in _pieces(key, lang):
            assert piece in outcome.text, (exercise.name, piece, outcome.text)
        assert "Traceback" not in outcome.text


def test_the_site_rules_say_who_states_them(job_folder, monkeypatch):
    """The numbers and the guide's line come from the site table: akya-cuda's 4 GPUs a node (its guide's line), and
    the --cpus-per-task to write (30 for 3 GPUs in one task; 40 for torchrun's 4; 10 for one task per GPU)."""
    from ddp_tutorial.exercises.job_script import solution_text
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    text = ex.fixed_sbatch.evaluate(_edited(_fixed_sbatch_on_akya(), RULES["gpus_per_node"][0])).text
    assert "asks for 5 GPUs per node, but the nodes of akya-cuda have 4 (TRUBA's guide, 1-kaynaklar/arf/" in text, text
    assert "#SBATCH --gres=gpu:4" in text
    text = ex.fixed_sbatch.evaluate(_edited(_fixed_sbatch_on_akya(), RULES["cores_per_gpu"][0])).text
    assert "#SBATCH --cpus-per-task=30" in text and "gpu.rst:46" in text, text
    text = ex.ddp_job.evaluate(_edited(solution_text(), RULES["cores_per_gpu"][1])).text
    assert "gives each GPU 5 CPU cores" in text and "#SBATCH --cpus-per-task=40" in text, text
    text = ex.ddp_job.evaluate(_edited(solution_text(), RULES["cores_per_node"][1])).text
    assert "64 CPU cores per node" in text and "at most #SBATCH --cpus-per-task=40" in text, text
    text = ex.fixed_sbatch.evaluate(_edited(_fixed_sbatch_on_akya(), RULES["no_srun"][0])).text
    assert "Line 20 `python 01_distributed.py` starts the training without srun" in text, text


def test_a_wrong_launch_layout_is_named_before_the_cores_it_multiplies(job_folder):
    """ddp_job: --ntasks-per-node=4 with torchrun asks 4 × 40 cores a node; the mistake is the 4 torchruns."""
    from ddp_tutorial.exercises.job_script import solution_text
    job = _edited(solution_text(), [("--ntasks-per-node=1", "--ntasks-per-node=4")])
    assert ex.ddp_job.evaluate(job).key == "ex.ddp_job.tasks_torchrun"


@pytest.mark.slurm
def test_what_both_checks_refuse_for_a_site_rule_the_truba_lab_refuses_too(truba_lab, tmp_path, monkeypatch):
    """The rules are the site's, not the checks' own: on the lab that enforces TRUBA's written rules (its
    job_submit.lua, nodes akya1–akya4 of akya-cuda), sbatch --test-only accepts both solutions and refuses every
    job that both checks refuse for a rule of the site table. Nothing is queued."""
    from ddp_tutorial.exercises.job_script import solution_text
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    bases = (("fixed_sbatch", _edited(_fixed_sbatch_on_akya(), [("#SBATCH --account=my-account #your_user_account\n",
                                                                 "")])),
             ("ddp_job", solution_text()))

    def test_only(text, name):
        path = tmp_path / f"{name}.sbatch"
        path.write_text(text)
        return truba_lab.run(["sbatch", "--test-only", str(path)], check=False, cwd=tmp_path)

    for name, base in bases:
        said = test_only(base, name)
        assert said.returncode == 0, (name, said.stdout + said.stderr)
    for rule in ("gpus_per_node", "cores_per_node", "cores_per_gpu", "no_cpus", "gpu_only", "nodes", "max_time"):
        for index, (name, base) in enumerate(bases):
            said = test_only(_edited(base, RULES[rule][index]), f"{name}-{rule}")
            assert said.returncode != 0, (rule, name, said.stdout + said.stderr)
    assert truba_lab.queue() == []


SITE_WITHOUT_GPU_RULES = """
[site]
name = "loose"
title = "A cluster whose table states no GPU-only rule"

[partitions.gpu-y]
nodes = 8
cores_per_node = 40
gpus_per_node = 4
cores_per_gpu = 1
max_time = "1-00:00:00"

[exercises]
job_script_partition = "gpu-y"
"""


def test_where_the_site_states_no_gpu_only_rule_ddp_job_still_asks_for_the_gpus(job_folder, monkeypatch, lang):
    """The shape rules are the session's table: where it has no GPU-only rule, a job without GPUs breaks none of
    them, and ddp_job names what its own exercise asks (every GPU of a node); the table's own cores per GPU (1)
    still hold: one torchrun task with 1 core for 4 GPUs breaks them."""
    from ddp_tutorial.exercises.job_script import solution_text
    table = job_folder / "loose.toml"
    table.write_text(SITE_WITHOUT_GPU_RULES)
    monkeypatch.setenv("DDP_TUTORIAL_SITE", str(table))
    job = solution_text().replace("akya-cuda", "gpu-y")
    assert ex.ddp_job.evaluate(job).status == CORRECT
    outcome = ex.ddp_job.evaluate(_edited(job, [("#SBATCH --gres=gpu:4\n", "")]))
    assert outcome.key == "ex.ddp_job.no_gpus", outcome.text
    outcome = ex.ddp_job.evaluate(_edited(job, [("#SBATCH --cpus-per-task=40\n", "")]))  # 1 core, 4 GPUs
    assert outcome.key == "ex.job_shape.no_cpus" and "#SBATCH --cpus-per-task=4" in outcome.text, outcome.text
