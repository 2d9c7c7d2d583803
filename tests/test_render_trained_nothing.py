"""A per-node parent that counts its processes with ``torch.cuda.device_count()``, rendered for CPU nodes
(issue 47, the outsider's re-run: the unchanged seed on the documented CPU command "completed" with exit code 0
in 8 s having trained nothing — ``mp.spawn(nprocs=0)``). Render refuses it with the line and the fix; the same
script renders for GPU nodes, and a copy that counts without it where there is no GPU renders for CPU nodes."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

VENV_BIN = Path(sys.executable).parent
SEED = Path(__file__).resolve().parent / "helpers" / "user_scripts" / "seed_per_node.py"


def render(tmp_path, *args, lang="en"):
    env = dict(os.environ, DDP_TUTORIAL_LANG=lang, COLUMNS="300")
    env.pop("DDP_TUTORIAL_SITE", None)
    done = subprocess.run([str(VENV_BIN / "ddp-tutorial"), "slurm", "render", "--template", "per-gpu", "--nodes",
                           "2", "--nproc-per-node", "1", "--cpus-per-process", "2", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_device_count_as_the_count_is_refused_for_cpu_nodes(tmp_path, lang):
    rc, out, err = render(tmp_path, "--gpus-per-node", "0", "--script", str(SEED), lang=lang)
    line = next(n for n, text in enumerate(SEED.read_text().splitlines(), 1)
                if "gpus_per_device = torch.cuda.device_count()" in text)
    assert rc == 2 and not out and "Traceback" not in err and err.strip().count("\n") == 0, err
    assert f"seed_per_node.py:{line} `gpus_per_device = torch.cuda.device_count()" in err, err
    said = {"en": ("having trained nothing", "--gpus-per-node N --nproc-per-node 1"),
            "tr": ("hiçbir şey eğitmeden", "--gpus-per-node N --nproc-per-node 1")}[lang]
    assert all(words in err for words in said), err


def test_the_same_script_renders_for_gpu_nodes_and_a_cpu_ready_copy_for_cpu_nodes(tmp_path):
    rc, out, err = render(tmp_path, "--gpus-per-node", "3", "--script", str(SEED))
    assert rc == 0 and "--gres=gpu:3 " in out, err
    ready = tmp_path / "seed_cpu.py"
    ready.write_text(SEED.read_text().replace(
        "gpus_per_device = torch.cuda.device_count()  # CUDA",
        'gpus_per_device = torch.cuda.device_count() if torch.cuda.is_available() else '
        'int(os.environ.get("PROCS_PER_NODE", "1"))'))
    rc, out, err = render(tmp_path, "--gpus-per-node", "0", "--env", "PROCS_PER_NODE=2", "--script", str(ready))
    assert rc == 0 and "PROCS_PER_NODE" in out, err
