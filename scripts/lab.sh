#!/usr/bin/env bash
# From a fresh clone to JupyterLab with the workshop's notebooks open, in one command:
#
#   bash scripts/lab.sh          # English notebooks
#   bash scripts/lab.sh tr       # Türkçe defterler
#
# 1. creates/updates the virtual environment .venv (scripts/setup.sh: PyTorch, the package, JupyterLab);
# 2. stages a data set once, if none is staged yet: MNIST (downloaded; needs internet), or else
#    Debian's Fashion-MNIST (/usr/share/datasets/fashion-mnist) offline;
# 3. starts JupyterLab on notebooks/<language>/, with 00_setup.ipynb open.
#
# Environment: DDP_TUTORIAL_DATASET (mnist | fashion-mnist), DDP_TUTORIAL_ROOT (default .data in
# this checkout; on a cluster, a folder the compute nodes see too), and any `jupyter lab` option
# after the language, e.g. `bash scripts/lab.sh en --no-browser --port 8899`.
set -euo pipefail
cd "$(dirname "$0")/.."

lang=en
if [ "${1:-}" = tr ] || [ "${1:-}" = en ]; then lang=$1; shift; fi

bash scripts/setup.sh

export DDP_TUTORIAL_LANG=$lang
export DDP_TUTORIAL_ROOT=${DDP_TUTORIAL_ROOT:-$PWD/.data}
dataset=${DDP_TUTORIAL_DATASET:-}
cli=.venv/bin/ddp-tutorial
debian=/usr/share/datasets/fashion-mnist

staged() { "$cli" data check --dataset "$1" --root "$DDP_TUTORIAL_ROOT" >/dev/null 2>&1; }

if [ -z "$dataset" ]; then                  # keep whatever is staged already, MNIST first
  for candidate in mnist fashion-mnist; do
    if staged "$candidate"; then dataset=$candidate; break; fi
  done
fi
if [ -z "$dataset" ] || ! staged "$dataset"; then
  echo "== staging the data in $DDP_TUTORIAL_ROOT"
  if [ "${dataset:-mnist}" = mnist ] && "$cli" data prepare --dataset mnist --root "$DDP_TUTORIAL_ROOT"; then
    dataset=mnist
  elif [ "${dataset:-fashion-mnist}" = fashion-mnist ] && [ -d "$debian" ]; then
    dataset=fashion-mnist
    "$cli" data prepare --dataset fashion-mnist --root "$DDP_TUTORIAL_ROOT" --from "$debian"
  else
    echo "!! no data set could be staged (no internet for MNIST, and no $debian)." >&2
    echo "!! The notebooks will say how to stage one; starting JupyterLab anyway." >&2
    dataset=${dataset:-mnist}
  fi
fi
export DDP_TUTORIAL_DATASET=$dataset
echo "== data set: $DDP_TUTORIAL_DATASET in $DDP_TUTORIAL_ROOT · notebooks: notebooks/$lang"

# The notebooks' folder is JupyterLab's root; the first notebook opens at once.
extra=()
[ "$(id -u)" = 0 ] && extra+=(--allow-root)   # containers often run as root; JupyterLab refuses without it
exec .venv/bin/jupyter lab --ServerApp.root_dir="$PWD/notebooks" "${extra[@]}" "$@" \
     "$PWD/notebooks/$lang/00_setup.ipynb"
