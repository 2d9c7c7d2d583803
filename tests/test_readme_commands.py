"""The README's command blocks, run as written (issue 26 R4, issue 37 item 3): in a fresh ``bash``, its
environment cleared of every ``DDP_TUTORIAL_*`` variable (those only the lab sets), ``$HOME`` a fresh folder.

Every command line of every ```bash block is either run by a test here or listed in :data:`NOT_RUN_HERE`
with the reason (:func:`test_every_readme_command_is_run_or_listed_with_its_reason`).

Offline variants, and only these: `bash scripts/setup.sh` already ran (scripts/test.sh starts with it);
`source .venv/bin/activate` is the venv's bin folder first on PATH; the one line that needs the internet
(`ddp-tutorial data prepare --dataset mnist`, which downloads) is skipped and its result is put in place
beforehand — a tiny MNIST in ~/ddp-data, so that `scripts/fetch_mnist.py` answers at once, as it does
where MNIST is already staged. Everything else runs exactly as the README prints it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import data_fixtures
from idx_files import write_mnist_like

genuine_mnist_root = data_fixtures.genuine_mnist_root  # the fixture: genuine MNIST, staged by scripts/test.sh

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
VENV_BIN = Path(sys.executable).parent
ONLINE = "ddp-tutorial data prepare --dataset mnist --root ~/ddp-data"
ALREADY_DONE = ("bash scripts/setup.sh", "source .venv/bin/activate")
SUBMIT = " && sbatch "  # submitting: the SLURM lab's tests (tests/test_slurm_jobs.py)

#: Command lines of the README that no test here runs, and why (every other line is run as written).
NOT_RUN_HERE = {
    "bash scripts/test.sh": "the whole suite: it is what runs this test",
    "bash scripts/setup.sh": "installs into the checkout's .venv, which the suite must not rebuild "
                             "(tests/test_lab_script.py runs it in a throw-away checkout)",
    "source .venv/bin/activate": "the venv's bin folder is put first on PATH instead (the same effect)",
    ONLINE: "downloads MNIST (needs the internet); its result is staged beforehand",
    'cd workshop/en && source "${DDP_TUTORIAL_VENV:-../../.venv}/bin/activate"': "the capstone test runs the "
        "block's lines in a workshop copy (scripts/workshop_copy.sh) with the venv's bin first on PATH: the same "
        "folder and the same venv; tests/test_class_start.py runs this line itself, in a class clone and in one "
        "with its own .venv",
    "sbatch cnn_ddp.sbatch": "needs a SLURM cluster: the SLURM lab's tests submit rendered jobs",
}


def fresh_env(home: Path) -> dict:
    """A fresh terminal's environment: no DDP_TUTORIAL_* (only the lab sets them), no launcher variables,
    ``$HOME`` = ``home``, the venv's bin first on PATH (= `source .venv/bin/activate`)."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("DDP_TUTORIAL_") and name not in (
               "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "VIRTUAL_ENV")}
    env.update(HOME=str(home), PATH=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}", VIRTUAL_ENV=str(VENV_BIN.parent),
               PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return env


def bash_blocks() -> list:
    """Every command line of every ```bash block of the README: continuations joined, comments dropped."""
    text = README.read_text(encoding="utf-8")
    lines = []
    for block in re.findall(r"^```bash\n(.*?)```", text, re.S | re.M):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def quick_start(heading: str) -> list:
    """The command lines of the bash block under ``### <heading>`` (comments and blank lines dropped)."""
    text = README.read_text(encoding="utf-8")
    block = re.search(rf"^### {heading}\n.*?```bash\n(.*?)```", text, re.S | re.M)
    assert block, f"README.md has no bash block under '### {heading}'"
    lines = [line.split("  #")[0].strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_both_languages_give_the_same_quick_start():
    assert quick_start("Hızlı başlangıç") == quick_start("Quick start")


# What other tests write into the checkout while this one runs beside them (pytest-xdist workers): each its own
# folder, made and removed by that test (test_lab_job, test_browser). A change there is not the quick start's.
OTHER_TESTS_WRITE = ("workshop/lab-job-test-", "workshop/browser-test-", "tests/artifacts/")


def checkout_state() -> set:
    """Every file git sees as untracked or ignored-but-present in the checkout (what a command could leave)."""
    done = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"not a git checkout: {done.stderr.strip()}")
    return {line for line in done.stdout.splitlines()
            if line.startswith(("??", "!!")) and not line[3:].strip("'\"").startswith(OTHER_TESTS_WRITE)}


