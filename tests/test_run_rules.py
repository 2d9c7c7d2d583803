"""What a run refuses or reports instead of silently changing: resume settings, the --json target,
a stop request with nowhere to checkpoint, the learning-rate rules (scaling, warm-up), and the options
the hostile sweep got through (empty paths, ``~``, --json on the checkpoint, a model or a process count
too large)."""

import argparse
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from ddp_tutorial import checkpoint, preemption, result
from ddp_tutorial.config import (CHECKPOINT_NAME, TrainConfig, add_launch_arguments, add_train_arguments,
                                 config_from_args)
from ddp_tutorial.i18n import TutorialError
from ddp_tutorial.preemption import Preempted
from ddp_tutorial.optim import scaled_lr
from ddp_tutorial.train import train
from ddp_tutorial.validate import local_process_limit, mlp_parameters, option_name


def config(root, **kw):
    return TrainConfig(**{"dataset": "mnist", "root": str(root), "epochs": 1, "quiet": True, "threads": 1,
                          "evaluate": False, **kw})


@pytest.fixture
def one_epoch(mnist_root, tmp_path):
    """A checkpoint after one epoch of seed 0, lr 1e-3, the whole (small) set."""
    ckpt = tmp_path / "ckpt"
    train(config(mnist_root, checkpoint_dir=str(ckpt)))
    return ckpt


