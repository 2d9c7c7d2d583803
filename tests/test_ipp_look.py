"""The notebook runner's look at its ranks (ddp_tutorial/ipp/runner.py ``_look``): which rank is the cause.

An engine killed mid-run can be seen two ways: its pid is gone (the look's first check), or ipyparallel has
already failed its task ("Engine 1 died while running task …") when the look gets there, its pid having been
alive a moment before. Both are the rank's death, with the signal named; the second once read as the rank
having *raised* an EngineError (a loaded clean-clone run, tests/test_ipp.py's SIGKILL test). The full path
with real engines is that test; here the look alone, with the two moments in the order that broke it."""

from __future__ import annotations

import ipyparallel.error
import pytest

from ddp_tutorial.ipp import runner


class TwoEngines:
    """Engines 0 and 1 (pids 100, 101); rank 1 was alive at its first check, dead at any later one."""

    ids, pids = [0, 1], [100, 101]

    def __init__(self):
        self.checks = {0: 0, 1: 0}

    def alive(self, rank: int) -> bool:
        self.checks[rank] += 1
        return rank == 0 or self.checks[rank] == 1

    def describe_loss(self, rank: int) -> str:
        return "killed by signal SIGKILL"

    def is_stopped(self, rank: int) -> bool:
        return False


class Answer:
    """A task ipyparallel has finished: its result, or the error it raised."""

    def __init__(self, value=None, error=None):
        self.value, self.error = value, error

    def ready(self) -> bool:
        return True

    def get(self):
        if self.error is not None:
            raise self.error
        return self.value


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_an_engine_ipyparallel_calls_dead_before_its_pid_is_gone_is_the_cause(lang, monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", lang)
    engines = TwoEngines()
    lost = ipyparallel.error.EngineError("Engine 1 died while running task 'abc'")
    pending = {0: Answer(value=97.5), 1: Answer(error=lost)}
    results, failures = {}, []
    runner._look(engines, pending, results, failures)
    assert results == {0: 97.5} and pending == {}
    ((order, text),) = failures
    assert order == 0, text  # a death, first among causes: not "rank 1 raised EngineError"
    assert "SIGKILL" in text and "101" in text and ("died" if lang == "en" else "öldü") in text, text


def test_an_engine_that_raised_while_alive_is_said_to_have_raised(monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")

    class Alive(TwoEngines):
        def alive(self, rank: int) -> bool:
            return True

    pending = {1: Answer(error=ValueError("a bad batch size"))}
    failures = []
    runner._look(Alive(), pending, {}, failures)
    ((order, text),) = failures
    assert order == 1 and "raised" in text and "a bad batch size" in text, text
