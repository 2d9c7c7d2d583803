import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "helpers"))  # the tests' helper modules, in one folder

from data_fixtures import fashion_root, mnist_root  # noqa: E402,F401  (shared data fixtures)
from engine_checks import module_engines, shared_engines  # noqa: E402,F401  (the ipyparallel tests' shared engines)


# ===== SLURM test cluster — begin (tests/helpers/slurmlab.py; owner: the SLURM part) ================
# The session fixture `slurm_cluster`: a real two-node SLURM cluster in network namespaces,
# started once per test session and torn down by PID at its end (marker `slurm`: pyproject.toml).
# Elsewhere the SLURM tests skip with a message saying what is missing; with CI=true they fail.
import os  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="module")
def two_engines():
    """Two local ipyparallel engines kept for one test module (the exercise checks reuse them)."""
    from ddp_tutorial import ipp
    ipp.stop(force=True)
    ipp.start(2)
    yield
    ipp.stop(force=True)


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _slurm_cannot_run(why: str):
    message = f"SLURM test cluster unavailable: {why}"
    if _in_ci():
        pytest.fail(message + " (CI=true: the SLURM tests must run here, not skip)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def slurm_cluster():
    """A started :class:`slurmlab.SlurmLab`; use ``slurm_cluster.env`` for client commands."""
    yield from _started_lab()


@pytest.fixture(scope="session")
def truba_lab():
    """A started :class:`slurmlab.SlurmLab` in TRUBA's shape (``SlurmLab(site="truba")``): nodes akya1–akya4
    (akya-cuda: 40 cores, 4 GPUs) and barbun1 (barbun: 40 cores); partitions ``debug`` (default, all nodes,
    4 h), ``akya-cuda`` and ``barbun`` (3 days); a job_submit.lua refusing what TRUBA's guide forbids, in its
    words; ``truba_lab.login_command(cmd)`` runs ``cmd`` on the login node ``arf-ui1``. Client commands:
    ``truba_lab.run([...])`` or ``env=truba_lab.env``. Runs beside ``slurm_cluster`` (its own namespaces)."""
    yield from _started_lab(site="truba")


#: The second site shape (issue 46 item 3): a made-up university cluster's table, unlike TRUBA on purpose.
OTHER_SITE = Path(__file__).resolve().parent / "data" / "sites" / "other.toml"
OTHER_SHAPE = {"cpu": 1, "gpu-l40": 2, "gpu-a100": 1}


@pytest.fixture(scope="session")
def other_lab():
    """A started :class:`slurmlab.SlurmLab` in the shape of tests/data/sites/other.toml (``ANKARA-HPC``): cpu1
    (cpu: 48 cores, the default partition, at least 8 cores per job, 7 days), gpu1–gpu2 (gpu-l40: 32 cores,
    2 L40S typed ``l40s``, 16 cores per GPU, 1 day), gpua1001 (gpu-a100: 64 cores, 8 A100, 2 days); no debug
    partition; its job_submit.lua; the login node ``hpc-login1``."""
    yield from _started_lab(site=str(OTHER_SITE), shape=OTHER_SHAPE)


def _started_lab(**shape):
    """A :class:`slurmlab.SlurmLab` of that shape, started for the fixture and stopped after it (skipped, or
    failed under CI, where SLURM is missing or the lab cannot start)."""
    from slurmlab import LabError, SlurmLab

    missing = SlurmLab.missing()
    if missing:
        _slurm_cannot_run("needs " + "; ".join(missing))
    lab = SlurmLab(**shape)
    try:
        lab.start()
    except (LabError, OSError) as error:
        _slurm_cannot_run(f"could not start it ({str(error).strip()[:2000]})")
    try:
        yield lab
    finally:
        lab.stop()
# ===== SLURM test cluster — end ==============================================================


# ===== The fast tier =========================================================================
# `bash scripts/test.sh -m "not slow"` is what a developer runs before a change. Slow: the SLURM lab, the browser,
# the exercise modules (they start engines) — by marker — and every test that took 5 s or more in a full run
# on the 2-core CI machine (`--durations`, printed by scripts/test.sh): SLOW_TESTS, file::name without
# parameters. The notebooks are slow too (notebooks/conftest.py).
SLOW_MARKERS = ("slurm", "browser", "exercises")
SLOW_TESTS_FILE = Path(__file__).resolve().parent / "slow_tests.txt"


def _slow_tests() -> set:
    if not SLOW_TESTS_FILE.exists():
        return set()
    lines = SLOW_TESTS_FILE.read_text(encoding="utf-8").splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


# The longest modules first: scripts/test.sh's workers take whole modules (--dist loadscope), in the order of the
# collection (--no-loadscope-reorder; pytest-xdist's own order, most tests first, left the long modules of one or
# two tests, the browser's, the benchmarks', to the end, each on a worker of its own while the others sat idle).
MODULE_SECONDS_FILE = Path(__file__).resolve().parent / "module_seconds.txt"
UNMEASURED_SECONDS = 30.0


def _module_seconds() -> dict:
    if not MODULE_SECONDS_FILE.exists():
        return {}
    rows = (line.split() for line in MODULE_SECONDS_FILE.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#"))
    return {module: float(seconds) for seconds, module in rows}


def pytest_collection_modifyitems(items):
    slow = _slow_tests()
    for item in items:
        if str(item.fspath).endswith(".ipynb"):
            continue
        base = item.nodeid.split("[")[0].removeprefix("tests/")
        if base in slow or any(item.get_closest_marker(name) for name in SLOW_MARKERS):
            item.add_marker(pytest.mark.slow)
    seconds = _module_seconds()
    # a stable sort: the tests of a module, the cells of a notebook keep their order
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], UNMEASURED_SECONDS))


