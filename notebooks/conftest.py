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
