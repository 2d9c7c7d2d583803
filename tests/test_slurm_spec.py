"""SLURM job spec: site profiles, the check of every value, job ids, messages (no cluster)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddp_tutorial import slurm
from ddp_tutorial.i18n import TutorialError

REPO = Path(__file__).resolve().parent.parent





@pytest.mark.parametrize("changes, key", [
    (dict(nodes=0), "slurm.bad_value"),
    (dict(nodes=-1), "slurm.bad_value"),
    (dict(nodes="2"), "slurm.bad_value"),
    (dict(nodes=True), "slurm.bad_value"),
    (dict(gpus_per_node=-1), "slurm.bad_value"),
    (dict(nproc_per_node=0), "slurm.bad_value"),
    (dict(cpus_per_process=0), "slurm.bad_value"),
    (dict(gpus_per_node=4, nproc_per_node=2), "slurm.gpu_cpu_conflict"),
    (dict(time="2 hours"), "slurm.bad_value"),
    (dict(time="25:00:00:00"), "slurm.bad_value"),
    (dict(epochs=-1), "slurm.bad_value"),
    (dict(batch_size=0), "slurm.bad_value"),
    (dict(lr=0.0), "slurm.bad_value"),
    (dict(lr=float("nan")), "slurm.bad_value"),
    (dict(dataset="cifar10"), "slurm.bad_value"),
    (dict(signal_seconds=0), "slurm.bad_value"),
    (dict(conda="/opt/conda"), "slurm.conda_needs_env"),
    (dict(env=(("1BAD", "x"),)), "slurm.bad_value"),
    (dict(env=(("A;B", "x"),)), "slurm.bad_value"),
    (dict(template="mpi"), "slurm.unknown_template"),
])
def test_bad_values_give_bilingual_errors(changes, key):
    with pytest.raises(TutorialError) as caught:
        slurm.render(slurm.JobSpec(**changes))
    assert caught.value.key == key
    english, turkish = caught.value.text("en"), caught.value.text("tr")
    assert english and turkish and english != turkish


def test_unknown_profile():
    with pytest.raises(TutorialError) as caught:
        slurm.JobSpec.from_profile("truba-gpu")
    assert caught.value.key == "slurm.unknown_profile"
    assert "palamut-cuda" in str(caught.value)


def test_time_formats_sbatch_accepts():
    for value in ("30", "30:00", "02:00:00", "1-00", "1-12:00", "3-00:00:00"):
        slurm.render(slurm.JobSpec(time=value))


def test_job_ids_are_checked():
    assert slurm.job_id_of(" 42\n") == "42"
    for bad in ("42; scancel -u root", "$(id)", "", "12_3", "-1"):
        with pytest.raises(TutorialError) as caught:
            slurm.job_id_of(bad)
        assert caught.value.key == "slurm.bad_job_id"



def test_messages_are_bilingual():
    from ddp_tutorial.i18n import catalogue

    ours = {k: v for k, v in catalogue().items() if k.startswith("slurm.")}
    assert len(ours) > 20
    for key, texts in ours.items():
        assert texts["en"].strip() and texts["tr"].strip(), key




# ------------------------------------------------------------------------------------------
# Issue 13, bug 2: `re.match` + `$` let a trailing newline through (it ends the #SBATCH block)


@pytest.mark.parametrize("field", ["job_name", "account", "partition", "qos", "time", "run_dir", "workdir"])
@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_a_trailing_newline_is_refused(field, end):
    value = ("02:00:00" if field == "time" else "runs") + end
    with pytest.raises(TutorialError) as caught:
        slurm.render(slurm.JobSpec(**{field: value}))
    assert caught.value.key == "slurm.bad_value"
    assert field in caught.value.text("en") and field in caught.value.text("tr")


def test_modules_with_a_trailing_newline_are_refused():
    with pytest.raises(TutorialError) as caught:
        slurm.render(slurm.JobSpec(modules=("cuda/12.1\n",)))
    assert caught.value.key == "slurm.bad_value"


@pytest.mark.parametrize("value", ["٠٢:٠٠:٠٠", "０２:００:００", "1-٠٠", "৩০"])
def test_times_take_ascii_digits_only(value):
    with pytest.raises(TutorialError) as caught:
        slurm.render(slurm.JobSpec(time=value))
    assert caught.value.key == "slurm.bad_value"


@pytest.mark.parametrize("value", ["٤٢", "４２", "42\n\n7", "42\x00"])
def test_job_ids_take_ascii_digits_only(value):
    with pytest.raises(TutorialError) as caught:
        slurm.job_id_of(value)
    assert caught.value.key == "slurm.bad_job_id"


# ------------------------------------------------------------------------------------------
# One source of truth: the training options follow the rules of ddp_tutorial.config's table


@pytest.mark.parametrize("field, value", [("epochs", 100_001), ("batch_size", 0), ("lr", 11.0),
                                          ("lr", float("inf")), ("seed", 2**63 - 1), ("seed", -1),
                                          ("dataset", "cifar10"), ("epochs", True)])
def test_training_options_follow_the_training_rules(field, value):
    from ddp_tutorial.config import TRAIN_RULES
    from ddp_tutorial.validate import check

    with pytest.raises(TutorialError) as train_error:
        check(field, value, TRAIN_RULES[field])
    with pytest.raises(TutorialError) as caught:
        slurm.render(slurm.JobSpec(**{field: value}))
    assert caught.value.key == "slurm.bad_value"
    # the same rule, in the same words, as TrainConfig gives
    assert caught.value.fields["rule"] == train_error.value.fields["rule"] == TRAIN_RULES[field].describe()
    # and what the training accepts, the job spec accepts
    slurm.render(slurm.JobSpec(**{field: {"dataset": "fashion-mnist", "lr": 10.0, "seed": 2**63 - 1 - 100_000,
                                          "epochs": 100_000, "batch_size": 1}[field]}))


def test_the_job_spec_training_fields_are_the_tables_job_options():
    # One definition per option (issue 23): JobSpec's training fields, their check and the job's
    # command line all come from TrainConfig's table (job=True).
    from dataclasses import fields

    from ddp_tutorial.config import JOB_OPTIONS, TrainConfig

    assert JOB_OPTIONS == ("dataset", "root", "epochs", "batch_size", "lr", "seed")
    assert set(JOB_OPTIONS) <= {f.name for f in fields(slurm.JobSpec)}
    assert all(getattr(slurm.JobSpec(), name) is None for name in JOB_OPTIONS)  # None: the training's default
    spec = slurm.JobSpec(seed=7, root="/data/x", dataset="fashion-mnist", lr=0.5, epochs=3, batch_size=32)
    assert spec.training_argv == ("--dataset", "fashion-mnist", "--root", "/data/x", "--epochs", "3",
                                  "--batch-size", "32", "--lr", "0.5", "--seed", "7")
    assert "TRAIN_ARGS=(--dataset fashion-mnist --root /data/x --epochs 3 --batch-size 32 --lr 0.5 --seed 7 " \
           "--device cpu --threads 1)" in slurm.render(spec)
    # what the job passes on, the training reads back as the same values
    from ddp_tutorial.config import add_train_arguments, config_from_args
    import argparse

    parsed = config_from_args(add_train_arguments(argparse.ArgumentParser()).parse_args(list(spec.training_argv)))
    assert all(getattr(parsed, name) == getattr(spec, name) for name in JOB_OPTIONS)
    assert isinstance(parsed, TrainConfig)
    for name in JOB_OPTIONS:  # and a user's own script takes none of them
        with pytest.raises(TutorialError) as caught:
            slurm.render(slurm.JobSpec(template="torchrun", script="/home/me/train.py",
                                       **{name: getattr(spec, name)}))
        assert caught.value.key == "slurm.script_with_train_options"
    with pytest.raises(TutorialError) as caught:
        slurm.render(slurm.JobSpec(root=""))
    assert caught.value.key == "slurm.bad_value"


def test_dataset_names_come_from_the_datasets_module():
    from ddp_tutorial.datasets import NAMES

    for name in NAMES:
        assert f"--dataset {name}" in slurm.render(slurm.JobSpec(dataset=name))


# ------------------------------------------------------------------------------------------
# The user's own script (issue 11, req 5): checked like everything else


@pytest.mark.parametrize("changes, key", [
    (dict(template="seed", script="/home/me/train.py"), "slurm.script_template"),
    (dict(template="torchrun", script="/home/me/train.py", epochs=3), "slurm.script_with_train_options"),
    (dict(template="per-gpu", script="/home/me/train.py", train_args=("--scale-lr",)),
     "slurm.script_with_train_options"),
    (dict(template="torchrun", script_args="--epochs 3"), "slurm.script_args_without_script"),
    (dict(template="torchrun", script="/home/me/train.py", script_args="--name 'unclosed"), "slurm.bad_value"),
    (dict(template="torchrun", script="/home/me/train.py", script_args="a\nb"), "slurm.bad_value"),
    (dict(template="torchrun", script="/home/me/train.py\n"), "slurm.bad_value"),
    (dict(template="torchrun", script=""), "slurm.bad_value"),
])
def test_script_values_are_checked(changes, key):
    with pytest.raises(TutorialError) as caught:
        slurm.render(slurm.JobSpec(**changes))
    assert caught.value.key == key
    assert caught.value.text("en") != caught.value.text("tr")


def test_script_args_as_string_or_tuple():
    spec = slurm.JobSpec(template="torchrun", script="t.py", script_args="--out 'two words' $HOME")
    assert spec.script_argv == ("--out", "two words", "$HOME")
    spec = slurm.JobSpec(template="torchrun", script="t.py", script_args=("--out", "two words"))
    assert spec.script_argv == ("--out", "two words")


# ------------------------------------------------------------------------------------------
# Profiles (issue 14): the torch wheel each GPU partition needs, no CUDA module


def test_the_site_build_runs_on_every_gpu_profile():
    """The torch build for TRUBA comes from one table (ddp_tutorial.gpu); every GPU profile's partition is
    in it and that build has kernels for its GPUs."""
    from ddp_tutorial import gpu
    site = gpu.SITES["truba"]
    variant = gpu.suggest(list(site.partitions.values()), site.driver)
    assert variant == "cu126"
    for p in slurm.PROFILES.values():
        if p.gpus_per_node:
            assert gpu.has_kernels(site.partitions[p.partition], gpu.VARIANTS[variant].arch_list), p.name
    assert not any(p.checked for p in slurm.PROFILES.values())  # from the site's documents, not nvidia-smi
    text = slurm.render(slurm.JobSpec.from_profile("palamut-cuda"))
    assert "module load" not in text and "cuda/12" not in text


# ------------------------------------------------------------------------------------------
# Rendering happens on a login node: no torch import


def test_rendering_does_not_import_torch(tmp_path):
    code = ("import sys\n"
            "import ddp_tutorial.slurm\n"
            "assert 'torch' not in sys.modules, 'import ddp_tutorial.slurm imported torch'\n"
            "from ddp_tutorial.cli import main\n"
            f"code = main(['slurm', 'render', '--template', 'torchrun', '-o', {str(tmp_path / 'job.sh')!r}])\n"
            "assert code == 0, code\n"
            "bad = main(['slurm', 'render', '--nodes', '0'])\n"
            "assert bad == 2, bad\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False", "ddp-tutorial slurm render imported torch"
    assert (tmp_path / "job.sh").is_file()


def test_start_slurm_takes_job_spec_fields_with_three_renames(tmp_path, monkeypatch):
    # ipp.start_slurm no longer restates JobSpec: its keywords are JobSpec's fields, three renamed.
    from ddp_tutorial import ipp
    from ddp_tutorial.ipp import slurm as engines

    monkeypatch.delenv("DDP_TUTORIAL_SLURM_GPUS", raising=False)  # the class's GPUs: the seed's 3 (T5-5)
    spec = engines._engine_spec("palamut-cuda", dict(nodes=2, gpus_per_node=None, nproc_per_node=None),
                                dict(time_limit="00:10:00", cpus_per_engine=3, modules=["cuda/12"], qos="short",
                                     run_dir=str(tmp_path)))
    assert (spec.time, spec.cpus_per_process, spec.modules, spec.qos, spec.gpus_per_node, spec.job_name) == (
        "00:10:00", 3, ("cuda/12",), "short", 3, "ddp-tutorial-engines")
    assert engines._engine_spec("generic", dict(nodes=1), {}).time == "01:00:00"
    for wrong in ("epochs", "time", "script", "cpus_per_process"):  # training fields, or JobSpec's name of a rename
        with pytest.raises(TutorialError) as caught:
            ipp.start_slurm(nodes=1, run_dir=str(tmp_path), **{wrong: 1})
        assert caught.value.key == "config.unknown_option" and "time_limit" in str(caught.value)
    assert ipp.current() is None
