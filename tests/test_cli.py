"""The ``ddp-tutorial`` command: it answers at once (no torch import where none is needed), and its
help and usage errors are in the user's language.

Every run is a fresh interpreter, as a user's command would be: whether torch is imported is a
property of the whole start-up, which an in-process call cannot show.
"""

from __future__ import annotations

import argparse
import gettext
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddp_tutorial import cli
from ddp_tutorial.config import TrainConfig
from ddp_tutorial.i18n import t

try:
    from idx_files import write_mnist_like
except ImportError:  # tests/ imported as a package
    from tests.idx_files import write_mnist_like

REPO = Path(__file__).resolve().parents[1]

# Runs ddp_tutorial.cli.main(argv) the way the `ddp-tutorial` entry point does, then reports, on
# the last line of stderr, the exit code and whether torch (or torchvision) was ever imported.
PROBE = """
import json, sys
from ddp_tutorial.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit_:
    code = exit_.code
print(json.dumps({"code": code, "torch": sorted(m for m in ("torch", "torchvision") if m in sys.modules)}),
      file=sys.stderr)
"""


def run(*argv: str, lang: str = "en", before: str = "") -> tuple:
    env = {**os.environ, "DDP_TUTORIAL_LANG": lang, "COLUMNS": "200",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", before + PROBE, *argv], env=env, capture_output=True, text=True,
                          timeout=120)
    *stderr, report = done.stderr.rstrip("\n").split("\n")
    return json.loads(report), done.stdout, "\n".join(stderr)


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory) -> Path:
    return write_mnist_like(tmp_path_factory.mktemp("cli") / "root", n_train=300, n_test=60)


def quick_commands(root: Path, out: Path) -> dict:
    return {
        "--help": ["--help"],
        "train --help": ["train", "--help"],
        "data check": ["data", "check", "--dataset", "mnist", "--root", str(root)],
        "slurm render": ["slurm", "render", "--nodes", "1", "--gpus-per-node", "0", "--nproc-per-node", "2",
                         "--root", str(root), "-o", str(out)],
    }


@pytest.mark.parametrize("name", ["--help", "train --help", "data check", "slurm render"])
def test_quick_commands_do_not_import_torch(name, tiny_root, tmp_path):
    report, stdout, stderr = run(*quick_commands(tiny_root, tmp_path / "job.sh")[name])
    assert report["code"] == 0, stderr
    assert report["torch"] == [], f"`ddp-tutorial {name}` imported {report['torch']}"
    if name == "slurm render":
        assert (tmp_path / "job.sh").read_text().startswith("#!")
    if name == "data check":
        assert "300 train / 60 test" in stdout


def test_the_probe_sees_torch_when_it_is_imported():
    # The check above can fail: the same probe, with torch imported first, reports it.
    report, stdout, _ = run("--help", before="import torch\n")
    assert report == {"code": 0, "torch": ["torch"]} and "train" in stdout


def test_help_answers_in_under_a_second():
    # The figure for issue 15 (goal < 1 s); measured here, asserted loosely: the machine is shared.
    started = time.monotonic()
    report, stdout, _ = run("--help")
    elapsed = time.monotonic() - started
    print(f"ddp-tutorial --help: {elapsed:.2f} s")
    assert report["code"] == 0 and "train" in stdout
    assert elapsed < 10


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_help_in_the_users_language(lang):
    report, top, _ = run("--help", lang=lang)
    assert report["code"] == 0
    _, train, _ = run("train", "--help", lang=lang)
    words = {"en": ("usage: ", "options:", "show this help message and exit"),
             "tr": ("kullanım: ", "seçenekler:", "bu yardım iletisini gösterin ve çıkın")}[lang]
    for text in (top, train):
        for word in words:
            assert word in text, (word, text)
    for key in ("cli.train", "cli.env", "cli.slurm", "data.cli.data"):  # every subcommand's line
        assert t(key, lang=lang) in top
    for key in ("cli.epochs", "cli.batch_size", "cli.nproc_per_node", "cli.group_training", "cli.group_launch"):
        default = getattr(TrainConfig, key.removeprefix("cli."), None)  # a help line's {default}: from the table
        assert t(key, lang=lang, default=default) in train, key
    if lang == "tr":
        assert "usage" not in top + train and "show this help" not in top + train


BAD = {  # argv → (English words, Turkish words) of the one error line
    "bad-int": (["train", "--epochs", "abc"], "argument --epochs: 'abc' is not a whole number",
                "--epochs argümanı: 'abc' bir tam sayı değil"),
    "bad-choice": (["data", "check", "--dataset", "cifar10"], "invalid choice: 'cifar10'",
                   "geçersiz seçim: 'cifar10'"),
    "no-command": ([], "the following arguments are required", "şu argümanlar gerekli"),
    "unknown-option": (["train", "--epoch-count", "3"], "unrecognized arguments: --epoch-count 3",
                       "tanınmayan argümanlar: --epoch-count 3"),
    "missing-value": (["train", "--epochs"], "expected one argument", "bir değer bekleniyordu"),
    # the turkish-and-truth report: argparse named the subcommand by its variable (slurm_command) and gave
    # "invalid float value" for the slurm commands' number options
    "no-slurm-command": (["slurm"], "required: {render,submit,status,wait,cancel,logs,result}",
                         "gerekli: {render,submit,status,wait,cancel,logs,result}"),
    "bad-float": (["slurm", "wait", "1", "--poll", "abc"], "argument --poll: 'abc' is not a number",
                  "--poll argümanı: 'abc' bir sayı değil"),
}


