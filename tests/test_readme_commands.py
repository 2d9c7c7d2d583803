"""The README's quick start, run as written (issue 26 R4): both languages give the same commands, each line
runs from the checkout offline on staged data, and nothing lands in the checkout.

Offline variants, and only these: `bash scripts/setup.sh` already ran (scripts/test.sh starts with it);
`source .venv/bin/activate` is the venv's bin folder first on PATH; the one line that needs the internet
(`ddp-tutorial data prepare --dataset mnist`, which downloads) is skipped and its result is put in place
beforehand — a tiny MNIST in ~/ddp-data, so that `scripts/fetch_mnist.py` answers at once, as it does
where MNIST is already staged. Everything else runs exactly as the README prints it, with $HOME a fresh
folder.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from idx_files import write_mnist_like

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
VENV_BIN = Path(sys.executable).parent
ONLINE = "ddp-tutorial data prepare --dataset mnist --root ~/ddp-data"
ALREADY_DONE = ("bash scripts/setup.sh", "source .venv/bin/activate")


def quick_start(heading: str) -> list:
    """The command lines of the bash block under ``### <heading>`` (comments and blank lines dropped)."""
    text = README.read_text(encoding="utf-8")
    block = re.search(rf"^### {heading}\n.*?```bash\n(.*?)```", text, re.S | re.M)
    assert block, f"README.md has no bash block under '### {heading}'"
    lines = [line.split("  #")[0].strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_both_languages_give_the_same_quick_start():
    assert quick_start("Hızlı başlangıç") == quick_start("Quick start")


def checkout_state() -> set:
    """Every file git sees as untracked or ignored-but-present in the checkout (what a command could leave)."""
    done = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"not a git checkout: {done.stderr.strip()}")
    return {line for line in done.stdout.splitlines() if line.startswith(("??", "!!"))}


def test_the_quick_start_runs_as_written_and_writes_nothing_into_the_checkout(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    # What the online line would have staged: MNIST in ~/ddp-data (tiny, learnable).
    write_mnist_like(home / "ddp-data", "mnist", n_train=2048, n_test=256, seed=0)
    env = dict(os.environ, HOME=str(home), PATH=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
               VIRTUAL_ENV=str(VENV_BIN.parent), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "DDP_TUTORIAL_ROOT",
                 "DDP_TUTORIAL_DATASET"):
        env.pop(name, None)
    before = checkout_state()
    ran = []
    for line in quick_start("Quick start"):
        if line.startswith(ALREADY_DONE) or line == ONLINE:
            continue
        if "/usr/share/datasets/fashion-mnist" in line and not Path("/usr/share/datasets/fashion-mnist").is_dir():
            continue  # the Debian package is what this line imports; CI installs it
        argv = [os.path.expanduser(word.replace("~", str(home), 1)) if word.startswith("~") else word
                for word in shlex.split(line)]
        argv = [word.replace("=~/", f"={home}/") for word in argv]
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"README line failed: {line}\n{done.stdout}\n{done.stderr}"
        ran.append((line, done.stdout + done.stderr))
    lines = [line for line, _ in ran]
    assert any(line.startswith("ddp-tutorial train") for line in lines), lines
    assert any("fetch_mnist.py" in line for line in lines), lines
    fetched = next(out for line, out in ran if "fetch_mnist.py" in line)
    assert fetched.strip().splitlines()[-1] == "mnist" or "mnist" in fetched
    results = list(home.rglob("*.json"))
    assert results, "the train line's --json result is not under $HOME"
    assert checkout_state() == before, "the quick start wrote into the checkout:\n" + "\n".join(
        sorted(checkout_state() - before))


def capstone_block() -> list:
    """The README's (English) capstone commands: continuation lines joined, comments dropped."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"^### After the workshop: your own script\n.*?```bash\n(.*?)```", text, re.S | re.M)
    assert block, "README.md has no bash block under '### After the workshop: your own script'"
    joined = re.sub(r"\\\n\s*", " ", block.group(1))
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_the_capstone_commands_run_as_written_in_a_workshop_copy(fashion_root, tmp_path):
    """08 writes capstone/cnn_ddp.py in the attendee's workshop copy (here: the solution and 08's own main
    block); the README's torchrun line then trains it from there, and its `slurm render --script` line
    writes a job whose data root, log folder and comments fit a user script (sbatch itself: the SLURM lab
    tests, tests/test_slurm_jobs.py)."""
    from ddp_tutorial.exercises import capstone
    import json

    lines = capstone_block()
    assert lines[0] == "cd workshop/en && source ../../.venv/bin/activate", lines[0]
    root = tmp_path / "checkout-like"
    work = root / "workshop" / "en"
    subprocess.run(["bash", str(REPO / "scripts" / "workshop_copy.sh"), "en", str(work)], check=True, timeout=60)
    notebook = json.loads((work / "08_own_model.ipynb").read_text(encoding="utf-8"))
    writer = next("".join(c["source"]) for c in notebook["cells"]
                  if c["cell_type"] == "code" and "DDP_SCRIPT = write_text(" in "".join(c["source"]))
    main = re.search(r"^MAIN = (?P<q>'''|\"\"\")(.*?)(?P=q)", writer, re.S | re.M)
    assert main, "08's cell that writes cnn_ddp.py has no MAIN = '''…''' block"
    (work / "capstone").mkdir()
    capstone.place_script(str(work / "capstone"))
    header = '"""cnn_single.py with DDP: written by notebook 08 from its train_ddp function."""\n\n'
    (work / "capstone" / "cnn_ddp.py").write_text(header + capstone.TRAIN_DDP_CODE.lstrip() + main.group(2))

    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}", VIRTUAL_ENV=str(VENV_BIN.parent),
               DDP_TUTORIAL_ROOT=str(fashion_root), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    for line in lines[1:]:
        command = line.split(" && sbatch ")[0]          # submitting: the SLURM lab's tests
        done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"README line failed: {line}\n{done.stdout}\n{done.stderr}"
        if command.startswith("torchrun"):
            assert "test accuracy" in done.stdout, done.stdout
        if " slurm render " in f" {command}":
            job = (work / "cnn_ddp.sbatch").read_text()
            assert str(fashion_root) in job                  # --root "$DDP_TUTORIAL_ROOT", expanded
            log = re.search(r"^#SBATCH --output=(\S+)", job, re.M).group(1)
            assert (work / Path(log).parent).is_dir(), f"the log folder {Path(log).parent} does not exist"
            assert "RESUME=(--resume)" not in job and "asking the training to checkpoint" not in job, \
                "a user script's job promises checkpoints it does not write"
