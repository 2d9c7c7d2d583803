"""One definition: JobSpec's table, the one rendezvous timeout, the profiles' cores, the workshop profile from one
place, partition/account/reservation first-class, and the preview that says what a job will ask for (issues 33.4,
34.5). No cluster needed: the lab's tests are in test_slurm_jobs.py."""

from __future__ import annotations

import ast
import inspect
import re
import tomllib
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from ddp_tutorial import config, ipp, slurm
from ddp_tutorial.i18n import TutorialError
from ddp_tutorial.slurm import presubmit
from ddp_tutorial.slurm import spec as spec_module

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "ddp_tutorial"
CATALOGUES = {lang: tomllib.loads((PACKAGE / "messages" / f"{lang}.toml").read_text()) for lang in ("en", "tr")}


def _message(lang: str, key: str) -> str:
    table = CATALOGUES[lang]
    section, _, rest = key.partition(".")
    return table[section][rest] if rest in table[section] else table[section][rest.split(".")[0]][rest.split(".", 1)[1]]


# -- the one rendezvous timeout ------------------------------------------------------------------------------


def test_one_rendezvous_timeout_default_and_no_second_literal():
    """--timeout, ipp.run's pg_timeout and the exercise checks share config.RENDEZVOUS_TIMEOUT; nowhere in the
    package is a process-group timeout given as a number (parameter default or keyword), and the help line takes
    its number from the table."""
    assert config.TrainConfig().timeout == config.RENDEZVOUS_TIMEOUT
    assert inspect.signature(ipp.run).parameters["pg_timeout"].default == config.RENDEZVOUS_TIMEOUT
    literals = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.args + node.args.kwonlyargs
                defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + node.args.defaults
                defaults += node.args.kw_defaults
                for arg, default in zip(args, defaults):
                    if arg.arg == "pg_timeout" and isinstance(default, ast.Constant):
                        literals.append(f"{path.relative_to(REPO)}:{node.lineno} def {node.name}(pg_timeout=…)")
            elif isinstance(node, ast.Call):
                for keyword in node.keywords:
                    if keyword.arg == "pg_timeout" and isinstance(keyword.value, ast.Constant):
                        literals.append(f"{path.relative_to(REPO)}:{node.lineno} pg_timeout={keyword.value.value}")
                if (getattr(node.func, "id", None) == "option" and node.args and isinstance(node.args[0], ast.Constant)
                        and any(k.arg == "help" and getattr(k.value, "value", "") == "cli.timeout"
                                for k in node.keywords)):
                    literals.append(f"{path.relative_to(REPO)}:{node.lineno} --timeout default")
    assert not literals, literals
    for lang in ("en", "tr"):
        assert "{default" in CATALOGUES[lang]["cli"]["timeout"]


# -- help lines take their defaults from the tables ----------------------------------------------------------


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_no_help_line_repeats_a_default_by_hand(lang):
    """A help line of a TrainConfig or JobSpec field with a default names it as {default} (filled from the
    table), never as a number or word typed again."""
    word = {"en": "default", "tr": "varsayılan"}[lang]
    checked = 0
    for table, key_of in ((fields(config.TrainConfig), lambda f: f.metadata.get("help")),
                          (fields(slurm.JobSpec), lambda f: f.metadata.get("help"))):
        for f in table:
            key = key_of(f)
            if not key or f.default is MISSING or f.default in (None, (), False):
                continue
            text = _message(lang, key)
            if word in text:
                assert "{default" in text, (key, text)
                checked += 1
    assert checked >= 11  # epochs, batch size, lr, seed, layers, hidden, timeout; nodes, time, run dir, python …


def test_render_help_shows_the_tables_defaults(capsys):
    import argparse
    parser = argparse.ArgumentParser()
    slurm.add_render_arguments(parser)
    text = parser.format_help()
    for option in ("--partition", "--account", "--reservation", "--qos", "--preempt-signal", "--requeue"):
        assert option in text
    assert "(default 2)" in text and "(default 00:30:00)" in text  # nodes, time: from the table