# ===== The English notebooks' one-GPU kernels stay theirs (notebooks/conftest.py) ===========================
# On a pytest-xdist worker an English notebook may run before a test here: the variables that made its kernel
# count one GPU (IPYTHONDIR, DDP_TUTORIAL_KERNEL_GPUS), and the one that says nobody watches its cells, are put
# back before every test, so a lab or kernel a
# test starts sees this machine as it is.
_KERNEL_ENVIRONMENT = {name: os.environ.get(name)
                       for name in ("IPYTHONDIR", "DDP_TUTORIAL_KERNEL_GPUS", "DDP_TUTORIAL_UNWATCHED")}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    for name, value in _KERNEL_ENVIRONMENT.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


# ===== lab.sh's login-node guard (issue 45, T5-1; tests/test_login_guard.py) ===============================
# This machine has the SLURM lab's sbatch on PATH and the tests run in no job: lab.sh would take it for a
# cluster's login node and refuse. The tests that start lab.sh as on a laptop say so as a laptop's user does
# (DDP_TUTORIAL_LOGIN_OK=1); tests/test_login_guard.py takes it away to see the refusal.
os.environ.setdefault("DDP_TUTORIAL_LOGIN_OK", "1")


# ===== Collection without the cyclic garbage collector ========================================================
# A worker imports torch and every test module: hundreds of thousands of objects (326 000 for torch and pytest
# alone) that live as long as the worker. Each full collection of Python's cyclic garbage collector walks all of
# them again, and collecting the suite made many: 38 % of a collection's CPU time (perf, 2026-12-07). The
# collector is off while the suite is collected, then one collection, and what lives on is set aside (gc.freeze:
# never walked again, never freed; it is the session's anyway). Tests then collect their garbage as usual,
# walking only what they made. Collecting the suite took 13.3 CPU-s, now 7.1, in each of scripts/test.sh's four
# workers.
import gc  # noqa: E402


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    gc.disable()
    try:
        return (yield)
    finally:
        gc.collect()
        gc.freeze()
        gc.enable()
