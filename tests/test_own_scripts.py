"""Your own DDP script on the bundle's launchers (issue 35, docs/own-script.md), with real scripts of each
convention (tests/data/own_scripts/: torchrun's, SLURM's, the seed's per-node parent, a CUDA-only one):

* ``ipp.run`` runs a torchrun-style function as it is (launcher variables, a free port, no group made for
  it, ``sys.argv`` handed over, everything put back afterwards); ``ipp.run_script`` runs a script file;
* ``slurm render --script`` reads the script and refuses a launch that would hang, naming the one that
  fits; ``--script-args`` takes values that start with a dash; a relative ``--script`` means the same file
  at render and at run time; the log folder exists with and without ``--workdir``;
* ``ddp-tutorial check-script`` lists the lines a CUDA-only script changes, with line numbers;
* slow (the two-node SLURM lab): each convention through plain ``sbatch`` with its fitting template, and
  ``slurm result`` on a finished own-script job.

Everything runs for real: gloo on the CPU, real engines, real torchrun, real SLURM.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_tutorial.cli import main
from ddp_tutorial.i18n import TutorialError

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).resolve().parent / "data" / "own_scripts"
TORCHRUN_STYLE = SCRIPTS / "torchrun_ddp.py"
SLURM_STYLE = SCRIPTS / "slurm_ddp.py"
PER_NODE = SCRIPTS / "per_node_parent.py"
PER_NODE_GPUS = SCRIPTS / "per_node_gpus.py"   # the seed's reading: SLURM_NPROCS, SLURM_PROCID, the GPUs given
CUDA_ONLY = SCRIPTS / "cuda_only.py"
USER_SCRIPTS = Path(__file__).resolve().parent / "helpers" / "user_scripts"
SLURM_FIRST = USER_SCRIPTS / "slurm_first.py"              # SLURM_PROCID when set, else RANK (CS06)
PRINTS_SLURM = USER_SCRIPTS / "env_init_prints_slurm.py"   # env:// group, SLURM_PROCID only printed (CS05)
GPU_ARGUMENT = USER_SCRIPTS / "imagenet_gpu_arg.py"        # the ImageNet example's --gpu idiom (CS08)
VENV_BIN = Path(sys.executable).parent
LAUNCHER_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                  "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS")

if str(SCRIPTS) not in sys.path:  # the engines take this import path when they start (torchrun_ddp.main)
    sys.path.insert(0, str(SCRIPTS))


def results_of(text: str) -> list:
    """The ``RESULT {json}`` lines the scripts print, in rank order."""
    found = [json.loads(m.group(1)) for m in re.finditer(r"RESULT (\{[^{}]*\})", text)]
    return sorted(found, key=lambda r: r["rank"])


def line_of(path: Path, fragment: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if fragment in line)


# ---------------------------------------------------------------------------------------------------
# check-script


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_check_script_lists_the_cuda_only_lines(lang, monkeypatch, capsys):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
    assert main(["check-script", str(CUDA_ONLY)]) == 1
    out = capsys.readouterr().out
    expected = {"--local_rank": "LOCAL_RANK", "assert torch.cuda.device_count()": "device_count",
                "torch.cuda.set_device(local_rank)": "Found no NVIDIA driver",
                'init_process_group("nccl")': '"gloo"', ".to(local_rank)": 'torch.device("cpu")',
                "device_ids=[local_rank])": 'device.type == "cuda" else None', ".cuda()": ".to(device)"}
    for fragment, advice in expected.items():
        number = line_of(CUDA_ONLY, fragment)
        entry = re.search(rf"^  {re.escape(str(CUDA_ONLY))}:{number}: .*\n      → (.*)$", out, re.M)
        assert entry and advice in entry.group(1), (fragment, out)
    assert "terminate called without an active exception" in out  # no destroy_process_group
    assert "--template torchrun" in out and ("docs/own-script.md" if lang == "en" else "docs/own-script.tr.md") in out


@pytest.mark.parametrize("script, convention, launch", [
    (TORCHRUN_STYLE, "torchrun", "--template torchrun"),
    (SLURM_STYLE, "slurm", "--template per-gpu"),
    (PER_NODE, "per-node", "--template per-gpu --nproc-per-node 1"),
])
def test_check_script_names_the_convention_and_the_launch_that_fits(script, convention, launch, capsys):
    from ddp_tutorial.script_check import read_script
    report = read_script(script)
    assert report.convention == convention and report.fitting() == launch
    assert main(["check-script", str(script)]) == 0  # these three run on a CPU as they are
    out = capsys.readouterr().out
    assert f"slurm render {launch} --script" in out and "no CUDA-only line" in out


MODULE_LEVEL_TRAINER = """\
import os
import torch
from torch.distributed import init_process_group, destroy_process_group
backend = 'nccl'  # 'nccl', 'gloo', etc.
device = 'cuda'  # examples: 'cpu', 'cuda', 'cuda:0'
ddp = int(os.environ.get('RANK', -1)) != -1
if ddp:
    init_process_group(backend=backend)
    ddp_local_rank = int(os.environ['LOCAL_RANK'])
    device = f'cuda:{ddp_local_rank}'
    torch.cuda.set_device(device)