@pytest.mark.parametrize("change, field", [({"seed": 7}, "seed"), ({"train_subset": 1024}, "train_subset")])
def test_resume_refuses_a_setting_that_changes_the_data_order(mnist_root, one_epoch, change, field, monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    with pytest.raises(TutorialError) as caught:
        train(config(mnist_root, epochs=2, checkpoint_dir=str(one_epoch), resume=True, **change))
    assert caught.value.key == "ckpt.changed" and caught.value.fields["field"] == field
    assert "silently change the run" in str(caught.value)


def test_resume_with_a_new_lr_applies_it_says_so_and_records_it(mnist_root, one_epoch, capsys):
    done = train(config(mnist_root, epochs=2, lr=5e-4, checkpoint_dir=str(one_epoch), resume=True, quiet=False))
    out = capsys.readouterr().out
    assert "0.001 → 0.0005" in out
    assert done.lr == 5e-4 and done.resumed_from["lr_before"] == 1e-3
    state = torch.load(one_epoch / "checkpoint.pt", weights_only=True)
    assert state["lr"] == 5e-4
    assert all(group["lr"] == 5e-4 for group in state["optimizer"]["param_groups"])


def test_json_target_is_checked_before_training(mnist_root, tmp_path, capsys):
    (tmp_path / "adir").mkdir()
    for bad, key in ((tmp_path / "adir", "result.is_dir"), ("/proc/ddp-tutorial/x.json", "result.unwritable")):
        with pytest.raises(TutorialError) as caught:
            train(config(mnist_root, json=str(bad), quiet=False))
        assert caught.value.key == key
        assert "epoch 0" not in capsys.readouterr().out  # refused before any training


def test_a_result_that_cannot_be_written_at_the_end_is_kept_elsewhere(mnist_root, tmp_path):
    done = train(config(mnist_root, train_subset=256))
    gone = tmp_path / "vanished" / "result.json"  # its folder disappeared during training
    with pytest.raises(TutorialError) as caught:
        result.write(str(gone), done)
    assert caught.value.key == "result.kept_elsewhere"
    kept = json.loads(open(caught.value.fields["fallback"]).read())
    assert kept["weights_sha256"] == done.weights_sha256
    os.unlink(caught.value.fields["fallback"])


def test_stop_request_without_checkpoint_dir_says_nothing_was_saved(mnist_root, capsys, monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    monkeypatch.setitem(preemption._early, "requested", True)  # SIGUSR1 arrived while starting
    with pytest.raises(Preempted):
        train(config(mnist_root, quiet=False))
    out = capsys.readouterr().out
    assert "nothing was saved" in out and "checkpoint written" not in out


def test_scale_lr_rules_and_warmup(mnist_root):
    base = TrainConfig(lr=1e-3)
    assert scaled_lr(1e-3, "linear", 6) == pytest.approx(6e-3)
    assert scaled_lr(1e-3, "sqrt", 6) == pytest.approx(1e-3 * math.sqrt(6))
    with pytest.raises(TutorialError):  # the old bool form is gone: a rule's name or nothing
        TrainConfig(scale_lr=True).validated()
    assert scaled_lr(base.lr, base.validated().scale_lr, 6) == 1e-3
    with pytest.raises(TutorialError):
        TrainConfig(scale_lr="cubic").validated()
    # A warm-up changes the first steps only: not the same weights as without, and it still learns.
    plain = train(config(mnist_root, train_subset=1024))
    warm = train(config(mnist_root, train_subset=1024, warmup_steps=5))
    assert plain.weights_sha256 != warm.weights_sha256 and warm.warmup_steps == 5
    assert warm.epochs[0] < 2.3


@pytest.mark.parametrize("option, value", [("--seed", str(2**64)), ("--hidden", str(10**9)),
                                           ("--timeout", "1e15"), ("--num-layers", "1")])
def test_out_of_range_values_get_a_message_not_a_traceback(mnist_root, option, value):
    done = subprocess.run([sys.executable, "-m", "ddp_tutorial.train", "--root", str(mnist_root), option, value],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, DDP_TUTORIAL_LANG="tr"))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and option in done.stderr and "olmalı" in done.stderr


# ------------------------------------------------------------------------------------------
# Option bugs of the hostile sweep, round 3 (issue 25): each refused before any work is done.


@pytest.mark.parametrize("field", ["json", "checkpoint_dir", "root"])
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_path_is_refused_not_a_feature_silently_turned_off(field, value, monkeypatch):
    # B07: `--json "$OUT" --checkpoint-dir "$CKPT"` with unset variables ran to rc 0 and wrote nothing.
    for lang, words in (("en", "not empty"), ("tr", "boş olmayan")):
        monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
        with pytest.raises(TutorialError) as caught:
            TrainConfig(**{field: value}).validated()
        assert caught.value.key == "config.bad_value" and caught.value.fields["option"] == option_name(field)
        assert words in str(caught.value)


def test_tilde_is_expanded_in_checkpoint_dir_as_in_json(mnist_root, tmp_path, monkeypatch):
    # H01: --checkpoint-dir=~/ck made a directory literally named "~" in the working directory.
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    checked = TrainConfig(checkpoint_dir="~/ck", json="~/r.json").validated()
    assert (checked.checkpoint_dir, checked.json) == (str(home / "ck"), str(home / "r.json"))
    train(config(mnist_root, train_subset=256, checkpoint_dir="~/ck"))
    assert (home / "ck" / "checkpoint.pt").is_file() and list(work.iterdir()) == []


def test_json_on_the_checkpoint_file_is_refused(tmp_path, monkeypatch):
    # C03: --json ck/checkpoint.pt replaced the final checkpoint; the next --resume could not read it.
    monkeypatch.chdir(tmp_path)
    ck = tmp_path / "ck"
    ck.mkdir()
    (tmp_path / "link").symlink_to(ck)
    assert CHECKPOINT_NAME == checkpoint.CHECKPOINT_NAME
    for checkpoint_dir, json_path in ((str(ck), str(ck / "checkpoint.pt")), ("ck", "ck/checkpoint.pt"),
                                      ("ck", "./ck/../ck/checkpoint.pt"), ("link", str(ck / "checkpoint.pt"))):
        with pytest.raises(TutorialError) as caught:
            TrainConfig(checkpoint_dir=checkpoint_dir, json=json_path).validated()
        assert caught.value.key == "config.json_is_checkpoint"
        assert json_path in caught.value.text("en") and json_path in caught.value.text("tr")
    TrainConfig(checkpoint_dir=str(ck), json=str(ck / "result.json")).validated()  # beside it is fine


def test_a_model_too_large_is_refused_before_anything_is_allocated():
    # B10: --hidden 65536 --num-layers 64 passed each rule, then asked torch for 16 GiB per layer.
    with pytest.raises(TutorialError) as caught:
        TrainConfig(hidden=65536, num_layers=64).validated()
    assert caught.value.key == "config.model_too_large"
    for lang in ("en", "tr"):
        assert "--hidden 65536" in caught.value.text(lang) and "GiB" in caught.value.text(lang)
    TrainConfig(hidden=65536, num_layers=2).validated()   # each bound alone is still allowed
    TrainConfig(hidden=128, num_layers=64).validated()
    # the count is the model's own
    from ddp_tutorial.model import DeepNeuralNetwork, count_parameters
    for layers, hidden in ((4, 128), (2, 7), (5, 33)):
        assert mlp_parameters(layers, hidden) == count_parameters(DeepNeuralNetwork(layers, 784, hidden, 10))


def test_more_processes_than_this_machine_can_hold_are_refused_before_any_starts():
    # F01: --nproc-per-node 100000 went straight to run_processes (each child imports torch).
    parser = argparse.ArgumentParser()
    add_launch_arguments(parser, nodes=False)
    add_train_arguments(parser)
    limit = local_process_limit()
    with pytest.raises(TutorialError) as caught:
        config_from_args(parser.parse_args(["--nproc-per-node", "100000"]))
    assert caught.value.key == "config.too_many_processes" and caught.value.fields["limit"] == limit
    assert 8 <= limit <= 1024
    config_from_args(parser.parse_args(["--nproc-per-node", str(limit)]))