def test_the_quick_start_runs_as_written_and_writes_nothing_into_the_checkout(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    # What the online line would have staged: MNIST in ~/ddp-data (tiny, learnable).
    write_mnist_like(home / "ddp-data", "mnist", n_train=2048, n_test=256, seed=0)
    env = fresh_env(home)
    before = checkout_state()
    ran = []
    for line in quick_start("Quick start"):
        if line.startswith(ALREADY_DONE) or line == ONLINE:
            continue
        if "/usr/share/datasets/fashion-mnist" in line and not Path("/usr/share/datasets/fashion-mnist").is_dir():
            continue  # the Debian package is what this line imports; CI installs it
        done = subprocess.run(["bash", "-c", line], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
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
    assert lines[0] == 'cd workshop/en && source "${DDP_TUTORIAL_VENV:-../../.venv}/bin/activate"', lines[0]
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

    home = tmp_path / "home"
    (home / "ddp-data").mkdir(parents=True)  # the one default data root, as lab.sh and demo.sh stage it
    (home / "ddp-data" / "FashionMNIST").symlink_to(fashion_root / "FashionMNIST")
    env = fresh_env(home)  # a normal terminal: no DDP_TUTORIAL_ROOT
    for line in lines[1:]:
        command = line.split(SUBMIT)[0]
        done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"README line failed: {line}\n{done.stdout}\n{done.stderr}"
        if command.startswith("torchrun"):
            assert "test accuracy" in done.stdout, done.stdout
        if " slurm render " in f" {command}":
            job = (work / "cnn_ddp.sbatch").read_text()
            assert f"--root {home}/ddp-data" in job or f"'--root' '{home}/ddp-data'" in job or \
                f"{home}/ddp-data" in job  # --root "${DDP_TUTORIAL_ROOT:-$HOME/ddp-data}", expanded
            log = re.search(r"^#SBATCH --output=(\S+)", job, re.M).group(1)
            assert (work / Path(log).parent).is_dir(), f"the log folder {Path(log).parent} does not exist"
            assert "RESUME=(--resume)" not in job and "asking the training to checkpoint" not in job, \
                "a user script's job promises checkpoints it does not write"


def _run_here() -> dict:
    """The lines the tests of this file run, by test."""
    lines = {line: "quick start" for line in quick_start("Quick start")
             if not line.startswith(ALREADY_DONE) and line != ONLINE}
    lines.update({line.split(SUBMIT)[0]: "capstone" for line in capstone_block()[1:]})
    lines["bash scripts/demo.sh"] = "demo (DDP_TUTORIAL_VENV=this venv: the set-up step is the one not run)"
    return lines


def test_every_readme_command_is_run_or_listed_with_its_reason():
    """Issue 37 item 3: no README line is left untested without a reason; the Turkish blocks are the
    English ones (their workshop folder aside), and no line leans on a variable only the lab sets."""
    run, unlisted = _run_here(), []
    for line in bash_blocks():
        line = line.replace("workshop/tr", "workshop/en")
        parts = line.split(SUBMIT)
        for part in (parts[0], *("sbatch " + rest for rest in parts[1:])):
            if part not in run and part not in NOT_RUN_HERE:
                unlisted.append(part)
        for variable in re.findall(r"\$\{?(DDP_TUTORIAL_\w+)(\}|:-)?", line):
            assert variable[1] == ":-", f"{line}: ${variable[0]} is set only in the lab: give it a default"
    assert not unlisted, f"README lines neither run by tests/test_readme_commands.py nor listed: {unlisted}"
    stale = set(NOT_RUN_HERE) - {part for line in bash_blocks()
                                 for part in (line.split(SUBMIT)[0], *("sbatch " + r for r in line.split(SUBMIT)[1:]))}
    assert not stale, f"NOT_RUN_HERE lists lines the README no longer has: {stale}"
    assert "--ServerApp.token" not in README.read_text(encoding="utf-8")  # deprecated: --IdentityProvider.token


def test_the_readmes_notebook_call_is_defined_in_08():
    """`ipp.run(train_ddp, ROOT, LIMIT, EPOCHS, BATCH, LR, n=2)`: every name it passes is defined by 08's cells
    (issue 37: EPOCHS was not)."""
    text = README.read_text(encoding="utf-8")
    calls = set(re.findall(r"`ipp\.run\(train_ddp, ([A-Z_, ]+), n=2\)`", text))
    assert calls, "the README no longer shows the notebook call"
    source = (REPO / "notebooks" / "src" / "08_own_model.cells").read_text(encoding="utf-8")
    assigned = set()
    for target in re.findall(r"^([A-Z_][A-Z_0-9, ]*?)\s*=[^=]", source, re.M):
        assigned.update(name.strip() for name in target.split(","))
    for call in calls:
        missing = [name.strip() for name in call.split(",") if name.strip() not in assigned]
        assert not missing, f"08 does not define {missing}, which the README's ipp.run line passes"


def test_demo_stages_into_the_one_root_and_prints_the_seeds_lines_on_mnist(genuine_mnist_root, tmp_path):
    """`bash scripts/demo.sh` in a fresh terminal: the data root is ~/ddp-data (as lab.sh's), MNIST (the
    seed's data) is used when it is staged there, and the seed's lines are printed. DDP_TUTORIAL_VENV names
    this venv, so that its first step (scripts/setup.sh into .venv) is not re-run by the suite."""
    home = tmp_path / "home"
    (home / "ddp-data").mkdir(parents=True)
    (home / "ddp-data" / "MNIST").symlink_to(genuine_mnist_root / "MNIST")
    env = fresh_env(home)
    env["DDP_TUTORIAL_VENV"] = str(VENV_BIN.parent)
    done = subprocess.run(["bash", "scripts/demo.sh"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"== data set: mnist ({home}/ddp-data)" in done.stdout, done.stdout
    assert "Accuracy of the network on the 10000 test images:" in done.stdout, done.stdout
