"""pytest settings for the notebooks (run by nbval).

    DDP_TUTORIAL_DATASET=mnist DDP_TUTORIAL_ROOT=$PWD/.data \
        .venv/bin/python -m pytest --nbval-lax notebooks/

Every notebook cell is a test item; cells marked ``# NBVAL_CHECK_OUTPUT`` must reproduce their stored
output, the others must only run without error. Each item gets the ``notebooks`` marker, so
``-m "not notebooks"`` leaves them out.
"""

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
del _local
'''


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    import os
    from pathlib import Path
    path = Path(str(item.fspath))
    if path.suffix != ".ipynb":
        return
    if path.parent.name == "en":
        folder = Path(item.config.cache.mkdir("one-gpu-ipython"))
        startup = folder / "profile_default" / "startup"
        startup.mkdir(parents=True, exist_ok=True)
        (startup / "00-one-gpu.py").write_text(ONE_GPU_STARTUP, encoding="utf-8")
        os.environ["IPYTHONDIR"] = str(folder)
        os.environ["DDP_TUTORIAL_KERNEL_GPUS"] = "1"  # said in the kernel's environment, for a reader of its logs
    else:
        os.environ.pop("IPYTHONDIR", None)
        os.environ.pop("DDP_TUTORIAL_KERNEL_GPUS", None)