# -- JobSpec is one table ------------------------------------------------------------------------------------


def test_every_jobspec_field_has_a_rule_and_validate_is_a_loop():
    missing = [f.name for f in fields(slurm.JobSpec) if f.metadata.get("rule") is None]
    assert not missing, missing
    assert len(spec_module.CROSS_RULES) <= 6
    tree = ast.parse(inspect.getsource(spec_module.validate))
    kinds = [type(node).__name__ for node in ast.walk(tree)]
    assert kinds.count("For") == 2 and "Raise" not in kinds  # the table's rules, then the cross-field rules


@pytest.mark.parametrize("name,value", [("partition", "gpu;rm"), ("account", "a b"), ("reservation", "ws\n#SBATCH"),
                                        ("qos", "")])
def test_partition_account_reservation_are_checked_like_every_sbatch_line(name, value):
    with pytest.raises(TutorialError) as caught:
        slurm.validate(slurm.JobSpec(**{name: value}))
    assert caught.value.key == "slurm.bad_value" and name in caught.value.text("en") and name in caught.value.text("tr")


def test_reservation_partition_account_written_only_when_given():
    plain = slurm.render(slurm.JobSpec())
    assert "--reservation" not in plain and "--partition" not in plain and "--account" not in plain
    text = slurm.render(slurm.JobSpec(partition="debug", account="ddp", reservation="workshop"))
    for line in ("#SBATCH --partition=debug ", "#SBATCH --account=ddp ", "#SBATCH --reservation=workshop "):
        assert line in text
    engines = slurm.render_engines(slurm.JobSpec(reservation="workshop"))
    assert "#SBATCH --reservation=workshop " in engines


def test_the_command_line_takes_partition_account_reservation(capsys, monkeypatch, tmp_path):
    from ddp_tutorial.cli import main
    monkeypatch.chdir(tmp_path)
    assert main(["slurm", "render", "--partition", "debug", "--account", "ddp", "--reservation", "ws"]) == 0
    out = capsys.readouterr().out
    for line in ("#SBATCH --partition=debug ", "#SBATCH --account=ddp ", "#SBATCH --reservation=ws "):
        assert line in out


def test_start_slurm_takes_a_reservation():
    from ddp_tutorial.ipp import slurm as ipp_slurm
    spec = ipp_slurm._engine_spec("akya-cuda", dict(nodes=2, gpus_per_node=1), dict(reservation="ws", account="a"))
    assert (spec.partition, spec.reservation, spec.account, spec.cpus_per_process) == ("akya-cuda", "ws", "a", 10)


# -- profiles: cores inside the node; the workshop's profile from one place ----------------------------------


@pytest.mark.parametrize("name", [n for n, p in slurm.PROFILES.items() if p.gpus_per_node])
def test_every_profile_fits_its_node(name):
    p = slurm.PROFILES[name]
    assert p.cores_per_node and p.gpus_per_node * p.cpus_per_gpu <= p.cores_per_node
    spec = slurm.JobSpec.from_profile(name, template="seed")
    assert spec.cpus_per_task * spec.tasks_per_node <= p.cores_per_node
    slurm.render(spec)  # the whole node: accepted


def test_akya_with_palamuts_cores_is_refused_in_words():
    """The review's N3: SBATCH_PARTITION=akya-cuda with palamut's 16 cores per GPU asked for 48 of 40 cores."""
    with pytest.raises(TutorialError) as caught:
        slurm.render(slurm.JobSpec.from_profile("akya-cuda", gpus_per_node=3, cpus_per_process=16))
    assert caught.value.key == "slurm.too_many_cores"
    assert "48" in caught.value.text("en") and "40" in caught.value.text("tr")


