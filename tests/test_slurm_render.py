"""SLURM job scripts: every template renders to valid bash; hostile values are refused or stay text
(the rendered scripts are run with stub SLURM/module/conda commands); the engines' script."""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ddp_tutorial import slurm
from ddp_tutorial.i18n import TutorialError

REPO = Path(__file__).resolve().parent.parent
BASH = "/bin/bash"


def bash_n(text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / f"check-{abs(hash(text))}.sh"
    script.write_text(text)
    return subprocess.run([BASH, "-n", str(script)], capture_output=True, text=True)


TRUBA = {  # profile: (GPUs per node, cores per GPU)
    "barbun-cuda": (2, 20),
    "akya-cuda": (4, 10),
    "palamut-cuda": (8, 16),
    "kolyoz-cuda": (4, 16),
}


@pytest.mark.parametrize("profile", sorted(TRUBA))
def test_profile_fills_in_gpus_and_cores(profile, tmp_path):
    gpus, cores = TRUBA[profile]
    seed = slurm.render(slurm.JobSpec.from_profile(profile, nodes=2))
    assert f"#SBATCH --partition={profile} " in seed
    assert "#SBATCH --nodes=2 " in seed
    assert "#SBATCH --ntasks-per-node=1 " in seed
    assert f"#SBATCH --gres=gpu:{gpus} " in seed
    assert f"#SBATCH --cpus-per-task={gpus * cores} " in seed  # one launcher per node gets all cores
    assert f"NPROC_PER_NODE={gpus} " in seed
    assert "--device cuda" in seed and f"--threads {cores}" in seed

    per_gpu = slurm.render(slurm.JobSpec.from_profile(profile, nodes=2, template="per-gpu"))
    assert f"#SBATCH --ntasks-per-node={gpus} " in per_gpu
    assert f"#SBATCH --cpus-per-task={cores} " in per_gpu  # one task per GPU gets that GPU's cores
    for text in (seed, per_gpu):
        assert bash_n(text, tmp_path).returncode == 0


def test_cli_render_with_profile(tmp_path, capsys):
    from ddp_tutorial.cli import main

    out = tmp_path / "job.sh"
    code = main(["slurm", "render", "--profile", "palamut-cuda", "--nodes", "2", "--account", "myaccount",
                 "--module", "git/2.40", "--conda", "/truba/home/me/miniconda3",
                 "--conda-env", "torch", "--preempt-signal", "120", "--requeue", "--time", "1-00:00:00",
                 "-o", str(out), "--", "--scale-lr"])
    assert code == 0
    text = out.read_text()
    assert os.access(out, os.X_OK)
    for line in ("#SBATCH --account=myaccount", "#SBATCH --partition=palamut-cuda", "#SBATCH --gres=gpu:8",
                 "#SBATCH --cpus-per-task=128", "#SBATCH --time=1-00:00:00", "#SBATCH --signal=B:USR1@120",
                 "#SBATCH --requeue", "#SBATCH --open-mode=append", "module purge",
                 "module load git/2.40", "conda activate torch", "--scale-lr", "REQUEUE=1"):
        assert line in text, line
    assert bash_n(text, tmp_path).returncode == 0


@pytest.mark.parametrize("template", sorted(slurm.TEMPLATES))
@pytest.mark.parametrize("form", ["cpu", "gpu", "preemptible"])
def test_every_template_renders_to_valid_bash(template, form, tmp_path):
    spec = slurm.JobSpec(template=template, nodes=2, nproc_per_node=2)
    if form == "gpu":
        spec = slurm.JobSpec(template=template, nodes=2, gpus_per_node=3, cpus_per_process=4)
    if form == "preemptible":
        spec.signal_seconds, spec.requeue, spec.venv = 90, True, "/opt/venv"
    text = slurm.render(spec)
    assert "{{" not in text and "}}" not in text
    assert text.startswith("#!/bin/bash\n")
    check = bash_n(text, tmp_path)
    assert check.returncode == 0, check.stderr
    assert ("--gres=gpu:3" in text) == (form == "gpu")
    # Every #SBATCH line comes before the first command (sbatch stops reading at it).
    lines = text.splitlines()
    first_command = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    assert all(i < first_command for i, line in enumerate(lines) if line.startswith("#SBATCH"))
    assert not any(line.startswith("#SBACTH") for line in lines)  # the seed's typo


# Values that would run a command if pasted into a script unquoted. {canary} is an absolute path.
NASTY = [
    "x; touch {canary}",
    "$(touch {canary})",
    "`touch {canary}`",
    "x' ; touch {canary} ; echo '",
    'x" ; touch {canary} ; echo "',
    "x\ntouch {canary}",
    "x && touch {canary}",
    "x | tee {canary}",
    "x > {canary}",
    "${{IFS}}$(touch${{IFS}}{canary})",
]


def _stub_bin(work: Path) -> Path:
    """Stand-ins for srun/scontrol/module/conda/sbatch/python/torchrun: srun records its arguments,
    the others do nothing."""
    stubs = work / "stubs"
    stubs.mkdir()
    record = work / "argv"
    programs = {
        "srun": f'for a in "$@"; do printf "%s\\0" "$a"; done >> {record}\n',
        "scontrol": 'if [ "$1 $2" = "show hostnames" ]; then echo n1; echo n2; fi\n',
        "module": "true\n",
        "conda": "true\n",
        "sbatch": "true\n",
        "python": "true\n",
        "torchrun": "true\n",
    }
    for name, body in programs.items():
        path = stubs / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return stubs


def _run_with_stubs(text: str, tmp_path: Path) -> list:
    """Execute the rendered script with stub SLURM commands; return the arguments srun got."""
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    stubs = _stub_bin(work)
    script = work / "job.sh"
    script.write_text(text)
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "SLURM_JOB_ID": "123", "SLURM_JOB_NODELIST": "n[1-2]",
           "SLURM_NNODES": "2", "SLURM_CPUS_PER_TASK": "2", "HOME": str(work)}
    subprocess.run([BASH, str(script)], env=env, cwd=work, capture_output=True, text=True, timeout=30)
    record = work / "argv"
    return record.read_bytes().decode().split("\0")[:-1] if record.exists() else []


