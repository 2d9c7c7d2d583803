#!/usr/bin/env bash
# Set up this checkout on a fresh machine: system packages (when root on Debian/Ubuntu),
# a virtual environment in .venv with PyTorch, and the package itself (editable).
#
#   bash scripts/setup.sh                 # the package, the notebooks' tools (torch from PyPI)
#   bash scripts/setup.sh --test          # and what the tests need (SLURM test cluster, data, pytest, nbval)
#   bash scripts/setup.sh --cuda cu126    # torch built for CUDA 12.6, from download.pytorch.org/whl/cu126
#   bash scripts/setup.sh --index-url URL # torch from another index (a site mirror)
#
# Which torch build? (from PyTorch's release notes, not checked here; `ddp-tutorial env` on a GPU
# node prints the driver, each GPU's compute capability and whether the installed torch fits):
#   (default) PyPI's torch==2.14.1 is the CUDA 13.0 build: Turing (sm_75) and newer, driver >= 580
#   cu130  the same from PyTorch's index;  cu128: sm_75 ... sm_120, driver >= 570 (525 with minor-version compat)
#   cu126  sm_50 ... sm_90 — P100 (sm_60), V100 (sm_70) — driver >= 525 (560 recommended);  cpu: no CUDA
# The wheel bundles its own CUDA runtime and NCCL: no `module load cuda` is needed (one may even put
# another libnccl.so.2 first on the library path).
#
# Environment: PYTHON (default python3), VENV (default .venv), TORCH_VERSION / TORCHVISION_VERSION.
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
variant=""
index_url=""
while [ $# -gt 0 ]; do
  case "$1" in
    --test) want_test=1 ;;
    --cuda)
      variant=${2:-}
      case "$variant" in
        cu126|cu128|cu130|cpu) ;;
        *) echo "setup.sh: --cuda takes cu126, cu128, cu130 or cpu (got '${variant}') / --cuda şunlardan birini alır: cu126, cu128, cu130, cpu" >&2; exit 2 ;;
      esac
      index_url="https://download.pytorch.org/whl/$variant"
      shift ;;
    --index-url)
      index_url=${2:-}
      [ -n "$index_url" ] || { echo "setup.sh: --index-url needs a URL / --index-url bir adres ister" >&2; exit 2; }
      shift ;;
    *) echo "setup.sh: unknown option '$1' (use --test, --cuda VARIANT, --index-url URL) / bilinmeyen seçenek" >&2; exit 2 ;;
  esac
  shift
done
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
# With --cuda the installed build must also be that variant (torch.__version__ ends in +cu126 …;
# PyPI's own wheel has no such suffix, so with --index-url only the version is checked).
want_local=""
case "$variant" in cu*|cpu) want_local="$variant" ;; esac
if ! "$VENV/bin/python" -c "import torch, torchvision, sys; v = torch.__version__.split('+'); sys.exit(not (v[0] == '$TORCH_VERSION' and torchvision.__version__.split('+')[0] == '$TORCHVISION_VERSION' and ('$want_local' == '' or (v[1:] or [''])[0] == '$want_local')))" 2>/dev/null; then
  if [ -n "$index_url" ]; then
    echo "== pip install torch==$TORCH_VERSION torchvision==$TORCHVISION_VERSION from $index_url (a few minutes)"
    # --force-reinstall: an installed PyPI torch of the same version would count as "already there".
    "${PIP[@]}" install --force-reinstall --index-url "$index_url" "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION"
  else
    echo "== pip install torch==$TORCH_VERSION torchvision==$TORCHVISION_VERSION (a few minutes)"
    "${PIP[@]}" install "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION"
  fi
fi
extra=notebooks
[ $want_test = 1 ] && extra=test,notebooks
echo "== pip install -e .[$extra]"
"${PIP[@]}" install "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" -e ".[$extra]"
"$VENV/bin/python" -c "import ddp_tutorial, torch; print('ddp_tutorial', ddp_tutorial.__version__, '| torch', torch.__version__)"
if [ -n "$variant$index_url" ]; then  # does this build fit this node's GPUs? (says so in plain words)
  "$VENV/bin/python" -m ddp_tutorial.gpu || true
fi
