"""CK02: a checkpoint whose weights are not numbers (NaN, ±infinity) is refused with one clear line, and a
result file never holds the bare NaN/Infinity tokens that strict JSON readers refuse (null instead).
Real files, a real training process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ddp_tutorial import checkpoint as ckpt
from ddp_tutorial import result
from ddp_tutorial.i18n import TutorialError

REPO = Path(__file__).resolve().parents[1]


def _strict(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity, as JSON itself (RFC 8259) does."""
    def refuse(token):
        raise ValueError(f"not JSON: {token}")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_weights_that_are_not_numbers_are_refused_by_name(tmp_path, monkeypatch, bad):
    weights = {"hidden_layers.0.weight": torch.ones(3, 2), "hidden_layers.0.bias": torch.ones(3),
               "output.weight": torch.ones(1, 3)}
    weights["hidden_layers.0.bias"][1] = bad
    state = dict(format_version=ckpt.FORMAT_VERSION, model=weights, optimizer={}, epoch=1, step=0, shape=[1, 2, 3, 1],
                 world_size=1, batch_size=32, rng=torch.get_rng_state())
    torch.save(state, tmp_path / ckpt.CHECKPOINT_NAME)
    expect = dict(shape=[1, 2, 3, 1], world_size=1, batch_size=32)
    for lang, words in (("en", "not numbers (NaN or infinity)"), ("tr", "sayı olmayan (NaN ya da sonsuz)")):
        monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
        with pytest.raises(TutorialError) as caught:
            ckpt.load_checkpoint(tmp_path, expect)
        text = str(caught.value)
        assert caught.value.key == "ckpt.not_finite" and words in text and "hidden_layers.0.bias" in text, text
        assert "output.weight" not in text and caught.value.exit_code == 2
    weights["hidden_layers.0.bias"][1] = 0.5  # the same checkpoint with finite weights loads
    torch.save(state, tmp_path / ckpt.CHECKPOINT_NAME)
    assert ckpt.load_checkpoint(tmp_path, expect)["epoch"] == 1


def test_a_result_with_a_loss_of_nan_is_written_as_strict_json(tmp_path):
    record = result.TrainResult(rank=0, world_size=1, dataset="mnist", backend="gloo", device="cpu", seed=0,
                                lr=1e-3, batch_size=32, epochs=[float("nan"), float("inf")],
                                rank_losses=[[float("-inf")]], step_losses=[1.5, float("nan")], test_accuracy=10.0)
    path = result.write(str(tmp_path / "r.json"), record)
    payload = _strict(path.read_text())
    assert payload["epochs"] == [None, None] and payload["rank_losses"] == [[None]]
    assert payload["step_losses"] == [1.5, None] and payload["test_accuracy"] == 10.0


def test_resuming_from_a_checkpoint_of_nan_weights_is_one_clear_line(mnist_root, tmp_path):
    """The review's case: a real run's checkpoint, its weights set to NaN, resumed with --epochs 2 --json:
    exit 2, one line naming the problem, no traceback, no result file (was: trained on, loss nan, rc 0)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "DDP_TUTORIAL_")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(DDP_TUTORIAL_LANG="en", OMP_NUM_THREADS="1")
    args = [sys.executable, "-m", "ddp_tutorial.train", "--dataset", "mnist", "--root", str(mnist_root),
            "--train-subset", "256", "--batch-size", "32", "--threads", "1", "--no-eval", "--no-progress",
            "--checkpoint-dir", str(tmp_path / "ck")]
    first = subprocess.run(args + ["--epochs", "1"], env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    state = torch.load(ckpt.checkpoint_path(tmp_path / "ck"), map_location="cpu", weights_only=True)
    for tensor in state["model"].values():
        tensor.fill_(float("nan"))
    ckpt.save_checkpoint(tmp_path / "ck", state)

    resumed = subprocess.run(args + ["--epochs", "2", "--resume", "--json", str(tmp_path / "nan.json")], env=env,
                             capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert resumed.returncode == 2, resumed.stdout + resumed.stderr
    lines = resumed.stderr.strip().splitlines()
    assert len(lines) == 1 and "not numbers (NaN or infinity)" in lines[0], resumed.stderr
    assert "Traceback" not in resumed.stderr and "mean loss" not in resumed.stdout
    assert not (tmp_path / "nan.json").exists()