# Fields written into shell commands: shell-quoted, so any text without control characters is kept.
QUOTED = {
    "root": lambda v: dict(root=v),
    "python": lambda v: dict(python=v),
    "venv": lambda v: dict(venv=v),
    "conda": lambda v: dict(conda=v, conda_env=v),
    "env value": lambda v: dict(env=(("DDP_NOTE", v),)),
    "train_args": lambda v: dict(train_args=("--root", v)),
}
# Fields written on #SBATCH lines (read by sbatch without a shell) or as module names: strict.
STRICT = {
    "job_name": lambda v: dict(job_name=v),
    "account": lambda v: dict(account=v),
    "partition": lambda v: dict(partition=v),
    "qos": lambda v: dict(qos=v),
    "time": lambda v: dict(time=v),
    "run_dir": lambda v: dict(run_dir=v),
    "workdir": lambda v: dict(workdir=v),
    "modules": lambda v: dict(modules=(v,)),
}


@pytest.mark.parametrize("template", sorted(slurm.TEMPLATES))
@pytest.mark.parametrize("field", sorted(QUOTED))
def test_metacharacters_are_quoted_or_rejected_never_executed(template, field, tmp_path):
    canary = tmp_path / "canary"
    for raw in NASTY:
        value = raw.format(canary=canary)
        spec = slurm.JobSpec(template=template, nodes=2, nproc_per_node=2, run_dir=str(tmp_path / "runs"),
                             **QUOTED[field](value))
        try:
            text = slurm.render(spec)
        except TutorialError as error:
            assert "\n" in value or "\r" in value, f"{field}={value!r} was refused: {error}"
            assert error.key == "slurm.bad_value"
            continue
        check = bash_n(text, tmp_path)
        assert check.returncode == 0, (value, check.stderr)
        argv = _run_with_stubs(text, tmp_path)
        assert not canary.exists(), f"{field}={value!r} ran a command"
        assert argv, "the stub srun was not called"
        if field == "root":
            assert argv[argv.index("--root") + 1] == value  # arrives exactly as given
        if field == "train_args":
            assert argv[argv.index("--root") + 1] == value
        if field == "python":
            assert value in argv


@pytest.mark.parametrize("field", sorted(STRICT))
def test_sbatch_line_values_with_metacharacters_are_rejected(field, tmp_path):
    canary = tmp_path / "canary"
    for raw in NASTY + ["with space", "a'b", 'a"b', "a\\b", "a#b"]:
        value = raw.format(canary=canary)
        with pytest.raises(TutorialError) as caught:
            slurm.render(slurm.JobSpec(**STRICT[field](value)))
        assert caught.value.key == "slurm.bad_value"
        name = "module" if field == "modules" else field
        for lang in ("en", "tr"):
            assert name in caught.value.text(lang)
    assert not canary.exists()



# ------------------------------------------------------------------------------------------
# ipyparallel engines through SLURM (ddp_tutorial.ipp.start_slurm): a notebook on a login node