@pytest.mark.parametrize("case", list(BAD))
@pytest.mark.parametrize("lang", ["en", "tr"])
def test_usage_errors_in_the_users_language(case, lang):
    argv, english, turkish = BAD[case]
    report, stdout, stderr = run(*argv, lang=lang)
    assert report["code"] == 2 and stdout == ""
    lines = stderr.splitlines()
    assert "Traceback" not in stderr
    assert lines[0].startswith({"en": "usage: ddp-tutorial", "tr": "kullanım: ddp-tutorial"}[lang])
    assert lines[-1].startswith("ddp-tutorial") and {"en": ": error: ", "tr": ": hata: "}[lang] in lines[-1]
    assert {"en": english, "tr": turkish}[lang] in lines[-1]
    assert report["torch"] == []  # a typo is answered at once too


def test_argparse_is_left_as_it_was(capsys):
    # The translation is installed only while ddp-tutorial parses: other argparse users are untouched.
    with pytest.raises(SystemExit):
        cli.main(["train", "--epochs", "abc"])
    assert argparse._ is gettext.gettext and argparse.ngettext is gettext.ngettext
    assert "is not a whole number" in capsys.readouterr().err  # the package's int options: i18n.whole_number
    plain = argparse.ArgumentParser(prog="other")
    plain.add_argument("--n", type=int)
    with pytest.raises(SystemExit):
        plain.parse_args(["--n", "abc"])
    assert "invalid int value" in capsys.readouterr().err


def test_every_catalogued_argparse_word_is_one_argparse_uses():
    source = Path(argparse.__file__).read_text()
    for word in cli.ARGPARSE_WORDS:
        assert repr(word)[1:-1] in source or word in source, word


def test_full_parser_has_every_subcommand():
    parser = cli.build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert sorted(actions[0].choices) == sorted(cli.COMMANDS)
    for name in cli.COMMANDS:  # each is a full parser, with its own options
        assert actions[0].choices[name]._actions


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_an_unusable_output_path_is_a_message_not_a_traceback(lang, tmp_path):
    # Issue 13's weak case "-o is a directory or under a file": whatever the subcommand, an OSError
    # about a path the user gave ends in one line naming the path, and exit code 2.
    a_file = tmp_path / "a-file"
    a_file.write_text("x\n")
    render = ["slurm", "render", "--nodes", "1", "--gpus-per-node", "0", "--nproc-per-node", "2", "-o"]
    for target, named in ((tmp_path, tmp_path), (a_file / "job.sh", a_file)):
        report, _, stderr = run(*render, str(target), lang=lang)
        assert report["code"] == 2 and "Traceback" not in stderr, stderr
        assert str(named) in stderr and {"en": "Cannot use", "tr": "kullanılamıyor"}[lang] in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # no temporary file left behind


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_a_process_count_this_machine_cannot_hold_is_refused_first(lang, tiny_root):
    # F01 (issue 25): refused before anything starts. The bad --epochs is there so that, without the
    # bound, this test fails on the --epochs message instead of starting 100000 processes.
    report, stdout, stderr = run("train", "--nproc-per-node", "100000", "--root", str(tiny_root), "--epochs", "-1",
                                 lang=lang)
    assert report["code"] == 2 and "Traceback" not in stderr
    assert "--nproc-per-node 100000" in stderr and "--epochs" not in stderr
    assert {"en": "more than this machine can run", "tr": "çalıştırabileceğinden fazla"}[lang] in stderr


def test_choices_and_defaults_come_from_the_option_table():
    # One definition per option (issue 23): --help lists each choice rule's values; a bad value gets
    # the same rule's message as every other option; the command line's defaults are the table's.
    from dataclasses import MISSING, fields

    from ddp_tutorial.config import TRAIN_RULES, TrainConfig, add_train_arguments
    from ddp_tutorial.validate import Choice

    parser = add_train_arguments(argparse.ArgumentParser())
    helps = parser.format_help()
    for name, rule in TRAIN_RULES.items():
        if isinstance(rule, Choice):
            assert "{" + ",".join(rule.choices) + "}" in helps, name
    defaults = vars(parser.parse_args([]))
    for f in fields(TrainConfig):
        assert defaults[f.name] == (None if f.default is MISSING else f.default), f.name
    _, _, stderr = run("train", "--scale-lr", "cubic")
    assert "Invalid --scale-lr='cubic': it must be one of none, linear, sqrt." in stderr