@pytest.mark.parametrize("environ,expected", [
    ({}, "generic"),
    ({"DDP_TUTORIAL_SLURM_PROFILE": "akya-cuda"}, "akya-cuda"),
    ({"SBATCH_PARTITION": "barbun-cuda"}, "barbun-cuda"),      # sbatch goes there: take its shape
    ({"SBATCH_PARTITION": "debug"}, "generic"),                # a partition no profile knows
    ({"DDP_TUTORIAL_SLURM_PROFILE": "generic", "SBATCH_PARTITION": "debug"}, "generic"),
    ({"DDP_TUTORIAL_SLURM_PROFILE": "akya-cuda", "SBATCH_PARTITION": "akya-cuda"}, "akya-cuda"),
])
def test_the_workshop_profile_comes_from_one_place(environ, expected):
    assert slurm.workshop_profile(environ) == expected


@pytest.mark.parametrize("environ,key", [
    ({"DDP_TUTORIAL_SLURM_PROFILE": "akya"}, "slurm.unknown_profile_variable"),
    ({"DDP_TUTORIAL_SLURM_PROFILE": "akya-cuda", "SBATCH_PARTITION": "palamut-cuda"},
     "slurm.profile_partition_conflict"),
])
def test_a_profile_that_contradicts_sbatch_is_refused(environ, key):
    with pytest.raises(TutorialError) as caught:
        slurm.workshop_profile(environ)
    assert caught.value.key == key
    for lang in ("en", "tr"):
        assert "DDP_TUTORIAL_SLURM_PROFILE" in caught.value.text(lang)


def test_render_and_start_slurm_default_to_the_workshop_profile(monkeypatch, capsys, tmp_path):
    from ddp_tutorial.cli import main
    from ddp_tutorial.ipp import slurm as ipp_slurm
    monkeypatch.setenv("DDP_TUTORIAL_SLURM_PROFILE", "akya-cuda")
    monkeypatch.chdir(tmp_path)
    assert main(["slurm", "render", "--gpus-per-node", "2"]) == 0
    out = capsys.readouterr().out
    assert "#SBATCH --partition=akya-cuda " in out and "#SBATCH --cpus-per-task=20 " in out
    assert ipp_slurm._engine_spec(None, dict(nodes=1), {}).partition == "akya-cuda"


# -- the preview and the refusals ----------------------------------------------------------------------------


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_the_preview_names_partition_account_reservation_and_their_source(lang, monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
    spec = slurm.JobSpec.from_profile("akya-cuda", nodes=2, gpus_per_node=3, reservation="ws")
    text = slurm.preview(spec, environ={"SBATCH_ACCOUNT": "proj", "SBATCH_RESERVATION": "other"}, profile="akya-cuda")
    assert "akya-cuda" in text and "proj" in text and "SBATCH_ACCOUNT" in text
    assert "SBATCH_RESERVATION=other" in text and "ws" in text  # the variable wins over the script's line
    assert "30" in text and ("world size 6" in text or "dünya boyutu 6" in text)
    plain = slurm.preview(slurm.JobSpec(), environ={})
    assert {"en": "the cluster's default partition", "tr": "kümenin varsayılan kuyruğu"}[lang] in plain


@pytest.mark.parametrize("detail,key,named", [
    ("Invalid partition name specified", "slurm.refused.partition", "nope"),
    ("Requested reservation is invalid", "slurm.refused.reservation", "ws"),
    ("Invalid account or account/partition combination specified", "slurm.refused.account", "acct"),
    ("Requested node configuration is not available", "slurm.refused.shape", "nope"),
    ("Something new", "slurm.refused.other", "Something new"),
])
def test_a_refusal_names_what_to_change(detail, key, named):
    spec = slurm.JobSpec(partition="nope", reservation="ws", account="acct", gpus_per_node=2)
    error = presubmit.refusal(detail, spec, environ={})
    assert error.key == key
    for lang in ("en", "tr"):
        assert named in error.text(lang) and detail in error.text(lang)
    assert not re.search(r"\{\w+\}", error.text("tr"))
