"""scripts/lab.sh refuses what it cannot use at once, in one line, before any setup (issue 25 L02/L03)."""

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def lab(*args, **env):
    environ = dict(os.environ, **env)
    return subprocess.run(["bash", str(REPO / "scripts" / "lab.sh"), *args], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("language", ["de", "xx"])
def test_a_language_other_than_tr_or_en_is_refused(language):
    done = lab(language, "--no-browser")
    assert done.returncode == 2 and "tr or en" in done.stderr and "tr ya da en" in done.stderr, done.stderr
    assert "setup" not in done.stdout  # refused before anything was installed or started


@pytest.mark.parametrize("language, words", [("en", "unknown data set"), ("tr", "bilinmeyen veri kümesi")])
def test_an_unknown_data_set_is_named_in_the_attendees_language(language, words):
    done = lab(language, DDP_TUTORIAL_DATASET="cifar10")
    assert done.returncode == 2 and words in done.stderr and "cifar10" in done.stderr, done.stderr
