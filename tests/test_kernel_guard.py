"""The guard around an exercise check in the kernel puts back what an attempt changed besides functions,
and its time bound holds when the attempt cancels the timer (issue 36: X20, X21, X22)."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from ddp_tutorial import exercises as ex
from notebook_cells import cell


@pytest.fixture(autouse=True)
def english(monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")


def test_x20_the_working_directory_is_put_back(tmp_path, monkeypatch):
    """X20: `os.chdir("/")` in a graded function left the kernel in `/` (the notebook's relative paths
    then pointed there)."""
    monkeypatch.chdir(tmp_path)
    answer = cell('''
        def steps_per_epoch(num_samples, world_size, batch_size):
            import math, os
            os.chdir("/")
            return math.ceil(math.ceil(num_samples / world_size) / batch_size)
    ''', "steps_per_epoch")
    ex.steps_per_epoch.evaluate(answer)
    assert os.getcwd() == str(tmp_path)


def test_x21_stdout_and_stderr_are_put_back_and_the_sentence_is_seen(capsys):
    """X21: `sys.stdout = io.StringIO()` in a graded function swallowed every later print, the check's
    own sentence included."""
    before = sys.stdout, sys.stderr
    answer = cell('''
        def steps_per_epoch(num_samples, world_size, batch_size):
            import io, math, sys
            sys.stdout = io.StringIO()
            sys.stderr = io.StringIO()
            return math.ceil(math.ceil(num_samples / world_size) / batch_size)
    ''', "steps_per_epoch")
    ex.steps_per_epoch.check(answer)
    assert (sys.stdout, sys.stderr) == before
    assert "steps_per_epoch" in capsys.readouterr().out


@pytest.mark.timeout(60)
def test_x22_an_attempt_that_cancels_the_timer_is_stopped_all_the_same(monkeypatch):
    """X22: the bound was one interval timer; `signal.setitimer(ITIMER_REAL, 0)` in the attempt let it run
    unbounded (19.8 s for a 2 s bound)."""
    from ddp_tutorial.exercises import core
    monkeypatch.setattr(core, "GRADING_BOUND", 1)
    answer = cell('''
        def steps_per_epoch(num_samples, world_size, batch_size):
            import signal, time
            signal.setitimer(signal.ITIMER_REAL, 0)
            end = time.monotonic() + 12
            while time.monotonic() < end:
                pass
            return 1
    ''', "steps_per_epoch")
    handler, started = signal.getsignal(signal.SIGALRM), time.monotonic()
    outcome = ex.steps_per_epoch.evaluate(answer)
    assert time.monotonic() - started < 8, "the attempt ran past its bound"
    assert "still running after 1 s" in outcome.text, outcome.text
    assert signal.getsignal(signal.SIGALRM) == handler
    time.sleep(1.5)  # the second alarm, cancelled, never rings after the check