model = torch.nn.Linear(2, 2).to(device)
if ddp:
    model = DDP(model, device_ids=[ddp_local_rank])
torch.cuda.synchronize()
if ddp:
    destroy_process_group()
"""


def test_check_script_reads_a_module_level_trainer():
    """A trainer written at module level, its device and backend in variables (a comment that names gloo is not
    a choice of gloo): every CUDA-only line is found, with its number."""
    from ddp_tutorial.script_check import read_source
    report = read_source(MODULE_LEVEL_TRAINER, "train.py")
    assert report.convention == "torchrun"
    assert [(f.line, f.kind) for f in report.findings] == [
        (4, "nccl"), (5, "to_cuda"), (10, "to_cuda"), (11, "set_device"), (14, "device_ids"), (15, "cuda_call")]


def test_check_script_refuses_a_missing_file(tmp_path, capsys):
    assert main(["check-script", str(tmp_path / "nope.py")]) == 2
    assert "nope.py does not exist" in capsys.readouterr().err


def test_the_capstone_solution_needs_no_change():
    """08's solution (what cnn_ddp.py becomes) is already right on both devices: no finding."""
    from ddp_tutorial.exercises import capstone
    from ddp_tutorial.script_check import read_source
    report = read_source(capstone.TRAIN_DDP_CODE)
    assert report.findings == [], report.findings


def test_a_gpu_number_used_as_a_device_is_listed():
    """The ImageNet example's idiom: ``--gpu`` used as the device itself (``.to(args.gpu)``,
    ``device=args.gpu``) and passed on to a helper that moves to it: every such line is listed, and only
    those (the fixture marks each with ``# CUDA``)."""
    from ddp_tutorial.script_check import read_script
    report = read_script(GPU_ARGUMENT)
    marked = [n for n, line in enumerate(GPU_ARGUMENT.read_text().splitlines(), 1) if line.endswith("# CUDA")]
    assert [f.line for f in report.findings] == marked, report.findings
    assert report.findings[-1].kind == "device_number_arg"


SEED_AND_PRINCETON_IDIOMS = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

def train(args, model, device, loader):
    for data, target in loader:
        data, target = data.to(device), target.to(device)

def worker(gpu_id_in_node, world):
    dist.init_process_group("gloo", rank=gpu_id_in_node, world_size=world)
    model = torch.nn.Linear(2, 2).to(gpu_id_in_node)
    model = DDP(model, device_ids=[gpu_id_in_node])
    batch = torch.zeros(2, device=gpu_id_in_node)
    train(None, model, gpu_id_in_node, [])
    dist.destroy_process_group()

def chosen(local_rank, world):
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    model = DDP(torch.nn.Linear(2, 2).to(device), device_ids=[device] if device.type == "cuda" else None)
    train(None, model, device, [])
    autocast = device.type if device.type == "cuda" else "cpu"
    if autocast == "cuda":
        print("autocast")
"""


def test_a_gpu_number_passed_on_through_a_parameter_is_listed():
    """The seed's ``.to(gpu_id_in_node)`` (a name known from ``device_ids``), and Princeton's
    ``train(args, model, local_rank, …)`` whose ``train`` does ``data.to(device)``; a device chosen once
    (``torch.device(…) if … else …``) and passed on is right as it is, and ``x == "cuda"`` is a question,
    not the device ``"cuda"``."""
    from ddp_tutorial.script_check import read_source
    report = read_source(SEED_AND_PRINCETON_IDIOMS, "seed.py")
    assert [(f.line, f.kind) for f in report.findings] == [
        (11, "to_cuda"), (12, "device_ids"), (13, "to_cuda"), (14, "device_number_arg")], report.findings


def test_a_long_script_is_read_in_linear_time():
    """8 000 top-level findings: each line's guard is found in one pass, not by walking back to line 1
    (16 000 lines took 63.8 s). CPU time of this process, so a busy machine does not count."""
    import time
    from ddp_tutorial.script_check import read_source
    source = "import torch\n" + "".join(f"x{i} = torch.zeros(1).cuda()\n" for i in range(8000))
    started = time.process_time()
    report = read_source(source, "long.py")
    spent = time.process_time() - started
    assert len(report.findings) == 8000 and spent < 2.0, spent


def test_a_tree_too_deep_to_walk_is_read_by_its_lines():
    """1 500 nested conditional expressions parse but are too deep to walk: the lines are read, no traceback."""
    from ddp_tutorial.script_check import read_source
    source = "import os\nx = " + " if c else ".join(["a"] * 1500) + '\nr = os.environ["RANK"]\ny.cuda()\n'
    report = read_source(source)
    assert report.convention == "torchrun" and [(f.line, f.kind) for f in report.findings] == [(4, "to_cuda")]


@pytest.mark.parametrize("command", [["check-script", str(CUDA_ONLY)], ["slurm", "render", "--template", "torchrun"]])
def test_output_into_a_pipe_whose_reader_left_is_quiet(tmp_path, command):
    """``ddp-tutorial check-script x.py | head -1``: a reader that left is not a path error. The pipe's
    reading end is closed before the command starts, so its first write fails every time."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = subprocess.run([str(VENV_BIN / "ddp-tutorial"), *command], cwd=tmp_path, stdout=writer,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(writer)
    assert done.returncode == 0 and done.stderr == "", (done.returncode, done.stderr)


