"""The project's own promises: packaging consistent, README's commands real, messages bilingual."""

import re
import string
import sys
import tomllib
from pathlib import Path

import yaml

import ddp_tutorial
from ddp_tutorial import cli, i18n

REPO = Path(__file__).resolve().parent.parent
CONDA_NAMES = {"torch": "pytorch"}  # PyPI name → conda-forge name


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~ \[;]", requirement.strip(), maxsplit=1)[0].lower()


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    conda = {_name(d) for d in env["dependencies"] if isinstance(d, str)}
    pip = [d for d in env["dependencies"] if isinstance(d, dict)][0]["pip"]
    assert "-e ." in pip
    wanted = set(project["dependencies"]) | set(project["optional-dependencies"]["test"]) | set(
        project["optional-dependencies"]["notebooks"])
    for requirement in wanted:
        name = _name(requirement)
        assert CONDA_NAMES.get(name, name) in conda, f"{name} is in pyproject.toml but not in environment.yml"
    declared = {CONDA_NAMES.get(_name(r), _name(r)) for r in wanted}
    assert conda - {"python", "pip"} <= declared, "environment.yml lists packages pyproject.toml does not"
    assert {"pytorch", "torchvision", "jupyterlab", "ipyparallel", "matplotlib", "nbval", "tqdm"} <= conda
    assert project["scripts"]["ddp-tutorial"] == "ddp_tutorial.cli:main"
    assert project["version"] == ddp_tutorial.__version__


def test_readme_opens_with_two_commands_and_ci_runs_the_test_one():
    readme = (REPO / "README.md").read_text()
    first_block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.splitlines() if line.split("#")[0].strip()]
    assert len(commands) == 2, commands
    assert readme.index("```bash") < readme.index("## ")       # before any section
    for command in commands:
        assert (REPO / command.split()[-1]).exists(), command
    ci = (REPO / ".ci" / "run").read_text()
    assert commands[1] in ci, ".ci/run must run the README's test command"


def test_every_message_exists_in_both_languages_with_the_same_fields():
    cli.build_parser()  # imports every module of the package, so every message is registered
    sys.path.insert(0, str(REPO))  # and the benchmarks' messages (benchmarks/ is not installed)
    import benchmarks.comm, benchmarks.gpu, benchmarks.profile, benchmarks.throughput  # noqa: F401,E401
    formatter = string.Formatter()
    catalogue = i18n.catalogue()
    assert len(catalogue) > 50
    assert len([k for k in catalogue if k.startswith(("bench.", "plot."))]) > 40
    for key, texts in catalogue.items():
        fields = {lang: {f for _, f, _, _ in formatter.parse(texts[lang]) if f} for lang in i18n.LANGUAGES}
        assert fields["en"] == fields["tr"], key
        if len(texts["en"]) > 25:
            assert texts["en"] != texts["tr"], f"{key} is not translated"


def test_language_choice(monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr_TR.UTF-8")
    assert i18n.language() == "tr"
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "de")
    assert i18n.language() == "en"
    monkeypatch.delenv("DDP_TUTORIAL_LANG")
    assert i18n.language() == "en"
