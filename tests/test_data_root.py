"""One data root (issue 34 item 6, issue 37 item 3): ``~/ddp-data`` unless ``DDP_TUTORIAL_ROOT``, everywhere; and a
class-wide shared root that is read-only works on every path that reads it (CLI check/prepare, scripts/fetch_mnist.py,
the training processes, cnn_single.py, ipyparallel engines), tested on a root mounted read-only."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import data_fixtures

genuine_mnist_root = data_fixtures.genuine_mnist_root
REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


def test_the_default_root_is_home_ddp_data_everywhere(monkeypatch):
    from ddp_tutorial import datasets, i18n
    monkeypatch.delenv("DDP_TUTORIAL_ROOT", raising=False)
    assert datasets.default_root() == Path.home() / "ddp-data"
    for lang in i18n.LANGUAGES:
        texts = " ".join(str(v) for v in i18n.messages(lang).values())
        assert ".cache/ddp-tutorial" not in texts
    for script in ("scripts/demo.sh", "scripts/lab.sh"):
        assert "${DDP_TUTORIAL_ROOT:-$HOME/ddp-data}" in (REPO / script).read_text(encoding="utf-8"), script
    sources = [*REPO.glob("ddp_tutorial/**/*.py"), *REPO.glob("scripts/*"), *REPO.glob("benchmarks/*.py"),
               *REPO.glob("notebooks/src/*.cells")]
    other = [str(p.relative_to(REPO)) for p in sources if p.is_file()
             and re.search(r"\.cache/ddp-tutorial|\"ddp-tutorial\" / \"data\"|DDP_TUTORIAL_ROOT\", \"data\"",
                           p.read_text(encoding="utf-8", errors="replace"))]
    assert not other, f"a second default data root: {other}"


READ_ONLY_RUN = r'''
set -e
touch "$DDP_TUTORIAL_ROOT/probe" 2>/dev/null && { echo "the root is writable"; exit 3; }
ddp-tutorial data check --dataset mnist
ddp-tutorial data prepare --dataset mnist
python "$REPO/scripts/fetch_mnist.py" | tail -n 1
ddp-tutorial train --dataset mnist --nproc-per-node 2 --epochs 1 --train-subset 2048 --json "$HOME/r.json"
python "$REPO/ddp_tutorial/exercises/cnn_single.py" --epochs 1 --limit 256
python - <<'PY'
from ddp_tutorial import ipp

def shape(env, root):
    from ddp_tutorial import data
    return tuple(data.load("mnist", root, train=False).images.shape)

print("engines:", ipp.run(shape, __import__("os").environ["DDP_TUTORIAL_ROOT"], n=2, timeout=300))
ipp.stop(force=True)
PY
'''


@pytest.mark.skipif(os.name != "posix" or not hasattr(os, "geteuid") or os.geteuid() != 0
                    or shutil.which("unshare") is None, reason="needs root and unshare (a read-only bind mount)")
def test_a_read_only_shared_root_is_read_by_every_path(genuine_mnist_root, tmp_path):
    """Every path that reads the class's data, on a root mounted read-only. The training run reads the whole
    files from the root as every run does (``data.load``) and trains on their first 2,048 images
    (``--train-subset``): what is read, and from where, is what this test is about, not a full epoch of
    60,000 (which cost most of its minute on the 2-core CI machine); its test pass reads all 10,000."""
    shared = tmp_path / "class-data"
    (shared).mkdir()
    shutil.copytree(genuine_mnist_root / "MNIST", shared / "MNIST")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDP_TUTORIAL_")}
    env.update(DDP_TUTORIAL_ROOT=str(shared), DDP_TUTORIAL_DATASET="mnist", HOME=str(home), REPO=str(REPO),
               PATH=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    script = tmp_path / "run.sh"
    script.write_text(READ_ONLY_RUN)
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c",
                           f'mount --bind -o ro "{shared}" "{shared}" && bash "{script}"'],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "is valid: 60000 train / 10000 test" in out and "already staged" in out
    assert "Accuracy of the network on the 10000 test images" in out
    assert "engines: [(10000, 28, 28), (10000, 28, 28)]" in out, out
    assert sorted(p.name for p in shared.iterdir()) == ["MNIST"]  # nothing was written into it