def test_a_launcher_name_only_printed_is_not_where_the_rank_comes_from(tmp_path):
    """A group made through env:// (torchrun's RANK) that only prints SLURM_PROCID is torchrun's convention:
    the torchrun template renders. A name written (``os.environ["RANK"] = …``) is not read either."""
    from ddp_tutorial.script_check import read_script, read_source
    report = read_script(PRINTS_SLURM)
    assert (report.convention, report.slurm_names, report.fitting()) == ("torchrun", [], "--template torchrun")
    rc, out, err = render(tmp_path, "--template", "torchrun", "--nodes", "2", "--nproc-per-node", "2",
                          "--script", str(PRINTS_SLURM))
    assert rc == 0 and out.startswith("#!/bin/bash") and err == "", err
    copied = read_source('import os\nimport torch.distributed as dist\n'
                         'os.environ["RANK"] = os.environ["SLURM_PROCID"]\n'
                         'os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]\ndist.init_process_group("gloo")\n')
    assert copied.convention == "slurm" and copied.fitting() == "--template per-gpu"


@pytest.mark.parametrize("source, slurm_first", [
    ('if "SLURM_PROCID" in os.environ:\n    rank = int(os.environ["SLURM_PROCID"])\n'
     'else:\n    rank = int(os.environ["RANK"])\n', True),
    ('rank = int(os.environ.get("SLURM_PROCID", os.environ.get("RANK", "0")))\n', True),
    ('rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))\n', False),
    ('if "RANK" in os.environ:\n    rank = int(os.environ["RANK"])\n'
     'elif "SLURM_PROCID" in os.environ:\n    rank = int(os.environ["SLURM_PROCID"])\n', False),
    ('local = int(os.environ.get("LOCAL_RANK") or os.environ["SLURM_LOCALID"])\n', False),
])
def test_which_launcher_wins_is_read_from_the_order(source, slurm_first):
    from ddp_tutorial.script_check import read_source
    report = read_source("import os\n" + source + ("start(rank)\n" if "rank =" in source else "start(local)\n"))
    assert report.convention == "either" and report.slurm_first == slurm_first
    assert report.fitting() == ("--template per-gpu" if slurm_first else "--template torchrun")


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_a_slurm_first_script_is_sent_to_per_gpu_and_refused_under_torchrun(tmp_path, lang, monkeypatch, capsys):
    """SLURM_PROCID read first: check-script names per-gpu (srun's and torchrun's numbers agree there);
    render refuses the torchrun template in one line saying why; per-gpu renders."""
    monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
    assert main(["check-script", str(SLURM_FIRST)]) == 0
    out = capsys.readouterr().out
    assert "slurm render --template per-gpu --script" in out and "SLURM_PROCID" in out, out
    rc, out, err = render(tmp_path, "--template", "torchrun", "--nodes", "2", "--nproc-per-node", "2",
                          "--script", str(SLURM_FIRST), lang=lang)
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert "--template per-gpu" in err and "SLURM_PROCID" in err and "--script-convention torchrun" in err
    assert ("same rank" if lang == "en" else "aynı rank") in err, err
    rc, out, err = render(tmp_path, "--template", "per-gpu", "--nodes", "2", "--nproc-per-node", "2",
                          "--script", str(SLURM_FIRST), lang=lang)
    assert rc == 0 and f"SCRIPT={SLURM_FIRST}" in out, err
    rc, out, err = render(tmp_path, "--template", "torchrun", "--script", str(SLURM_FIRST),
                          "--script-convention", "torchrun", lang=lang)  # the user's word wins over the reading
    assert rc == 0 and f"SCRIPT={SLURM_FIRST}" in out, err


