#!/usr/bin/env bash
# Set up and run every test: unit, multi-process (gloo), ipyparallel, the real two-node SLURM
# cluster (started by the tests themselves; needs root) and the notebooks (nbval).
#
#   bash scripts/test.sh [extra pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test

# The notebooks run offline on Debian's genuine Fashion-MNIST, staged once.
export DDP_TUTORIAL_DATASET=${DDP_TUTORIAL_DATASET:-fashion-mnist}
export DDP_TUTORIAL_ROOT=${DDP_TUTORIAL_ROOT:-$PWD/.data}
if [ -d /usr/share/datasets/fashion-mnist ]; then
  .venv/bin/ddp-tutorial data prepare --dataset fashion-mnist --root "$DDP_TUTORIAL_ROOT" \
      --from /usr/share/datasets/fashion-mnist
fi
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
exec .venv/bin/python -m pytest --nbval-lax tests notebooks "$@"
