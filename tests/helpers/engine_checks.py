"""What the ipyparallel tests share: whether a process is still alive, the autouse fixture that
ends every test with no cluster kept (import ``no_engines_left`` into a test module to use it), and
one engine set that the tests of a module may share (``shared_engines``).

Starting two engines costs a few CPU-seconds (each imports torch and ``torch._dynamo`` while it warms
up); tests that only use engines — a run, a training, a look at their command line — share one set.
A test that kills, freezes or breaks engines starts its own and never asks for the shared set."""

import psutil
import pytest

from ddp_tutorial import ipp
from ddp_tutorial.ipp import engines as es


def alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(autouse=True)
def no_engines_left():
    """Every test ends with no cluster kept and none of its processes alive."""
    ipp.stop(force=True)
    yield
    engines = ipp.current()
    ipp.stop(force=True)
    assert engines is None, "a test left a cluster running"


def set_pids(engines) -> list:
    """Every process of a local engine set: the engines, their nannies, the controller and its schedulers."""
    return [p.pid for p in engines.processes + engines.controller_processes]


def healthy(engines) -> bool:
    """Every process of ``engines`` is running, and no engine is stopped (a stopped set has none left)."""
    return all(alive(pid) for pid in set_pids(engines)) and not any(engines.is_stopped(r) for r in range(engines.size))


@pytest.fixture(scope="module")
def module_engines():
    """The engine set the module's tests share (started by the first test that asks), stopped at the
    module's end with every one of its processes."""
    held = {}
    yield held
    engines = held.pop("engines", None)
    if engines is not None:
        pids = set_pids(engines)
        es.keep(engines)
        ipp.stop()
        assert ipp.current() is None and not [pid for pid in pids if alive(pid)], "shared engines left behind"


@pytest.fixture
def shared_engines(module_engines):
    """Two engines kept for this test (``ipp.start(2)``: as the test's own calls would start them) and
    shared with the module's other tests. A call with ``keep=True`` uses them; one without it stops them,
    as always, and the next test that asks starts a new set. Between tests the set is put aside, so a
    test that does not ask starts engines of its own, as it would alone."""
    ipp.stop(force=True)  # nothing else is kept (as no_engines_left begins)
    engines = module_engines.get("engines")
    if engines is not None and healthy(engines):
        es.keep(engines)
    else:
        engines = module_engines["engines"] = ipp.start(2)
    yield engines
    if ipp.current() is engines:
        es.keep(None)  # put aside for the next test; no_engines_left finds nothing kept
    elif ipp.current() is None and not healthy(engines):
        module_engines.pop("engines", None)  # stopped by the test (a call without keep=True)
