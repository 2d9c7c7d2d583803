#!/usr/bin/env bash
# Set up this checkout on a fresh machine: system packages (when root on Debian/Ubuntu),
# a virtual environment in .venv with PyTorch, and the package itself (editable).
#
#   bash scripts/setup.sh          # the package, the notebooks' tools
#   bash scripts/setup.sh --test   # and what the tests need (SLURM test cluster, data, pytest, nbval)
#
# Environment: PYTHON (default python3), VENV (default .venv), TORCH_VERSION / TORCHVISION_VERSION.
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[ "${1:-}" = "--test" ] && want_test=1
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_VERSION=${TORCH_VERSION:-2.14.1}
TORCHVISION_VERSION=${TORCHVISION_VERSION:-0.29.1}

# 1. System packages: Debian's genuine Fashion-MNIST (offline data), and for the tests a real
#    SLURM (controller, node daemon, client), munge and iproute2 for the two-node test cluster.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  pkgs=(dataset-fashion-mnist)
  [ $want_test = 1 ] && pkgs+=(slurm-wlm slurmctld slurmd slurm-client munge iproute2 util-linux procps)
  missing=()
  for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "== apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

# 2. The virtual environment, PyTorch pinned (pip must not resolve another torch), then us.
if [ ! -x "$VENV/bin/python" ]; then
  echo "== creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
if ! "$VENV/bin/python" -c "import torch, torchvision, sys; sys.exit(not (torch.__version__.split('+')[0] == '$TORCH_VERSION' and torchvision.__version__.split('+')[0] == '$TORCHVISION_VERSION'))" 2>/dev/null; then
  echo "== pip install torch==$TORCH_VERSION torchvision==$TORCHVISION_VERSION (a few minutes)"
  "${PIP[@]}" install "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION"
fi
extra=notebooks
[ $want_test = 1 ] && extra=test,notebooks
echo "== pip install -e .[$extra]"
"${PIP[@]}" install "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" -e ".[$extra]"
"$VENV/bin/python" -c "import ddp_tutorial, torch; print('ddp_tutorial', ddp_tutorial.__version__, '| torch', torch.__version__)"
