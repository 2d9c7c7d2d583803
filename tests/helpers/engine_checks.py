"""What the ipyparallel tests share: whether a process is still alive, and the autouse fixture that
ends every test with no cluster kept (import ``no_engines_left`` into a test module to use it)."""

import psutil
import pytest

from ddp_tutorial import ipp


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
