"""Issue 28 §3: on the Turkish path the package's own output is Turkish, numbers included."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_tutorial import i18n

REPO = Path(__file__).resolve().parents[1]


def tr_env(**extra):
    return dict(os.environ, DDP_TUTORIAL_LANG="tr", **extra)


def test_figure_ticks_use_turkish_numbers():
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.subplots()
    ax.plot([0, 0.5, 1], [0, 30000, 60000])
    i18n.localise_axes(fig, "tr")
    fig.canvas.draw()
    xs = [label.get_text() for label in ax.get_xticklabels()]
    ys = [label.get_text() for label in ax.get_yticklabels()]
    assert "0,4" in xs and "60.000" in ys
    english = Figure()
    english.subplots().plot([0, 0.5], [0, 1])
    i18n.localise_axes(english, "en")  # English keeps matplotlib's own formatter
    assert type(english.get_axes()[0].xaxis.get_major_formatter()).__name__ == "ScalarFormatter"


def test_package_figures_are_localised():
    from ddp_tutorial import figures

    fig = figures.contention_figure({"busy": 2, "rows": {"package": {"idle": {"samples_per_second": 12000.0},
                                                                     "loaded": {"samples_per_second": 6000.0}}}},
                                    lang="tr")
    fig.canvas.draw()
    ys = [label.get_text() for label in fig.get_axes()[0].get_yticklabels()]
    assert any("." in y for y in ys if len(y) > 4) and not any("," in y and len(y) > 4 for y in ys)


def test_decimal_comma_option_gets_turkish_advice():
    done = subprocess.run([sys.executable, "-m", "ddp_tutorial.cli", "train", "--lr", "0,001"],
                          capture_output=True, text=True, timeout=120, cwd=REPO, env=tr_env())
    assert done.returncode == 2
    assert "nokta yazın (0.001)" in done.stderr and "Traceback" not in done.stderr


def test_a_word_for_a_number_is_named_not_a_python_type():
    done = subprocess.run([sys.executable, "-m", "ddp_tutorial.cli", "train", "--lr", "abc"],
                          capture_output=True, text=True, timeout=120, cwd=REPO, env=tr_env())
    assert done.returncode == 2 and "'abc' bir sayı değil" in done.stderr, done.stderr
    assert "decimal_number" not in done.stderr and "float" not in done.stderr


def test_a_check_answers_in_words_not_python_booleans(monkeypatch):
    """The notebooks' check lines print yes_no(…): evet/hayır on the Turkish path, never True/False."""
    import numpy
    import torch

    assert (i18n.yes_no(True, "tr"), i18n.yes_no(False, "tr")) == ("evet", "hayır")
    assert (i18n.yes_no(True, "en"), i18n.yes_no(False, "en")) == ("yes", "no")
    assert i18n.yes_no(numpy.bool_(True), "tr") == "evet"
    assert i18n.yes_no(torch.tensor([1.0]).eq(2).all(), "tr") == "hayır"
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr")  # the notebook's language, as number() and percent() read it
    assert i18n.yes_no(set([1]).isdisjoint([2])) == "evet"
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    assert i18n.yes_no(0) == "no"


@pytest.mark.parametrize("payload", [b"not a checkpoint at all", b"PK\x03\x04 truncated"])
def test_corrupt_checkpoint_reason_is_turkish(tmp_path, payload):
    (tmp_path / "ckpt").mkdir()
    from ddp_tutorial import checkpoint

    checkpoint.checkpoint_path(tmp_path / "ckpt").write_bytes(payload)
    code = ("import sys; from ddp_tutorial import checkpoint\n"
            "from ddp_tutorial.i18n import TutorialError\n"
            "try:\n    checkpoint.load_checkpoint(sys.argv[1], {})\n"
            "except TutorialError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ckpt")], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=tr_env())
    assert "torch.load dosyayı okuyamadı" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("environ", [
    {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"},   # I01: an ASCII terminal
    {"PYTHONIOENCODING": "latin-1"},                                  # I02: a Latin-1 terminal (no ı, ğ, ş)
], ids=["ascii", "latin-1"])
def test_turkish_on_a_terminal_that_cannot_write_it_falls_back_to_english(environ):
    """I01/I02 (round 4): Turkish messages on such terminals came out as `Ge\\xe7ersiz … say\\u0131` escapes."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LC_")}, **environ, "DDP_TUTORIAL_LANG": "tr"}
    done = subprocess.run([sys.executable, "-m", "ddp_tutorial", "train", "--epochs", "-1"], env=env,
                          capture_output=True, timeout=120, cwd=REPO)
    assert done.returncode == 2 and b"Invalid --epochs=-1" in done.stderr, done.stderr
    assert b"\\u0131" not in done.stderr and b"Ge\\xe7ersiz" not in done.stderr
