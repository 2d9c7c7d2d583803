"""The attendee's smaller findings of issue 49 (shared/reviews/attendee-workshop.md §5), each checked against
what is true: 02's success line named Fashion-MNIST while the class ran MNIST; 08 printed 35.55 % (float32)
and then 46.09 % (float64) for "the same" training with no word why; 05 showed the engine job's template,
doubled braces and all, where it meant the script sbatch receives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddp_tutorial import exercises as ex
from ddp_tutorial import slurm
from ddp_tutorial.staging import FULL_COUNTS

REPO = Path(__file__).resolve().parents[1]
SOURCES = REPO / "notebooks" / "src"


@pytest.mark.parametrize("lang, count", [("en", "60,000"), ("tr", "60.000")])
def test_the_steps_success_line_names_no_data_set_the_class_may_not_run(lang, count, monkeypatch):
    """Its 79 steps are those of 60 000 training images: MNIST's and Fashion-MNIST's alike, so it names the
    count, not one of the two."""
    monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)

    def steps_per_epoch(num_samples, world_size, batch_size):
        return -(-(-(-num_samples // world_size)) // batch_size)

    outcome = ex.steps_per_epoch.evaluate(steps_per_epoch)
    assert outcome.status == "correct", outcome.text
    assert FULL_COUNTS["train"] == 60_000 and steps_per_epoch(60_000, 6, 128) == 79
    assert count in outcome.text and " 79 " in outcome.text, outcome.text
    assert "Fashion" not in outcome.text and "MNIST" not in outcome.text, outcome.text


def test_05_shows_the_engine_script_as_sbatch_receives_it():
    """ipyparallel fills the template with str.format (its EvalFormatter): what sbatch receives has single
    braces. 05's no-cluster cell printed the template itself: `${{NCCL_DEBUG:-WARN}}`."""
    from IPython.utils.text import EvalFormatter  # what ipyparallel's SLURM launcher fills the template with

    profile = slurm.PROFILES["akya-cuda"]  # what the attendee saw: a GPU profile, so NCCL's lines are in it
    spec = slurm.JobSpec.from_profile(profile.name, nodes=2, gpus_per_node=min(3, profile.gpus_per_node),
                                      cpus_per_process=profile.cpus_per_gpu, time="00:30:00",
                                      env=(("GREETING", "${HOME}/x"),))
    shown = slurm.engines_script(spec)
    assert "${{" not in shown and "}}" not in shown, shown
    assert '${NCCL_DEBUG:-WARN}' in shown and "{program_and_args}" in shown, shown
    assert "export GREETING='${HOME}/x'" in shown, shown  # a value's own braces reach the script as written
    assert shown == EvalFormatter().format(slurm.render_engines(spec), program_and_args="{program_and_args}")
    source = (SOURCES / "05_cluster_slurm.cells").read_text(encoding="utf-8")
    cell = next(c for c in source.split("=== code") if "No cluster: no engines are started" in c)
    assert "slurm.engines_script(" in cell and "render_engines(" not in cell, cell


def test_08_says_why_its_float64_accuracy_is_not_section_3s():
    """08 §5 explains the two accuracies: the same seed draws other initial weights in float64, and after
    LIMIT / (2 × BATCH) steps the model is near its start. Both claims are checked here against torch and
    08's own settings, in both languages."""
    import torch

    from ddp_tutorial.exercises import capstone
    from ddp_tutorial.exercises.cnn_single import SmallCNN

    source = (SOURCES / "08_own_model.cells").read_text(encoding="utf-8")
    limit, epochs, batch, _ = (float(v) for v in re.search(
        r"^LIMIT, EPOCHS, BATCH, LR = ([\d.]+), ([\d.]+), ([\d.]+), ([\d.]+)", source, re.M).groups())
    steps = int(limit * epochs / (2 * batch))

    def first_weights():
        torch.manual_seed(0)
        return torch.cat([p.detach().flatten().double() for p in SmallCNN().parameters()])

    gap = (first_weights() - capstone.in_float64(first_weights)()).abs().max().item()
    assert gap > 1e-3, f"float64 starts from the same weights (gap {gap}): 08's sentence is no longer true"
    images = int(limit)
    words = {"tr": ("float64'te aynı tohum başka başlangıç ağırlıkları çeker", f"{images} görüntüde {steps} adım"),
             "en": ("in float64 the same seed draws other initial weights", f"after {steps} steps on {images} images")}
    for lang, parts in words.items():
        text = next(block for block in source.split("=== ") if block.startswith(f"md {lang}")
                    and "torchrun" in block and "--float64" in block)
        for part in parts:
            assert part in text, f"08 ({lang}): '{part}' not in the text before its torchrun cell"
