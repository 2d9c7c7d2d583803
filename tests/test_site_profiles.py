"""Jobs follow the site profile everywhere: every job the notebooks submit — 05's training job, 05's
SLURM engines, 08's capstone job — takes its cores per GPU from the profile, and for every profile
the rendered script meets the centre's rule (TRUBA's guide: cores to request per GPU).

The notebooks' own calls are read from notebooks/src/*.cells (``slurm.JobSpec(…)``,
``slurm.JobSpec.from_profile(…)``, ``ipp.start_slurm(…)``), evaluated with each profile in turn, and
rendered by the package, exactly as the notebook would do on that partition."""

import ast
import re
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ddp_tutorial import slurm
from ddp_tutorial.ipp import slurm as ipp_slurm

REPO = Path(__file__).resolve().parent.parent
CELLS = REPO / "notebooks" / "src"

# TRUBA's guide, source/2-temel_bilgiler/gpu.rst ("core-gpu-count"): cores to request per GPU, and
# hesaplama_kumeleri.rst: GPUs per node (docs/truba.md has the table).
TRUBA_RULE = {"barbun-cuda": (2, 20), "akya-cuda": (4, 10), "palamut-cuda": (8, 16), "kolyoz-cuda": (4, 16)}
GPU_PROFILES = [name for name, p in slurm.PROFILES.items() if p.gpus_per_node]


def _code_cells(name: str):
    text = (CELLS / name).read_text()
    text = re.sub(r"⟪(.*?)‖(.*?)⟫", lambda m: m.group(2), text, flags=re.S)  # the English side
    cells, current = [], None
    for line in text.splitlines():
        if line.startswith("=== "):
            current = [] if line.strip() == "=== code" else None
            if current is not None:
                cells.append(current)
        elif current is not None:
            current.append(line)
    return ["\n".join(c) for c in cells]


def _calls(name: str):
    """(kind, call node, the cell's own ``gpus = …`` expression or None) of every job-building call."""
    found = []
    for source in _code_cells(name):
        try:
            tree = ast.parse(source)
        except SyntaxError:  # IPython magics
            tree = ast.parse("\n".join(line for line in source.splitlines() if not line.startswith("%")))
        gpus = next((n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                     and [ast.unparse(t) for t in n.targets] == ["gpus"]), None)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = ast.unparse(node.func)
                if func in ("slurm.JobSpec", "slurm.JobSpec.from_profile", "slurm.class_job", "ipp.start_slurm"):
                    found.append((func, node, gpus))
    return found


def _namespace(profile: str, gpus_expr=None, environ=None):
    """The names a notebook cell uses; ``gpus`` evaluated from the cell's own expression (its default,
    or ``environ``'s DDP_TUTORIAL_SLURM_GPUS)."""
    namespace = {"slurm": slurm, "sys": sys, "Path": Path, "os": SimpleNamespace(environ=dict(environ or {})),
                 "shlex": shlex,
                 "RUN_DIR": Path("/scratch/runs"), "NB": {"dataset": "mnist", "root": "/scratch/data"},
                 "PROFILE": slurm.PROFILES[profile], "profile": slurm.PROFILES[profile], "PROFILE_NAME": profile,
                 "SHOWN": slurm.PROFILES[profile]}
    if gpus_expr is not None:
        namespace["gpus"] = eval(compile(ast.Expression(gpus_expr), "<cell>", "eval"), namespace)
    return namespace


def _spec(func: str, node: ast.Call, namespace: dict):
    """The JobSpec the notebook's call builds (for ipp.start_slurm: the engines' job)."""
    args = [eval(compile(ast.Expression(a), "<cell>", "eval"), namespace) for a in node.args]
    kwargs = {k.arg: eval(compile(ast.Expression(k.value), "<cell>", "eval"), namespace) for k in node.keywords}
    if func == "slurm.JobSpec":
        return "job", slurm.JobSpec(**kwargs)
    if func == "slurm.JobSpec.from_profile":
        return "job", slurm.JobSpec.from_profile(*args, **kwargs)
    if func == "slurm.class_job":  # the class's shape: the profile and DDP_TUTORIAL_SLURM_GPUS of the namespace
        environ = dict(namespace["os"].environ, DDP_TUTORIAL_SLURM_PROFILE=namespace["PROFILE_NAME"])
        return "job", slurm.class_job(*args, environ=environ, **kwargs)
    names = ("nodes", "engines_per_node", "gpus_per_node", "profile")
    given = dict(zip(names, args), **{k: v for k, v in kwargs.items() if k in names})
    job = {k: v for k, v in kwargs.items() if k not in names}
    values = dict(nodes=given.get("nodes", 1), gpus_per_node=given.get("gpus_per_node"),
                  nproc_per_node=given.get("engines_per_node"))
    return "engines", ipp_slurm._engine_spec(given.get("profile", "generic"), values, job)


