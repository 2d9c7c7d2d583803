"""Too low a limit on open files (``ulimit -n``) is named, with the way out (issue 25, I13): before,
4 ranks under ``ulimit -n 24`` failed with "Failed to init uv loop", "Failed to recv" or a wait.
Real processes under a real ``RLIMIT_NOFILE`` (set in the child before it starts)."""

import os
import resource
import subprocess
import sys

import pytest


def run(argv, limit, lang="en", timeout=180):
    def lower_the_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, limit)
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID",
                        "SLURM_JOB_ID")}
    env["DDP_TUTORIAL_LANG"] = lang
    return subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=lower_the_limit)


def train(root, nproc):
    return ["-m", "ddp_tutorial", "train", "--dataset", "mnist", "--root", str(root), "--epochs", "1",
            "--train-subset", "256", "--no-eval", "--quiet", "--nproc-per-node", str(nproc), "--timeout", "30"]


@pytest.mark.parametrize("lang, words", [("en", "Too many open files for 4 training processes: each process may "
                                                "open 24 files (ulimit -n"),
                                         ("tr", "4 eğitim süreci için açık dosya sınırı çok düşük: her süreç en çok "
                                                "24 dosya açabiliyor (ulimit -n")])
def test_a_hard_limit_too_low_is_refused_before_any_process_starts(mnist_root, lang, words):
    done = run(train(mnist_root, 4), (24, 24), lang)
    assert done.returncode == 2, done.stderr[-3000:]
    assert words in done.stderr and "ulimit -n 4096" in done.stderr, done.stderr[-3000:]
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr[-3000:]  # no torch lines, no rank's error
    assert "Failed to" not in done.stderr and "Traceback" not in done.stderr


def test_a_low_soft_limit_is_raised_up_to_the_hard_one(mnist_root):
    """`ulimit -S -n 24` with room under the hard limit: the launcher raises its own soft limit (the
    children inherit it) and the run simply works."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
    done = run(train(mnist_root, 2), (24, hard))
    assert done.returncode == 0, done.stderr[-3000:]


def test_emfile_anywhere_is_named_not_a_traceback():
    """An EMFILE the check could not foresee (an import, a file, a socket) ends in our line, not a traceback."""
    code = ("import sys; from ddp_tutorial.entry import run_and_exit\n"
            "sys.exit(run_and_exit(lambda: [open('/dev/null') for _ in range(10_000)]))")
    for lang, words in (("en", "Too many open files: this process reached its limit of 16 open files (ulimit -n)"),
                        ("tr", "Çok fazla açık dosya: bu süreç 16 açık dosya sınırına (ulimit -n) ulaştı")):
        done = run(["-c", code], (16, 16), lang, timeout=60)
        assert done.returncode == 2, done.stderr
        assert words in done.stderr and "Traceback" not in done.stderr, done.stderr