def test_engine_script_for_gpu_nodes(tmp_path):
    """The engines' job for 2 palamut-cuda nodes: one engine (task) per GPU, the profile's cores,
    and exactly one gap left for ipyparallel to fill; braces and shell syntax in our values
    reach the script as text."""
    from ipyparallel.cluster.launcher import EvalFormatter

    canary = tmp_path / "canary"
    note = f"${{HOME}} {{n}} $(touch {canary}); `touch {canary}`"
    template = slurm.render_engines(slurm.JobSpec.from_profile(
        "palamut-cuda", nodes=2, account="acc1", time="01:00:00", env=(("DDP_NOTE", note),)))
    assert template.count("{program_and_args}") == 1
    script = EvalFormatter().format(template, program_and_args=f"{sys.executable} -m ipyparallel.engine")
    for line in ("--partition=palamut-cuda", "--account=acc1", "--nodes=2", "--ntasks-per-node=8",
                 "--gres=gpu:8", "--cpus-per-task=16", "--time=01:00:00"):
        assert f"#SBATCH {line} " in script, line
    assert f"srun --kill-on-bad-exit=0 {sys.executable} -m ipyparallel.engine" in script
    assert bash_n(script, tmp_path).returncode == 0
    # The exported value comes back exactly, and nothing in it ran.
    path = tmp_path / "engines.sh"
    path.write_text(script.split("# ---- environment")[0] + 'printf "%s" "$DDP_NOTE"\n')
    shown = subprocess.run([BASH, str(path)], capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert shown.stdout == note and not canary.exists()


def test_engine_script_for_cpu_nodes_and_bad_values(tmp_path):
    spec = slurm.JobSpec(nodes=3, nproc_per_node=2, cpus_per_process=4, time="00:20:00")
    template = slurm.render_engines(spec)
    assert "#SBATCH --ntasks-per-node=2 " in template and "--gres" not in template
    assert "export OMP_NUM_THREADS=4" in template
    with pytest.raises(TutorialError) as caught:
        slurm.render_engines(slurm.JobSpec(nodes=2, partition="gpu; rm -rf ~"))
    assert caught.value.key == "slurm.bad_value"


def test_start_slurm_refuses_before_submitting(tmp_path, monkeypatch):
    """Bad values and a missing SLURM are clear errors, in both languages, before anything runs."""
    from ddp_tutorial import ipp

    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    with pytest.raises(TutorialError) as caught:
        ipp.start_slurm(nodes=2, engines_per_node=2, run_dir=str(tmp_path))
    assert caught.value.key == "slurm.missing" and "sbatch" in str(caught.value)
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr")
    with pytest.raises(TutorialError) as caught:
        ipp.start_slurm(nodes=0, run_dir=str(tmp_path))
    assert caught.value.key == "slurm.bad_value" and "Geçersiz nodes=0" in str(caught.value)
    with pytest.raises(TutorialError) as caught:
        ipp.start_slurm(nodes=1, gpus_per_node=2, engines_per_node=3, run_dir=str(tmp_path))
    assert caught.value.key == "slurm.gpu_cpu_conflict"
    assert ipp.current() is None


def test_templates_are_installed_with_the_package(tmp_path):
    """A plain (non-editable) install carries the sbatch templates: they are package data."""
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path), str(REPO)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    import zipfile

    (wheel,) = tmp_path.glob("ddp_tutorial-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in [*slurm.TEMPLATES.values(), slurm.ENGINES_TEMPLATE, "README.md"]:
        assert f"ddp_tutorial/sbatch/{name}" in names, sorted(names)
    for module in ("__init__", "spec", "render", "jobs", "cli"):  # the subpackage itself
        assert f"ddp_tutorial/slurm/{module}.py" in names, sorted(names)




# ------------------------------------------------------------------------------------------
# Issue 13, bug 1: a value that contains a gap received generated lines whose quotes closed its own


def test_gaps_are_filled_in_one_pass():
    from ddp_tutorial.slurm.render import fill

    assert fill("a {{x}} b {{y}}", {"x": "{{y}}", "y": "Y"}) == "a {{y}} b Y"
    with pytest.raises(TutorialError) as caught:
        fill("{{nope}}", {})
    assert caught.value.key == "slurm.template_gap"


def test_issue_13_injection_is_refused(tmp_path, capsys):
    from ddp_tutorial.cli import main

    canary = tmp_path / "pwned"
    for argv in (["--env", "NOTE={{setup}}", "--venv", f"/opt/v;touch {canary};"],
                 ["--python", "{{setup}}", "--conda", f"/c;touch {canary};#", "--conda-env", "e"],
                 ["--root", "{{setup}}", "--venv", f"/opt/v;touch {canary};"]):
        assert main(["slurm", "render", *argv, "-o", str(tmp_path / "job.sh")]) == 2
        err = capsys.readouterr().err
        assert "{{" in err and "slurm" not in err.split(":")[0].lower()
    assert not (tmp_path / "job.sh").exists()
    # Without the gap in it, the same hostile venv is one quoted word: it runs nothing.
    text = slurm.render(slurm.JobSpec(env=(("NOTE", "{setup}"),), venv=f"/opt/v;touch {canary};"))
    assert f"source '/opt/v;touch {canary};/bin/activate'" in text
    _run_with_stubs(text, tmp_path)
    assert not canary.exists()


def test_issue_13_newline_in_run_dir_is_refused(capsys):
    from ddp_tutorial.cli import main

    assert main(["slurm", "render", "--run-dir", "runs\n", "--preempt-signal", "60", "--requeue"]) == 2
    assert "run_dir" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------
# The hostile-value sweep: every free-text field, through the Python spec, the CLI and the
# engines' script. Each value is refused with a clear message, or rendered so that running the
# script (SLURM, module, conda, python, torchrun stubbed out) runs nothing of it.

HOSTILE = [raw.replace("{{", "{").replace("}}", "}") for raw in NASTY] + [
    "{{setup}}", "{{settings}}", "{{sbatch}}", "{{program}}", "{{engines}}", "x {{setup}} ; touch {canary}",
    "{program_and_args}; touch {canary}", "{0}{1}", "%j %x",
    "'", '"', "\\", "a'b\"c", "$HOME", "${HOME}", "$((1+1))", "!!", "~root", "*",
    "x\r", "x\ttouch {canary}", "\x1b[2J", "x\x00y", "x\u2028touch {canary}", "x\n", "\ntouch {canary}",
    "x\x85touch {canary}", "-", "--", "",
]


def _hostile(canary: Path):
    return [raw.replace("{canary}", str(canary)) for raw in HOSTILE]


# field: (how to put a value into a JobSpec, the template)
SPEC_FIELDS = {
    "job_name": (lambda v: dict(job_name=v), "seed"),
    "account": (lambda v: dict(account=v), "seed"),
    "partition": (lambda v: dict(partition=v), "per-gpu"),
    "qos": (lambda v: dict(qos=v), "torchrun"),
    "time": (lambda v: dict(time=v), "seed"),
    "run_dir": (lambda v: dict(run_dir=v), "per-gpu"),
    "workdir": (lambda v: dict(workdir=v), "torchrun"),
    "python": (lambda v: dict(python=v), "seed"),
    "modules": (lambda v: dict(modules=(v,)), "per-gpu"),
    "conda": (lambda v: dict(conda=v, conda_env="env"), "torchrun"),
    "conda_env": (lambda v: dict(conda="/opt/conda", conda_env=v), "seed"),
    "venv": (lambda v: dict(venv=v), "per-gpu"),
    "env name": (lambda v: dict(env=((v, "x"),)), "torchrun"),
    "env value": (lambda v: dict(env=(("DDP_NOTE", v),)), "seed"),
    "dataset": (lambda v: dict(dataset=v), "seed"),
    "root": (lambda v: dict(root=v), "per-gpu"),
    "train_args": (lambda v: dict(train_args=("--root", v)), "torchrun"),
    "script": (lambda v: dict(script=v), "per-gpu"),
    "script (torchrun)": (lambda v: dict(script=v), "torchrun"),
    "script_args string": (lambda v: dict(script="/t.py", script_args=v), "per-gpu"),
    "script_args tuple": (lambda v: dict(script="/t.py", script_args=("--note", v)), "torchrun"),
}


def _assert_harmless(text: str, canary: Path, tmp_path: Path, what: str) -> list:
    check = bash_n(text, tmp_path)
    assert check.returncode == 0, (what, check.stderr)
    lines = text.splitlines()
    first_command = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    late = [line for line in lines[first_command:] if line.startswith("#SBATCH")]
    assert not late, f"{what}: #SBATCH after a command: {late}"
    argv = _run_with_stubs(text, tmp_path)
    assert not canary.exists(), f"{what} ran a command"
    return argv


def _assert_clear(error: TutorialError, what: str) -> None:
    # slurm_train.*, config.*: the training's own rules for the options after -- (issue 25, A12)
    assert error.key.startswith(("slurm.", "slurm_train.", "config.")), (what, error.key)
    english, turkish = error.text("en"), error.text("tr")
    assert english and turkish and english != turkish, what
    assert "Traceback" not in english


@pytest.mark.parametrize("field", sorted(SPEC_FIELDS))
def test_hostile_values_in_the_job_spec(field, tmp_path):
    canary = tmp_path / "canary"
    make, template = SPEC_FIELDS[field]
    rendered = 0
    for value in _hostile(canary):
        what = f"JobSpec {field}={value!r}"
        spec = slurm.JobSpec(template=template, nodes=2, nproc_per_node=2, **make(value))
        if field != "run_dir":
            spec.run_dir = str(tmp_path / "runs")
        try:
            text = slurm.render(spec)
        except TutorialError as error:
            _assert_clear(error, what)
            continue
        rendered += 1
        argv = _assert_harmless(text, canary, tmp_path, what)
        assert argv, f"{what}: the stub srun was not called"
        if field in ("root", "train_args") or field.startswith("script_args"):
            assert value in argv or (field == "script_args string"), what  # arrives exactly as given
    print(f"{field}: {rendered} of {len(HOSTILE)} hostile values rendered (as text), the rest refused")


CLI_FIELDS = {  # field: the command-line options that carry the value
    "--job-name": lambda v: [f"--job-name={v}"],
    "--account": lambda v: [f"--account={v}"],
    "--partition": lambda v: [f"--partition={v}"],
    "--qos": lambda v: [f"--qos={v}"],
    "--time": lambda v: [f"--time={v}"],
    "--workdir": lambda v: [f"--workdir={v}"],
    "--python": lambda v: [f"--python={v}"],
    "--module": lambda v: [f"--module={v}"],
    "--conda": lambda v: [f"--conda={v}", "--conda-env", "e"],
    "--conda-env": lambda v: ["--conda", "/opt/conda", f"--conda-env={v}"],
    "--venv": lambda v: [f"--venv={v}"],
    "--env": lambda v: [f"--env=NOTE={v}"],
    "--env name": lambda v: [f"--env={v}=1"],
    "--dataset": lambda v: [f"--dataset={v}"],
    "--root": lambda v: [f"--root={v}"],
    "train args": lambda v: ["--", "--root", v],
    "--script-args": lambda v: ["--template", "per-gpu", "--script", "{script}", f"--script-args={v}"],
    "--script": lambda v: ["--template", "torchrun", f"--script={v}"],
}


@pytest.mark.parametrize("field", sorted(CLI_FIELDS))
def test_hostile_values_on_the_command_line(field, tmp_path, capsys):
    from ddp_tutorial.cli import main

    canary = tmp_path / "canary"
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    for i, value in enumerate(_hostile(canary)):
        if "\x00" in value:
            continue  # the kernel cannot pass a NUL in an argument: no user can type it
        what = f"{field} {value!r}"
        out = tmp_path / f"job{i}.sh"
        args = [a.replace("{script}", str(script)) for a in CLI_FIELDS[field](value)]
        if field == "--script" and "/" not in value and value not in ("", ".", ".."):
            try:  # a script with the hostile name, so that it exists
                (tmp_path / value).write_text("")
                args[-1] = f"--script={tmp_path / value}"
            except (OSError, ValueError):
                pass
        code = main(["slurm", "render", "--run-dir", str(tmp_path / "runs"), "-o", str(out), *args])
        captured = capsys.readouterr()
        if code != 0:
            assert code == 2, what
            assert "Traceback" not in captured.err and captured.err.strip(), what
            assert not out.exists(), what
            continue
        _assert_harmless(out.read_text(), canary, tmp_path, what)


@pytest.mark.parametrize("field", sorted(f for f in SPEC_FIELDS if not f.startswith("script")))
def test_hostile_values_in_the_engines_script(field, tmp_path):
    from ipyparallel.cluster.launcher import EvalFormatter

    canary = tmp_path / "canary"
    make, _ = SPEC_FIELDS[field]
    for value in _hostile(canary):
        what = f"render_engines {field}={value!r}"
        spec = slurm.JobSpec(nodes=2, nproc_per_node=2, **make(value))
        if field != "run_dir":
            spec.run_dir = str(tmp_path / "runs")
        try:
            template = slurm.render_engines(spec)
        except TutorialError as error:
            _assert_clear(error, what)
            continue
        text = EvalFormatter().format(template, program_and_args="python -m ipyparallel.engine")
        _assert_harmless(text, canary, tmp_path, what)


# ------------------------------------------------------------------------------------------
# Your own script (issue 11, req 5) and NCCL settings (issue 14, req 5)


@pytest.mark.parametrize("template", sorted(slurm.SCRIPT_TEMPLATES))
def test_own_script_is_run_by_every_process(template, tmp_path):
    spec = slurm.JobSpec(template=template, nodes=2, nproc_per_node=2, run_dir=str(tmp_path / "runs"),
                         script="/home/me/my train.py", script_args="--out 'two words' $HOME")
    text = slurm.render(spec)
    assert "ddp_tutorial.train" not in text and "TRAIN_ARGS" not in text
    assert "SCRIPT='/home/me/my train.py'" in text
    assert "SCRIPT_ARGS=(--out 'two words' '$HOME')" in text
    assert "export MASTER_PORT=$((15000 + SLURM_JOB_ID % 15000))" in text
    argv = _assert_harmless(text, tmp_path / "canary", tmp_path, template)
    assert argv[-4:] == ["/home/me/my train.py", "--out", "two words", "$HOME"]
    if template == "per-gpu":
        assert "RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS" in text
        assert argv[argv.index("rank-env") + 1:argv.index("rank-env") + 3] == ["python", "-c"]  # the rank check
    else:  # torchrun runs the file through the rank check (ddp_tutorial/convention.py)
        start = argv.index("--max-restarts") + 2
        assert argv[start:start + 4] == ["--no-python", "python", "-u", "-c"]
        assert argv[start + 5] == "/home/me/my train.py"


def test_own_script_on_the_command_line(tmp_path, capsys):
    from ddp_tutorial.cli import main

    script = tmp_path / "train.py"
    script.write_text("")
    out = tmp_path / "job.sh"
    assert main(["slurm", "render", "--template", "torchrun", "--script", str(script),
                 "--script-args", "--epochs 3", "-o", str(out)]) == 0
    assert f"SCRIPT={script}" in out.read_text() and "SCRIPT_ARGS=(--epochs 3)" in out.read_text()
    capsys.readouterr()
    assert main(["slurm", "render", "--template", "torchrun", "--script", str(tmp_path / "nope.py")]) == 2
    assert "nope.py" in capsys.readouterr().err
    assert main(["slurm", "render", "--template", "seed", "--script", str(script)]) == 2
    assert "torchrun" in capsys.readouterr().err


@pytest.mark.parametrize("template", sorted(slurm.TEMPLATES))
def test_gpu_jobs_export_nccl_settings_unless_set(template, tmp_path):
    gpu = slurm.render(slurm.JobSpec(template=template, gpus_per_node=2))
    assert 'export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"' in gpu
    # torch's default asynchronous error handling (3) is kept: no template forces mode 1
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in gpu
    assert "NCCL_DEBUG" not in slurm.render(slurm.JobSpec(template=template, nproc_per_node=2))
    # the user's own value wins
    script = tmp_path / "show.sh"
    head = gpu.split("# ---- environment")[0]
    script.write_text(head + 'echo "$NCCL_DEBUG"\n')
    shown = subprocess.run([BASH, str(script)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert shown.stdout.split() == ["WARN"]
    shown = subprocess.run([BASH, str(script)], capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin", "NCCL_DEBUG": "INFO"})
    assert shown.stdout.split() == ["INFO"]
    engines = slurm.render_engines(slurm.JobSpec(gpus_per_node=2))
    assert "NCCL_DEBUG" in engines and "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in engines


def _network_of(script_text: str, tmp_path, stderr: list = None, **env) -> list:
    """Run a rendered script's network block for real (this machine's `ip` and `getent`); what it
    wrote on stderr goes into ``stderr`` when given."""
    block = script_text.split("# ---- which network")[1].split("# ----")[0]
    block = block.split("\n", 1)[1]  # without the rest of its heading line
    script = tmp_path / "net.sh"
    script.write_text(block + 'echo "GLOO=$GLOO_SOCKET_IFNAME NCCL=$NCCL_SOCKET_IFNAME"\n')
    done = subprocess.run([BASH, str(script)], capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"], **env})
    assert done.returncode == 0, done.stderr
    if stderr is not None:
        stderr.append(done.stderr)
    return done.stdout.splitlines()[-1].split()


def _non_loopback_address():
    psutil = pytest.importorskip("psutil")
    for name, addresses in psutil.net_if_addrs().items():
        for a in addresses:
            if a.family == socket.AF_INET and not a.address.startswith("127.") and name != "lo":
                return name, a.address
    pytest.skip("this machine has no non-loopback IPv4 address")


@pytest.mark.parametrize("template", sorted(slurm.TEMPLATES))
def test_one_interface_rule_for_gloo_and_nccl_overridable(template, tmp_path):
    """GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME come from one rule: the interface holding the address
    MASTER_ADDR resolves to. DDP_TUTORIAL_IFNAME overrides both; each variable already set is kept."""
    for spec in (slurm.JobSpec(template=template, gpus_per_node=2), slurm.JobSpec(template=template)):
        text = slurm.render(spec)
        assert text.index("export MASTER_ADDR=") < text.index("# ---- which network") < text.index("\nsrun ")
        name, address = _non_loopback_address()   # rank 0's address: the interface holding it, for both
        assert _network_of(text, tmp_path, MASTER_ADDR=address) == [f"GLOO={name}", f"NCCL={name}"]
        assert _network_of(text, tmp_path, MASTER_ADDR="localhost", DDP_TUTORIAL_IFNAME="ib0") == [
            "GLOO=ib0", "NCCL=ib0"]
        assert _network_of(text, tmp_path, MASTER_ADDR=address, NCCL_SOCKET_IFNAME="^docker,lo") == [
            f"GLOO={name}", "NCCL=^docker,lo"]
        # a name that does not resolve: nothing is set, gloo and NCCL choose as they would
        assert _network_of(text, tmp_path, MASTER_ADDR="no-such-node.invalid") == ["GLOO=", "NCCL="]


@pytest.mark.parametrize("template", sorted(slurm.TEMPLATES))
def test_the_interface_rule_never_chooses_loopback(template, tmp_path):
    """Review N9: a first node whose name resolves to 127.* (a Debian-style /etc/hosts line, some
    containers; `localhost` here) must not make every rank bind lo — nothing is set, gloo/NCCL choose,
    and a multi-node job says why on stderr, in one line in the job's language (review N-20 of issue 49: it
    printed the English, then the Turkish, in a Turkish job)."""
    for lang in ("en", "tr"):
        text = slurm.render(slurm.JobSpec(template=template, gpus_per_node=2), lang=lang)
        for master in ("localhost", "127.0.0.1", "127.0.1.1"):
            said = []
            assert _network_of(text, tmp_path, said, MASTER_ADDR=master, SLURM_JOB_NUM_NODES="2") == [
                "GLOO=", "NCCL="], master
            assert len(said[0].splitlines()) == 1 and said[0].startswith(f"!! MASTER_ADDR={master}: "), said
            english, turkish = "resolves to a loopback address" in said[0], "geri döngü (loopback, 127.*)" in said[0]
            assert (english, turkish) == ((True, False) if lang == "en" else (False, True)), said[0]
            assert "DDP_TUTORIAL_IFNAME" in said[0]
            said = []   # one node: loopback is where everything is anyway; nothing to say
            assert _network_of(text, tmp_path, said, MASTER_ADDR=master, SLURM_JOB_NUM_NODES="1") == [
                "GLOO=", "NCCL="]
            assert said == [""]
        name, address = _non_loopback_address()
        said = []
        assert _network_of(text, tmp_path, said, MASTER_ADDR=address, SLURM_JOB_NUM_NODES="2") == [
            f"GLOO={name}", f"NCCL={name}"]
        assert said == [""]


@pytest.mark.parametrize("profile", ["barbun-cuda", "akya-cuda", "palamut-cuda", "kolyoz-cuda"])
def test_launcher_cores_match_the_profile(profile):
    """cpus-per-task of a launcher = the profile's cores per GPU × the GPUs asked for (e.g. 3, the seed's;
    barbun-cuda's nodes have 2); asking for more GPUs than a node's cores cover is refused, in words."""
    p = slurm.PROFILES[profile]
    gpus = min(3, p.gpus_per_node)
    text = slurm.render(slurm.JobSpec.from_profile(profile, gpus_per_node=gpus, template="torchrun"))
    assert f"#SBATCH --cpus-per-task={gpus * p.cpus_per_gpu} " in text
    assert gpus * p.cpus_per_gpu <= p.cores_per_node
    with pytest.raises(TutorialError) as caught:
        slurm.render(slurm.JobSpec.from_profile(profile, gpus_per_node=p.gpus_per_node + 1, template="torchrun"))
    assert caught.value.key == "slurm.too_many_cores"
    assert str(p.cores_per_node) in caught.value.text("en") and str(p.cores_per_node) in caught.value.text("tr")
    assert f"--threads {p.cpus_per_gpu}" in text and f"export OMP_NUM_THREADS={p.cpus_per_gpu} " in text


def _check_block(text: str) -> str:
    return "# ---- GPU check" + text.split("# ---- GPU check")[1].split("\n\n")[0] + "\n"


def test_gpu_jobs_check_once_that_this_torch_fits_the_gpus(tmp_path):
    """A GPU job of the package's training stops at once, with the verdict and the fixing command, when
    the torch of $PYTHON cannot use the node's GPUs (a fake nvidia-smi: driver 565 + V100, TRUBA's
    akya-cuda, and this machine's PyPI cu130 torch); no GPU seen or a fitting build: it goes on. Every
    template renders the same check (asserted), so it runs once here, not once per template."""
    texts = {template: slurm.render(slurm.JobSpec(template=template, gpus_per_node=2))
             for template in sorted(slurm.TEMPLATES)}
    for text in texts.values():
        assert text.index("# ---- which network") < text.index("# ---- GPU check") < text.index("\nsrun ")
    blocks = {_check_block(text) for text in texts.values()}
    assert len(blocks) == 1, blocks
    script = tmp_path / "check.sh"
    script.write_text(f"PYTHON={sys.executable}\n" + blocks.pop() + 'echo "went on"\n')
    node = tmp_path / "node"
    node.mkdir()
    (node / "nvidia-smi").write_text("#!/bin/sh\nprintf '%s\\n' 'Tesla V100-SXM2-16GB, 7.0, 565.57.01'\n")
    (node / "nvidia-smi").chmod(0o755)
    base = {"PATH": os.environ["PATH"], "DDP_TUTORIAL_LANG": "en", "PYTHONPATH": str(REPO)}
    import torch
    if torch.version.cuda == "13.0" and not torch.cuda.is_available():  # this machine's torch
        done = subprocess.run([BASH, str(script)], capture_output=True, text=True, timeout=120,
                              env={**base, "PATH": f"{node}:{os.environ['PATH']}"})
        assert done.returncode == 2 and "went on" not in done.stdout, done.stdout + done.stderr
        assert "bash scripts/setup.sh --cuda cu126" in done.stdout and "GPU check failed" in done.stdout
    no_gpu = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not Path(p, "nvidia-smi").exists())
    done = subprocess.run([BASH, str(script)], capture_output=True, text=True, timeout=120,
                          env={**base, "PATH": no_gpu})
    assert done.returncode == 0 and "went on" in done.stdout, done.stdout + done.stderr
    for template in texts:  # not for CPU jobs, nor for your own script (its environment need not have this package)
        assert "# ---- GPU check" not in slurm.render(slurm.JobSpec(template=template, nproc_per_node=2))
        if template in slurm.SCRIPT_TEMPLATES:
            own = slurm.render(slurm.JobSpec(template=template, gpus_per_node=2, script="train.py"))
            assert "# ---- GPU check" not in own


# ------------------------------------------------------------------------------------------
# Issue 28: the rendered script's comments are in the user's language; its shell code is not touched

def _code_and_comments(text: str):
    """(the shell code, line by line without its comments; the comments). A full-line comment is a
    comment; so is the `# …` after code or after an #SBATCH option (the option itself is code)."""
    code, comments = [], []
    for line in text.splitlines():
        if line.startswith("#!") or not line.strip():
            code.append(line)
        elif line.lstrip().startswith("#") and not line.startswith("#SBATCH"):
            comments.append(line.strip())
        else:
            head, sep, tail = line.partition("  # ") if not line.startswith("#SBATCH") else line.partition(" # ")
            code.append(head.rstrip())
            if sep:
                comments.append(tail.strip())
    code = [line for line in code if line.strip()]
    return code, comments


SECTION = re.compile(r"^# ---- [^/]+ / [^/]+ -+$")  # a section header, bilingual on purpose: "# ---- launch / başlat"
# What an echo line prints is in the job's language too (issue 37): the code around it is compared.
ECHO_TEXT = re.compile(r'(echo "|^\s+")[^"]*"')


def _without_echo_texts(code):
    return [ECHO_TEXT.sub(r'\1…"', line) for line in code]


def _specs():
    for template in sorted(slurm.TEMPLATES):
        yield template, slurm.JobSpec(template=template, nodes=2, nproc_per_node=2)
        yield template, slurm.JobSpec(template=template, nodes=2, gpus_per_node=3, cpus_per_process=4,
                                      signal_seconds=90, requeue=True, venv="/opt/venv")
        if template in slurm.SCRIPT_TEMPLATES:
            yield template, slurm.JobSpec(template=template, gpus_per_node=2, script="/home/me/train.py")


@pytest.mark.parametrize("kind", ["job", "engines"])
def test_rendered_comments_follow_the_language_and_the_code_does_not(kind, monkeypatch):
    """Under DDP_TUTORIAL_LANG=tr every comment of a rendered script is Turkish (none is the English
    one), under en English; section headers stay bilingual; the shell code is byte-identical but for
    the texts its echo lines print, which are in the job's language too."""
    renders = ([(template, spec) for template, spec in _specs()] if kind == "job"
               else [("ipengines", slurm.JobSpec(nodes=2, gpus_per_node=2)), ("ipengines", slurm.JobSpec(nodes=2))])
    for template, spec in renders:
        text = {}
        for lang in ("tr", "en"):
            monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
            text[lang] = slurm.render(spec) if kind == "job" else slurm.render_engines(spec)
        assert text["tr"] == (slurm.render(spec, lang="tr") if kind == "job" else slurm.render_engines(spec, lang="tr"))
        (code_tr, comments_tr), (code_en, comments_en) = (_code_and_comments(text[lang]) for lang in ("tr", "en"))
        assert _without_echo_texts(code_tr) == _without_echo_texts(code_en), template
        assert code_tr != code_en, f"{template}: its echo lines print the same (English) text under tr"
        english = set(comments_en)
        left = [c for c in comments_tr if c in english and c != "#" and not SECTION.match(c)]
        assert not left, f"{template}: English comment lines in the Turkish script: {left}"
        assert any("ü" in c or "ı" in c or "ş" in c for c in comments_tr), template
        for lang in ("tr", "en"):
            assert not any(mark in text[lang] for mark in "⟪‖⟫"), (template, lang)
        assert "kaynak öğretici" in text["tr"] or template != "seed"
        assert "seed öğreticisi" not in text["tr"] and "not defteri" not in text["tr"]


def test_a_broken_bilingual_comment_is_a_clear_error():
    from ddp_tutorial.slurm.render import in_language

    assert in_language("a # ⟪bir‖one⟫\n# ⟪iki\n# satır‖two\n# lines⟫", "tr") == "a # bir\n# iki\n# satır"
    assert in_language("a # ⟪bir‖one⟫", "en") == "a # one"
    for broken in ("# ⟪bir‖one", "# bir‖one⟫", "# ⟪bir⟫"):
        with pytest.raises(TutorialError) as caught:
            in_language(broken, "tr", "x.sbatch")
        assert caught.value.key == "slurm_script.broken_marker" and "x.sbatch" in str(caught.value)


@pytest.mark.parametrize("script", [None, "/home/me/train.py"])
def test_torchrun_is_told_to_pass_sigusr1_on_by_its_own_option(script, tmp_path):
    """torch 2.14's torchrun overwrites TORCHELASTIC_SIGNALS_TO_HANDLE from its --signals-to-handle option
    (default without SIGUSR1: the preemption signal killed torchrun, exit 138, and the workers trained on).
    The launch srun gets, read by the pinned torch's own parser, must hand SIGUSR1 on; nothing exports the
    variable. A real SIGUSR1: tests/test_torchrun_preemption.py."""
    from torch.distributed.run import get_args_parser

    spec = slurm.JobSpec(template="torchrun", nodes=2, nproc_per_node=2, run_dir=str(tmp_path / "runs"), script=script)
    text = slurm.render(spec)
    assert "TORCHELASTIC_SIGNALS_TO_HANDLE=" not in text
    argv = _run_with_stubs(text, tmp_path)
    options = argv[argv.index("torch.distributed.run") + 1:]
    parsed = get_args_parser().parse_args(options)
    assert "SIGUSR1" in parsed.signals_to_handle.split(","), parsed.signals_to_handle
    assert {"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"} <= set(parsed.signals_to_handle.split(","))