def _cores_per_gpu(text: str) -> float:
    """From the #SBATCH lines alone, as SLURM reads them: cores per task × tasks per node / GPUs per node."""
    number = {option: int(re.search(rf"^#SBATCH --{option}=(\d+)", text, re.M).group(1))
              for option in ("cpus-per-task", "ntasks-per-node")}
    gres = int(re.search(r"^#SBATCH --gres=gpu:(\d+)", text, re.M).group(1))
    return number["cpus-per-task"] * number["ntasks-per-node"] / gres


def test_the_profiles_are_trubas_rule():
    for name, (gpus, cores) in TRUBA_RULE.items():
        p = slurm.PROFILES[name]
        assert (p.gpus_per_node, p.cpus_per_gpu) == (gpus, cores), name


@pytest.mark.parametrize("notebook,expected", [("05_cluster_slurm.cells", {"job": 3, "engines": 1}),
                                               ("08_own_model.cells", {"job": 1})])
@pytest.mark.parametrize("profile", GPU_PROFILES)
def test_every_job_a_notebook_submits_follows_the_profile(notebook, expected, profile, monkeypatch):
    gpus, cores = TRUBA_RULE[profile]
    seen = {"job": 0, "engines": 0}
    for func, node, gpus_expr in _calls(notebook):
        for environ in ({}, {"DDP_TUTORIAL_SLURM_GPUS": str(gpus)}):  # the notebook's default, all the node's GPUs
            monkeypatch.delenv("DDP_TUTORIAL_SLURM_GPUS", raising=False)  # ipp.start_slurm reads the class's shape
            monkeypatch.setenv("DDP_TUTORIAL_SITE", "none")
            for key, value in environ.items():
                monkeypatch.setenv(key, value)
            kind, spec = _spec(func, node, _namespace(profile, gpus_expr, environ))
            if not spec.gpus_per_node:
                continue  # the CPU form (a cluster without GPUs, the test cluster): no cores per GPU to check
            text = slurm.render_engines(spec) if kind == "engines" else slurm.render(spec)
            assert _cores_per_gpu(text) == cores, (notebook, ast.unparse(node), profile, text)
            assert f"export OMP_NUM_THREADS={cores}" in text
            assert 0 < spec.gpus_per_node <= gpus  # a node of that partition has them
        seen[kind] += 1
    for kind, count in expected.items():
        assert seen[kind] == count, (notebook, seen)


def test_no_notebook_hard_codes_cores_for_a_gpu_job():
    """A literal like cpus_per_process=4 next to GPUs was how 05 broke TRUBA's 10–20 cores per GPU."""
    for name in ("05_cluster_slurm.cells", "08_own_model.cells"):
        for func, node, _ in _calls(name):
            for keyword in node.keywords:
                if keyword.arg in ("cpus_per_process", "cpus_per_engine"):
                    value = keyword.value
                    literal = isinstance(value, ast.Constant) or (
                        isinstance(value, ast.IfExp) and isinstance(value.body, ast.Constant))
                    assert not literal, (name, ast.unparse(node))


def test_the_cpu_form_of_the_notebooks_stays_small_for_the_test_cluster(monkeypatch):
    """gpus=0 (the two-node test cluster): one core per process, whatever the profile."""
    lab = {"DDP_TUTORIAL_SLURM_GPUS": "0"}  # what notebooks/build.py --slurmlab sets
    monkeypatch.setenv("DDP_TUTORIAL_SLURM_GPUS", "0")  # ipp.start_slurm reads the class's shape from here
    submitted = 0
    for func, node, gpus_expr in _calls("05_cluster_slurm.cells"):
        if func in ("slurm.class_job", "ipp.start_slurm"):  # the calls the lab's run submits
            kind, spec = _spec(func, node, _namespace("palamut-cuda", gpus_expr, lab))
            assert spec.gpus_per_node == 0 and spec.cpus_per_process == 1, ast.unparse(node)
            submitted += 1
    assert submitted == 2
    kind, spec = _spec(*_calls("08_own_model.cells")[0][:2], _namespace("generic"))
    assert (spec.gpus_per_node, spec.nproc_per_node, spec.cpus_per_process) == (0, 2, 1)
