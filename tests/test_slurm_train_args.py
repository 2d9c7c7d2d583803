"""``slurm render`` checks the training options after ``--`` as the training will, before anything is
queued (issue 25, A12): a bad value in the training's own words, an option the job script sets itself
refused with the reason; your own script's options (``--script-args``) are not the package's to check."""

import pytest

from ddp_tutorial.cli import main

CASES = [  # (options after --, English words, Turkish words)
    (["--epochs", "abc"], "argument --epochs: 'abc' is not a whole number",
     "--epochs argümanı: 'abc' bir tam sayı değil"),
    (["--no-such-option"], "unrecognized arguments: --no-such-option", "--no-such-option"),
    (["--epochs", "abc", "--nproc-per-node", "4"], "--nproc-per-node cannot be given after --: the job script "
     "starts the training processes itself", "--nproc-per-node, -- sonrasında verilemez: eğitim süreçlerini"),
    (["--nnodes=2"], "--nnodes cannot be given after --", "--nnodes, -- sonrasında verilemez"),
    (["--json", "x.json"], "--json cannot be given after --: the job script sets --json", "--run-dir klasörüne"),
    (["--resume"], "--resume cannot be given after --", "--resume, -- sonrasında verilemez"),
    (["--device=cpu"], "--device cannot be given after --: the job script sets --device from --gpus-per-node",
     "--gpus-per-node seçeneğinden"),
    (["--threads", "3"], "--threads cannot be given after --", "--threads, -- sonrasında verilemez"),
    (["--batch-size", "0"], "--batch-size", "--batch-size"),  # the training's own rule, as `train` says it
]


@pytest.mark.parametrize("template", ["per-gpu", "torchrun", "seed"])
@pytest.mark.parametrize("lang", ["en", "tr"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_a_bad_training_option_is_refused_at_render_time(template, lang, case, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
    args, english, turkish = CASES[case]
    out = tmp_path / "job.sh"
    code = main(["slurm", "render", "--template", template, "--run-dir", str(tmp_path / "runs"), "-o", str(out),
                 "--", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert (english if lang == "en" else turkish) in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_good_training_options_still_render(tmp_path, capsys):
    out = tmp_path / "job.sh"
    assert main(["slurm", "render", "--template", "per-gpu", "--run-dir", str(tmp_path / "runs"), "-o", str(out),
                 "--", "--scale-lr", "sqrt", "--hidden", "256", "--lr=0.01"]) == 0, capsys.readouterr().err
    assert "--scale-lr sqrt --hidden 256 --lr=0.01" in out.read_text()


def test_a_user_scripts_arguments_are_not_checked(tmp_path, capsys):
    script = tmp_path / "mine.py"
    script.write_text("print('hi')\n")
    out = tmp_path / "job.sh"
    assert main(["slurm", "render", "--template", "per-gpu", "--script", str(script), "-o", str(out),
                 "--run-dir", str(tmp_path / "runs"), "--script-args=--epochs abc --nproc-per-node 4"]) == 0, \
        capsys.readouterr().err
    assert "--epochs abc --nproc-per-node 4" in out.read_text().replace("'", "")


@pytest.mark.parametrize("lang", ["en", "tr"])
@pytest.mark.parametrize("after", [["--epochs", "5"], ["--epochs=5"], ["--epo", "5"]])
def test_an_option_given_to_render_and_again_after_the_dashes_is_refused(lang, after, tmp_path, capsys,
                                                                         monkeypatch):
    """Round 4, S05: `--epochs 3 -- --epochs 5` rendered both and the later won silently (abbreviations too)."""
    monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
    out = tmp_path / "job.sh"
    code = main(["slurm", "render", "--template", "per-gpu", "--epochs", "3", "--run-dir", str(tmp_path / "runs"),
                 "-o", str(out), "--", *after])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists(), err
    assert ("--epochs is given twice" if lang == "en" else "--epochs iki kez verilmiş") in err and "(3)" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("lang", ["en", "tr"])
@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_output_path_is_named_as_such(lang, empty, tmp_path, capsys, monkeypatch):
    """Round 4, S17: `-o ""` said "Cannot use ?: it is a directory"."""
    monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
    monkeypatch.chdir(tmp_path)
    code = main(["slurm", "render", "--template", "per-gpu", "-o", empty])
    err = capsys.readouterr().err
    assert code == 2, err
    assert ("-o was given an empty path" if lang == "en" else "-o seçeneğine boş bir yol verilmiş") in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
