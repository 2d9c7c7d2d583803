"""pytest settings for the notebooks (run by nbval).

    DDP_TUTORIAL_DATASET=mnist DDP_TUTORIAL_ROOT=$PWD/.data \
        .venv/bin/python -m pytest --nbval-lax notebooks/

Every notebook cell is a test item; cells marked ``# NBVAL_CHECK_OUTPUT`` must reproduce their stored
output, the others must only run without error. Each item gets the ``notebooks`` marker, so
``-m "not notebooks"`` leaves them out.
"""

import os
import shutil
import tempfile

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if str(item.fspath).endswith(".ipynb"):
            item.add_marker(pytest.mark.notebooks)
            item.add_marker(pytest.mark.slow)   # the fast tier (-m "not slow") leaves the notebooks out


# ===== The English notebooks run as in a one-GPU session (issue 34 item 4) ============================
# A one-GPU Jupyter session (OnDemand's natural choice for 30 attendees) once broke 00, 03, 04, 08 and 09:
# every `ipp.run(…, n=2)` and every exercise check asked for two GPU engines. The English notebooks' kernels
# here count one GPU (ddp_tutorial.ipp.local.gpu_count, as the review faked it), so every cell that starts
# engines and every check runs the way it runs in such a session (CPU engines, said in one line); the Turkish
# notebooks' kernels see this machine as it is (no GPU). An IPython startup file in a folder of its own
# (IPYTHONDIR) does it, set just before nbval starts the notebook's kernel; the engines see the real count.
ONE_GPU_STARTUP = '''\
import ddp_tutorial.ipp.local as _local
_local.gpu_count = lambda: 1  # notebooks/conftest.py: this kernel plays a one-GPU session
_session_choice = _local.engine_kind
def _one_gpu_session(n, device, gpus):
    n, kind = _session_choice(n, device, 1)  # what a one-GPU session chooses (CPU engines when n > 1)
    return (n, kind) if kind == "cpu" else _session_choice(n, device, 0)  # its one GPU engine: a CPU one here
_local.engine_kind = _one_gpu_session
del _local
'''
_ORIGINAL = {name: os.environ.get(name)
             for name in ("IPYTHONDIR", "DDP_TUTORIAL_KERNEL_GPUS", "DDP_TUTORIAL_UNWATCHED")}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before nbval starts an English notebook's kernel (at its first cell's set-up): the one-GPU startup
    folder; before anything else (a Turkish notebook, a test that starts its own lab or kernel): the
    environment as it was, so the one-GPU kernel stays the English notebooks' own."""
    from pathlib import Path
    path = Path(str(item.fspath))
    restore_kernel_environment(_ORIGINAL)
    if path.suffix == ".ipynb":
        os.environ["DDP_TUTORIAL_UNWATCHED"] = "1"  # no front end: the engine count stays out of checked outputs
    if path.suffix == ".ipynb" and path.parent.name == "en":
        folder = _one_gpu_folder(item.config)
        startup = folder / "profile_default" / "startup"
        startup.mkdir(parents=True, exist_ok=True)
        (startup / "00-one-gpu.py").write_text(ONE_GPU_STARTUP, encoding="utf-8")
        os.environ["IPYTHONDIR"] = str(folder)
        os.environ["DDP_TUTORIAL_KERNEL_GPUS"] = "1"  # said in the kernel's environment, for a reader of its logs


def _one_gpu_folder(config) -> "os.PathLike":
    """The one-GPU kernels' IPYTHONDIR: in pytest's cache, or, where the cache is switched off
    (``-p no:cacheprovider``, a read-only working copy), a temporary folder removed at the end."""
    from pathlib import Path
    cache = getattr(config, "cache", None)
    if cache is not None:
        return Path(cache.mkdir("one-gpu-ipython")).resolve()
    if not hasattr(config, "_ddp_one_gpu_folder"):
        config._ddp_one_gpu_folder = Path(tempfile.mkdtemp(prefix="ddp-tutorial-one-gpu-")).resolve()
    return config._ddp_one_gpu_folder


def pytest_unconfigure(config):
    folder = getattr(config, "_ddp_one_gpu_folder", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def restore_kernel_environment(original: dict) -> None:
    """The variables the English notebooks' kernels were given, as they were (tests/conftest.py does the same
    before every test: a worker that ran an English notebook before a test must not pass them on)."""
    for name, value in original.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
