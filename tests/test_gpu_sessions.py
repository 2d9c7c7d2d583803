"""Issue 34 item 4 (review N4): every notebook runs in the session an attendee really has — 0, 1 or N GPUs.

``ipp.start`` / ``ipp.run`` / ``ipp.train`` and every exercise check take ``device="auto"``: one engine per
GPU when there are enough GPUs, else CPU engines, said in one line in the user's language; an explicit
``device="cuda"`` with too few GPUs is refused with a call that works. The GPU count is faked in this
process (the kernel) only, as the review did (``ddp_tutorial.ipp.local.gpu_count``); the engines are real
processes, and CPU engines must see no GPU at all (``CUDA_VISIBLE_DEVICES`` empty for them).

Every notebook cell that starts engines and every check in a notebook: the English notebooks' kernels in the
suite count one GPU (notebooks/conftest.py, an IPython startup file), so nbval runs each of those cells as
in a one-GPU session; the Turkish ones run as this machine is (no GPU)."""

import pytest
import torch

from ddp_tutorial import exercises as ex
from ddp_tutorial import ipp
from ddp_tutorial.i18n import TutorialError
from ddp_tutorial.ipp import local
from engine_checks import no_engines_left  # noqa: F401 - the autouse fixture


@pytest.mark.parametrize("n, device, gpus, expected", [
    (None, "auto", 0, (2, "cpu")),      # a CPU session: two CPU engines
    (None, "auto", 1, (1, "cuda")),     # one engine per GPU
    (2, "auto", 1, (2, "cpu")),         # a 1-GPU session asked for 2: CPU engines (N4)
    (2, "auto", 2, (2, "cuda")),
    (3, "auto", 4, (3, "cuda")),
    (2, "cpu", 4, (2, "cpu")),
    (1, "cuda", 1, (1, "cuda")),
])
def test_the_engines_for_a_session(n, device, gpus, expected):
    assert local.engine_kind(n, device, gpus) == expected


@pytest.mark.parametrize("n, gpus, key", [(2, 1, "ipp.too_many_gpu_engines"), (2, 0, "ipp.no_gpu_engines"),
                                          (None, 0, "ipp.no_gpu_engines")])
def test_cuda_with_too_few_gpus_names_a_call_that_works(n, gpus, key, monkeypatch):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    with pytest.raises(TutorialError) as caught:
        local.engine_kind(n, "cuda", gpus)
    assert caught.value.key == key
    assert 'ipp.run(f, n=2, device="cpu")' in str(caught.value), str(caught.value)


def test_an_unknown_device_is_refused():
    with pytest.raises(TutorialError) as caught:
        local.engine_kind(2, "gpu", 1)
    assert caught.value.key == "device.unknown"


def _facts(env):
    """What an engine sees: its rank, the GPUs it is shown, and a gloo all-reduce across the engines."""
    import os

    import torch
    import torch.distributed as dist
    total = torch.tensor([float(env.rank + 1)])
    dist.all_reduce(total)
    return env.rank, os.environ.get("CUDA_VISIBLE_DEVICES"), torch.cuda.device_count(), total.item()


@pytest.fixture
def one_gpu_kernel(monkeypatch):
    """This process plays a kernel of a 1-GPU session (the engines are real, on this machine's CPUs)."""
    monkeypatch.setattr(local, "gpu_count", lambda: 1)
    yield
    assert not torch.cuda.is_initialized()   # the kernel never touched CUDA


@pytest.mark.slow  # two real engines: ≈ 15 s on the 2-core CI machine
def test_ipp_run_on_a_one_gpu_kernel_runs_on_cpu_engines(one_gpu_kernel, monkeypatch, capsys):
    """A Turkish session here; the exercise check below is an English one."""
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "tr")
    words = "onun yerine 2 CPU motoru başlatılıyor"
    with pytest.raises(TutorialError) as caught:            # explicit cuda: refused before anything starts
        ipp.run(_facts, n=2, device="cuda")
    assert caught.value.key == "ipp.too_many_gpu_engines" and ipp.current() is None
    capsys.readouterr()

    results = ipp.run(_facts, n=2, keep=True)                  # auto (the default): CPU engines
    assert results == [(0, "", 0, 3.0), (1, "", 0, 3.0)]
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if words in line] != [], out
    assert ipp.current().device == "cpu"
    # The call the message names works too, on the same engines, quietly.
    assert ipp.run(_facts, n=2, device="cpu") == results
    assert words not in capsys.readouterr().out
    assert ipp.current() is None


@pytest.mark.slow  # two real engines: ≈ 15 s on the 2-core CI machine
def test_an_exercise_check_on_a_one_gpu_kernel_runs_on_cpu_engines(one_gpu_kernel, monkeypatch, capsys):
    monkeypatch.setenv("DDP_TUTORIAL_LANG", "en")
    exercise, namespace = ex.get("mean_over_ranks"), {}
    exec(exercise.solution_code("en"), namespace)
    try:
        assert exercise.evaluate(namespace["mean_over_ranks"]).status == "correct"
        engines = ipp.current()
        assert engines is not None and engines.device == "cpu" and engines.size == 2   # started by the check
        assert "starting 2 CPU engines instead" in capsys.readouterr().out
    finally:
        ipp.stop(force=True)


@pytest.mark.slow  # a kernel started by nbval in a pytest of its own: ≈ 10 s
def test_the_one_gpu_kernel_needs_no_pytest_cache(tmp_path):
    """``-p no:cacheprovider`` (a read-only working copy, a CI that switches the cache off) once turned every
    English notebook cell into an error deep inside pytest (notebooks/conftest.py kept its startup folder in
    pytest's cache); the folder is now a temporary one there, and is gone after the run."""
    import shutil
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    import nbformat
    root = Path(__file__).resolve().parent.parent
    shutil.copy(root / "notebooks" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (tmp_path / "en").mkdir()
    probe = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os, ddp_tutorial.ipp.local as local\n"
        "assert local.gpu_count() == 1 and os.environ['DDP_TUTORIAL_KERNEL_GPUS'] == '1'\n"
        "print(os.environ['IPYTHONDIR'])")])
    nbformat.write(probe, tmp_path / "en" / "probe.ipynb")
    before = set(Path(tempfile.gettempdir()).glob("ddp-tutorial-one-gpu-*"))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "--nbval-lax", "-p", "no:cacheprovider",
                          "-p", "no:xdist", "en/probe.ipynb"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=180)
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout + run.stderr
    assert set(Path(tempfile.gettempdir()).glob("ddp-tutorial-one-gpu-*")) == before   # nothing left behind