def test_under_torchrun_in_an_srun_task_a_slurm_first_script_runs_twice_alone(tmp_path):
    """What one srun task of the torchrun template gives its workers (SLURM_PROCID=0, SLURM_NTASKS=1), for
    real: the SLURM-first script becomes two independent one-process runs, both rank 0 (on two nodes: two
    rank 0s and a hang) — which is why it is refused there; the script that only prints SLURM_PROCID
    trains as one group of two."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_NAMES}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", SLURM_PROCID="0", SLURM_NTASKS="1", SLURM_LOCALID="0")
    runs = [subprocess.Popen([str(VENV_BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", str(script)],
                             cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for script in (SLURM_FIRST, PRINTS_SLURM)]
    try:
        outputs = [run.communicate(timeout=180)[0] for run in runs]
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
                run.wait()
    assert [run.returncode for run in runs] == [0, 0], outputs
    alone, together = (results_of(text) for text in outputs)
    assert sorted((r["rank"], r["world_size"], r["sum"], r["torchrun_rank"]) for r in alone) == \
        [(0, 1, 1.0, 0), (0, 1, 1.0, 1)], outputs[0]
    assert [(r["rank"], r["world_size"], r["sum"]) for r in together] == [(0, 2, 2.0), (1, 2, 2.0)], outputs[1]


# ---------------------------------------------------------------------------------------------------
# slurm render --script


def render(tmp_path, *args, lang="en"):
    """``ddp-tutorial slurm render`` in a fresh process from ``tmp_path``: (rc, stdout, stderr)."""
    env = dict(os.environ, DDP_TUTORIAL_LANG=lang, COLUMNS="300")  # help lines unwrapped
    done = subprocess.run([str(VENV_BIN / "ddp-tutorial"), "slurm", "render", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_a_slurm_style_script_under_torchrun_is_refused_at_render(tmp_path, lang):
    """Under torchrun SLURM_PROCID is the node's number: the job would hang until its time limit. Render says
    so, and which template fits; per-gpu renders."""
    rc, out, err = render(tmp_path, "--template", "torchrun", "--nodes", "2", "--nproc-per-node", "2",
                          "--script", str(SLURM_STYLE), lang=lang)
    assert rc == 2 and out == "", err
    assert "--template per-gpu" in err and "SLURM_PROCID" in err and err.count("\n") == 1, err
    assert ("hang" if lang == "en" else "asılı kalır") in err
    rc, out, err = render(tmp_path, "--template", "per-gpu", "--nodes", "2", "--nproc-per-node", "2",
                          "--script", str(SLURM_STYLE), lang=lang)
    assert rc == 0 and f"SCRIPT={SLURM_STYLE}" in out, err


def test_the_per_node_parent_needs_one_task_per_node(tmp_path):
    for args in (["--template", "torchrun"], ["--template", "per-gpu", "--nproc-per-node", "2"]):
        rc, _, err = render(tmp_path, *args, "--script", str(PER_NODE))
        assert rc == 2 and "--template per-gpu --nproc-per-node 1" in err, (args, err)
    rc, out, err = render(tmp_path, "--template", "per-gpu", "--nproc-per-node", "1", "--nodes", "2",
                          "--script", str(PER_NODE))
    assert rc == 0 and "--ntasks-per-node=1 " in out, err
    # The user's word wins over the reading (a script that reads its names through a config file).
    rc, _, err = render(tmp_path, "--template", "torchrun", "--script", str(PER_NODE),
                        "--script-convention", "torchrun")
    assert rc == 0, err


#: Issue 47 item 1: the per-node parent on GPU nodes, as the outsider wrote it (each form: the arguments, and
#: whether it renders). A refusal never asks for what is already on the command line.
PER_NODE_GPU_FORMS = [
    (["--template", "per-gpu", "--gpus-per-node", "3", "--nproc-per-node", "1"], True),
    (["--template", "per-gpu", "--profile", "akya-cuda", "--nproc-per-node", "1"], True),
    (["--template", "per-gpu", "--gpus-per-node", "3", "--nproc-per-node", "1", "--script-convention", "per-node"],
     True),
    (["--template", "per-gpu", "--gpus-per-node", "3"], False),
    (["--template", "per-gpu", "--gpus-per-node", "3", "--script-convention", "per-node"], False),
    (["--template", "per-gpu", "--gpus-per-node", "3", "--nproc-per-node", "1", "--script-convention", "slurm"],
     False),
    (["--template", "torchrun", "--gpus-per-node", "3", "--nproc-per-node", "1"], False),
    (["--template", "torchrun", "--gpus-per-node", "3"], False),
    (["--template", "per-gpu", "--gpus-per-node", "3", "--nproc-per-node", "2"], False),
]


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_the_per_node_parent_renders_for_gpu_nodes_and_no_refusal_loops(tmp_path, lang, monkeypatch, capsys):
    """One task per node holding all its GPUs (--gres=gpu:N, the cores of N processes) renders; every
    refused form names a change to what was given: add --nproc-per-node 1 only where it is missing, take it
    away only where it is there, another template only where that one was not asked."""
    for args, renders in PER_NODE_GPU_FORMS:
        cores = [] if "--profile" in args else ["--cpus-per-process", "2"]  # akya-cuda: its 10 per GPU
        monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
        rc = main(["slurm", "render", "--nodes", "2", *cores, *args, "--script", str(PER_NODE_GPUS)])
        out, err = capsys.readouterr()
        given = " ".join(args)
        if renders:
            gpus, per_gpu = (4, 10) if "--profile" in args else (3, 2)
            assert rc == 0, (given, err)
            assert "--ntasks-per-node=1 " in out and f"--gres=gpu:{gpus} " in out, out
            assert f"--cpus-per-task={per_gpu * gpus} " in out and "NPROC_PER_NODE=1 " in out, out
            assert "one per GPU" not in out and "GPU başına bir)" not in out, out  # the comments say the form
            continue
        assert rc == 2 and err.strip().count("\n") == 0 and "Traceback" not in err, (given, err)
        asks_for_one = "--template per-gpu --nproc-per-node 1" in err
        takes_it_away = any(words in err for words in ("leave --nproc-per-node out", "Leave --nproc-per-node out",
                                                       "--nproc-per-node seçeneğini kaldırın"))
        if "--template per-gpu" in given and "--nproc-per-node 1" in given:
            assert not asks_for_one, (given, err)
        else:
            assert asks_for_one, (given, err)
        if takes_it_away:
            assert "--nproc-per-node" in given, (given, err)


def test_the_per_node_form_refuses_a_script_that_does_not_spawn(tmp_path):
    """One task with all the node's GPUs and a script that is one process: the others would sit idle."""
    rc, _, err = render(tmp_path, "--template", "per-gpu", "--nodes", "2", "--gpus-per-node", "3",
                        "--nproc-per-node", "1", "--script", str(SLURM_STYLE))
    assert rc == 2 and "does not start its own processes" in err and "Leave --nproc-per-node out" in err, err
    rc, out, err = render(tmp_path, "--template", "per-gpu", "--nodes", "2", "--gpus-per-node", "3",
                          "--script", str(SLURM_STYLE))
    assert rc == 0 and "--ntasks-per-node=3 " in out, err


def test_a_script_that_reads_nothing_gets_a_warning(tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text("print('hello')\n")
    rc, out, err = render(tmp_path, "--template", "torchrun", "--script", str(plain))
    assert rc == 0 and out.startswith("#!/bin/bash") and "warning:" in err and "check-script" in err, err


@pytest.mark.parametrize("given, argv", [
    (["--script-args", "--epochs=1 --log-interval=50"], ["--epochs=1", "--log-interval=50"]),
    (["--script-args", "--dry-run"], ["--dry-run"]),
    (["--script-args=--dry-run"], ["--dry-run"]),
    (["--script-args", "-x 'two words'"], ["-x", "two words"]),
])
def test_script_args_may_start_with_a_dash(tmp_path, given, argv):
    rc, out, err = render(tmp_path, "--template", "torchrun", "--script", str(TORCHRUN_STYLE), *given)
    assert rc == 0, err
    shown = re.search(r"^SCRIPT_ARGS=\((.*)\)", out, re.M).group(1)
    assert subprocess.run(["bash", "-c", f"a=({shown}); printf '%s\\0' \"${{a[@]}}\""], capture_output=True,
                          text=True).stdout.split("\0")[:-1] == argv


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_the_help_shows_script_args_with_a_dash(tmp_path, lang):
    rc, out, _ = render(tmp_path, "--help", lang=lang)
    assert rc == 0 and "--epochs=1 --dry-run" in " ".join(out.split()) and "--script-convention" in out


@pytest.mark.parametrize("output", [None, "job.sbatch"])
def test_workdir_relative_script_and_log_folder(tmp_path, output):
    """``--workdir`` + a relative ``--script``: the job script names the file by its absolute path (the
    one meant here), and the log folder exists under the workdir — for a plain sbatch too."""
    (tmp_path / "project").mkdir()
    script = tmp_path / "project" / "train.py"
    script.write_text(TORCHRUN_STYLE.read_text())
    more = ["-o", output] if output else []
    rc, out, err = render(tmp_path, "--template", "torchrun", "--workdir", "project", "--script", "project/train.py",
                          *more)
    assert rc == 0, err
    text = (tmp_path / output).read_text() if output else out
    assert f"SCRIPT={script}" in text and f"#SBATCH --chdir={tmp_path / 'project'}" in text  # from any folder
    log = Path(re.search(r"^#SBATCH --output=(\S+)", text, re.M).group(1))
    assert log.is_absolute() and log.parent == tmp_path / "project" / "runs" and log.parent.is_dir(), text
    # The same file named from the workdir is found too, and means the same.
    rc, out, err = render(tmp_path, "--template", "torchrun", "--workdir", "project", "--script", "train.py")
    assert rc == 0 and f"SCRIPT={script}" in out, err
    # Neither here nor there: one clear line.
    rc, _, err = render(tmp_path, "--template", "torchrun", "--workdir", "project", "--script", "other.py")
    assert rc == 2 and "neither here nor under --workdir project" in err, err


def test_without_workdir_the_log_folder_exists_after_a_render_to_stdout(tmp_path):
    rc, out, err = render(tmp_path, "--template", "torchrun", "--script", str(TORCHRUN_STYLE))
    assert rc == 0, err
    log = Path(re.search(r"^#SBATCH --output=(\S+)", out, re.M).group(1))
    assert (tmp_path / log.parent).is_dir()


def test_result_of_an_own_script_job_reads_the_exit_code_from_its_log(tmp_path, capsys):
    """``slurm result`` on a user-script job: the exit code the job script's last line reports (the real
    line of the templates, from the catalogue: tests/test_job_log.py renders it and runs it; the SLURM lab test
    below runs a real job)."""
    (tmp_path / "slurm-41.out").write_text("job 41 on n[1-2]\nRESULT {}\nyour script finished with exit code 3\n")
    assert main(["slurm", "result", "41", "--run-dir", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["exit_code"] == 3 and report["own_script"] and "exit code was 3" in captured.err
    (tmp_path / "slurm-42.out").write_text("job 42\ntraining finished with exit code 0\n")
    assert main(["slurm", "result", "42", "--run-dir", str(tmp_path)]) == 2  # the package's training: no result
    assert "No result for job 42" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------
# torchrun itself, and ipp.run / ipp.run_script


def test_the_torchrun_style_script_under_torchrun(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_NAMES}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    done = subprocess.run([str(VENV_BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", str(TORCHRUN_STYLE),
                           "--steps", "2"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    results = results_of(done.stdout)
    assert [r["rank"] for r in results] == [0, 1] and all(r["same_weights"] and r["steps"] == 2 for r in results)


def engine_leftovers():
    """What the engines hold of the launcher's variables and sys.argv, asked directly (not through ipp.run,
    which sets them for its call)."""
    from ddp_tutorial import ipp

    def held():
        import os
        import sys
        return {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                               "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS",
                                               "SLURM_CPUS_PER_TASK")}, list(sys.argv)
    return ipp.current().client[ipp.current().ids].apply_sync(held)


@pytest.fixture(scope="module")
def engines(two_engines):
    """Two local engines, kept for this module's runs (reused between calls, as in a notebook)."""
    yield


def test_ipp_run_runs_a_torchrun_style_function_as_it_is(engines, capsys):
    """torchrun_ddp.main, imported as it is: it reads RANK … from the environment, makes and closes its own
    group and parses sys.argv. Before and after, the engines hold none of it (they are reused)."""
    from ddp_tutorial import ipp
    from torchrun_ddp import main as torchrun_main

    before = engine_leftovers()
    first = ipp.run(torchrun_main, n=2, argv=["torchrun_ddp.py", "--steps", "3"], keep=True)
    assert [r["rank"] for r in first] == [0, 1] and {r["world_size"] for r in first} == {2}
    assert [r["local_rank"] for r in first] == [0, 1] and all(r["same_weights"] for r in first)
    assert {tuple(r["argv"]) for r in first} == {("--steps", "3")} and {r["steps"] for r in first} == {3}
    port = int(first[0]["master"].rsplit(":", 1)[1])
    assert engine_leftovers() == before  # everything put back
    second = ipp.run(torchrun_main, n=2, argv=["torchrun_ddp.py", "--dry-run"], keep=True)
    assert {r["steps"] for r in second} == {1} and int(second[0]["master"].rsplit(":", 1)[1]) != 29500
    assert port != 29500
    assert engine_leftovers() == before
    shown = capsys.readouterr().out
    assert '"rank": 0' in shown and '"rank": 1' not in shown  # rank 0's output, by default

    # The notebooks' functions (first parameter env) still get env and a ready group.
    def notebook_style(env, offset):
        import torch
        import torch.distributed as dist
        value = torch.tensor([float(env.rank + offset)])
        dist.all_reduce(value)
        return value.item()
    assert ipp.run(notebook_style, 1, n=2, keep=True) == [3.0, 3.0]
    assert engine_leftovers() == before

    # A SLURM-style function: srun's names are set for it (read from its source).
    def slurm_style():
        import os
        import torch
        import torch.distributed as dist
        rank, world_size = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        try:
            value = torch.tensor([float(rank)])
            dist.all_reduce(value)
            return (rank, int(os.environ["SLURM_LOCALID"]), world_size, value.item(),
                    int(os.environ["SLURM_CPUS_PER_TASK"]) >= 1, "SLURM_GPUS_ON_NODE" in os.environ)
        finally:
            dist.destroy_process_group()
    assert ipp.run(slurm_style, n=2, keep=True) == [(0, 0, 2, 1.0, True, False), (1, 1, 2, 1.0, True, False)]
    assert engine_leftovers() == before


def test_run_script_with_all_ranks_output_and_arguments(engines, capsys):
    from ddp_tutorial import ipp

    assert ipp.run_script(TORCHRUN_STYLE, args=["--steps", "2"], n=2, output="all", keep=True) == [None, None]
    out = capsys.readouterr().out
    ranks = {int(m.group(1)): json.loads(m.group(2)) for m in re.finditer(r"^\[rank (\d)\] RESULT (\{.*\})$",
                                                                          out, re.M)}
    assert sorted(ranks) == [0, 1] and all(r["steps"] == 2 and r["same_weights"] for r in ranks.values()), out
    # A SLURM-style script: its SLURM names are set for it (read from its source); --epochs=1 reaches it.
    ipp.run_script(SLURM_STYLE, args=["--epochs=1", "--dry-run"], n=2, keep=True)
    out = capsys.readouterr().out
    only = results_of(out)
    assert [r["rank"] for r in only] == [0] and only[0]["epochs"] == 1 and only[0]["dry_run"], out
    assert only[0]["sum_of_ranks"] == 1.0 and "[rank" not in out
    left, argv = engine_leftovers()[0]
    assert set(left.values()) == {None} and not argv[0].endswith("slurm_ddp.py")
    # An exit code other than 0 fails the run, naming it.
    with pytest.raises(TutorialError) as caught:
        ipp.run_script(TORCHRUN_STYLE, args=["--steps", "1", "--exit-code", "3"], n=2, keep=True)
    assert "exited with code 3" in str(caught.value)


def test_rank_0s_port_is_held_from_its_choice_until_its_group_takes_it(engines):
    """ipp.run once chose a free port and let rank 0 bind it later: any process of the node could take it in
    between (a full run of the suite once failed so: "Rank 0 cannot listen on 127.0.0.1:60477: the port is
    already in use"). The port is now held by rank 0's engine from its choice on, so nobody, rank 0's own
    code included, can bind it before ``init_process_group`` takes it over — in the notebooks' mode and in
    torchrun's."""
    from ddp_tutorial import ipp

    def try_to_take_the_port():
        import os
        import socket

        import torch
        import torch.distributed as dist
        with socket.socket() as other:
            try:
                other.bind((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])))
                taken_by_another = True
            except OSError:
                taken_by_another = False
        dist.init_process_group("gloo")
        one = torch.ones(1)
        dist.all_reduce(one)
        dist.destroy_process_group()
        return taken_by_another, one.item()

    assert ipp.run(try_to_take_the_port, n=2, group=False, keep=True)[0] == (False, 2.0)

    def the_groups_port(env):
        from ddp_tutorial.ipp import held_port
        return env.master_port, [store.port for store in held_port._HELD_STORE]

    # The notebooks' mode: the group is made on the port rank 0's engine holds (held there, on no other engine).
    (port, held), (_, none_held) = ipp.run(the_groups_port, n=2, keep=True)
    assert held == [port] and none_held == [], (port, held, none_held)


def test_group_true_with_a_function_that_makes_its_own_group_says_why(engines):
    """The notebooks' mode with a function that makes its own group: torch's "twice" and who made the
    first one; a function that takes no env is refused before anything runs. Last of the engine tests: a
    failed run stops the engines."""
    from ddp_tutorial import ipp
    from torchrun_ddp import main as torchrun_main

    with pytest.raises(TutorialError) as caught:
        ipp.run(torchrun_main, n=2, group=True)
    assert "takes no argument" in str(caught.value) and "group=False" in str(caught.value)

    def makes_its_own(env):
        import torch.distributed as dist
        dist.init_process_group("gloo")

    with pytest.raises(TutorialError) as caught:
        ipp.run(makes_its_own, n=2, keep=True, timeout=120)
    text = str(caught.value)
    assert "trying to initialize the default process group twice" in text and "group=False" in text, text
    assert "ipp.run made the process group before calling your function" in text and "lost contact" not in text


def test_run_script_refuses_a_per_node_parent():
    from ddp_tutorial import ipp
    with pytest.raises(TutorialError) as caught:
        ipp.run_script(PER_NODE, n=2)
    assert "--template per-gpu --nproc-per-node 1" in str(caught.value)


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_run_script_advice_for_a_per_node_parent_runs(tmp_path, monkeypatch):
    """Issue 47 item 6c: run_script's refusal gives the one-machine command with one SLURM task's names
    (a plain ``python SCRIPT`` fails with KeyError: 'SLURM_NPROCS', as the seed does); that command, run as
    given (only its MASTER_PORT swapped for a free one), trains on one machine. The Turkish refusal gives
    the same command."""
    import shlex
    from ddp_tutorial import ipp
    messages = {}
    for lang in ("tr", "en"):
        monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
        with pytest.raises(TutorialError) as caught:
            ipp.run_script(PER_NODE_GPUS, n=2)
        messages[lang] = str(caught.value)
    found = re.search(r"((?:[A-Z_]+=\S+ )+)python (\S+)", messages["en"])
    assert found, messages["en"]
    names = dict(pair.split("=", 1) for pair in found.group(1).split())
    assert {"SLURM_NPROCS", "SLURM_PROCID", "SLURM_GPUS_ON_NODE", "MASTER_ADDR", "MASTER_PORT"} <= set(names)
    assert found.group(0) in messages["tr"], messages["tr"]
    names["MASTER_PORT"] = str(free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in LAUNCHER_NAMES}
    script = shlex.split(found.group(2))[0]
    plain = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, timeout=120)
    assert plain.returncode != 0 and "SLURM_NPROCS" in plain.stderr, plain.stderr  # the old advice
    done = subprocess.run([sys.executable, script], env={**env, **names}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert [(r["rank"], r["world_size"], r["count"]) for r in results_of(done.stdout)] == [(0, 1, 1.0)], done.stdout


# ---------------------------------------------------------------------------------------------------
# The two-node SLURM lab: each convention with the template that fits, through a plain sbatch


@pytest.mark.slurm
@pytest.mark.slow
def test_each_convention_runs_on_two_nodes_through_plain_sbatch(slurm_cluster, tmp_path, monkeypatch):
    lab = slurm_cluster
    work = tmp_path / "work"
    work.mkdir()
    for script in (TORCHRUN_STYLE, SLURM_STYLE, PER_NODE):
        (work / script.name).write_text(script.read_text())
    cases = {  # name: (render arguments, processes per node in the job, expected RESULT lines)
        "torchrun": (["--template", "torchrun", "--nproc-per-node", "2", "--script", "work/torchrun_ddp.py",
                      "--script-args", "--dry-run"], 4),
        "slurm": (["--template", "per-gpu", "--nproc-per-node", "2", "--script", "slurm_ddp.py",
                   "--script-args", "--epochs=1 --dry-run"], 4),
        "per-node": (["--template", "per-gpu", "--nproc-per-node", "1", "--script", "work/per_node_parent.py",
                      "--env", "PROCS_PER_NODE=2"], 4),
    }
    jobs = {}
    monkeypatch.chdir(tmp_path)  # relative paths: work/… from here, slurm_ddp.py from the workdir
    for name, (args, _) in cases.items():
        out = tmp_path / f"{name}.sbatch"
        rc = main(["slurm", "render", "--nodes", "2", "--python", sys.executable, "--time", "00:10:00",
                   "--job-name", f"own-{name}", "--workdir", "work", "--run-dir", f"runs-{name}", *args,
                   "-o", str(out)])
        assert rc == 0, name
        done = subprocess.run(["sbatch", "--parsable", str(out)], env=lab.env, capture_output=True, text=True,
                              timeout=60, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        jobs[name] = done.stdout.strip().split(";")[0]
    from ddp_tutorial import slurm
    for name, job in jobs.items():
        info = slurm.wait(job, timeout=240, poll=0.5, max_poll=2, env=lab.env)
        log_file = work / f"runs-{name}" / f"slurm-{job}.out"
        log = log_file.read_text() if log_file.exists() else "(no log)"
        assert info.succeeded, f"{name}: {info.describe()}\n{log}"
        results = results_of(log)
        assert [r["rank"] for r in results] == [0, 1, 2, 3], (name, log)
        assert {r["world_size"] for r in results} == {4}, log
        if name == "slurm":
            assert {r["sum_of_ranks"] for r in results} == {6.0} and {r["epochs"] for r in results} == {1}
        done = subprocess.run([str(VENV_BIN / "ddp-tutorial"), "slurm", "result", job, "--run-dir",
                               str(work / f"runs-{name}")], env=lab.env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and json.loads(done.stdout)["exit_code"] == 0, done.stdout + done.stderr


@pytest.mark.slurm
@pytest.mark.slow
def test_the_per_node_parent_runs_over_the_gpus_slurm_gives(slurm_cluster, tmp_path, monkeypatch):
    """Issue 47 item 1 on the lab's fake GPUs: --gpus-per-node 3 --nproc-per-node 1 renders one task per
    node holding 3 GPUs, sbatch --test-only takes it, and the job's parent on each node starts one process
    per GPU SLURM gave it (SLURM_GPUS_ON_NODE, CUDA_VISIBLE_DEVICES), 2 × 3 = 6 ranks that all_reduce."""
    lab = slurm_cluster
    work = tmp_path / "work"
    work.mkdir()
    (work / PER_NODE_GPUS.name).write_text(PER_NODE_GPUS.read_text())
    monkeypatch.chdir(tmp_path)
    job_file = tmp_path / "per-node-gpus.sbatch"
    assert main(["slurm", "render", "--template", "per-gpu", "--nodes", "2", "--gpus-per-node", "3",
                 "--nproc-per-node", "1", "--cpus-per-process", "1", "--python", sys.executable, "--time",
                 "00:10:00", "--job-name", "own-per-node-gpus", "--workdir", "work", "--run-dir", "runs",
                 "--script", PER_NODE_GPUS.name, "-o", str(job_file)]) == 0
    text = job_file.read_text()
    assert "--ntasks-per-node=1 " in text and "--gres=gpu:3 " in text and "--cpus-per-task=3 " in text, text
    tested = subprocess.run(["sbatch", "--test-only", str(job_file)], env=lab.env, capture_output=True, text=True,
                            timeout=60, cwd=tmp_path)
    assert tested.returncode == 0, tested.stderr
    done = subprocess.run(["sbatch", "--parsable", str(job_file)], env=lab.env, capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    from ddp_tutorial import slurm
    info = slurm.wait(job, timeout=240, poll=0.5, max_poll=2, env=lab.env)
    log_file = work / "runs" / f"slurm-{job}.out"
    log = log_file.read_text() if log_file.exists() else "(no log)"
    assert info.succeeded, f"{info.describe()}\n{log}"
    results = results_of(log)
    assert [r["rank"] for r in results] == list(range(6)), log
    assert {r["world_size"] for r in results} == {6} and {r["count"] for r in results} == {6.0}, log
    assert {r["gpus_on_node"] for r in results} == {3}, log
    for node in (0, 1):  # each process of a node on its own one of the node's three GPUs
        gpus = [r["gpu"] for r in results if r["node"] == node]
        assert len(gpus) == 3 and len(set(gpus)) == 3 and None not in gpus, log


def test_a_type_error_is_not_a_lost_peer():
    """"peer" inside "TypeError" made every TypeError on an engine "lost contact with the other ranks" (the
    torchrun-style function called with env in the notebooks' mode said so, instead of its error)."""
    from ddp_tutorial.failures import classify_failure
    assert classify_failure("TypeError: main() takes 0 positional arguments but 1 was given") == "other"
    assert classify_failure("RuntimeError: Connection closed by peer [127.0.0.1]:29500") == "lost_peer"
