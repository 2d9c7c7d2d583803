#!/usr/bin/env bash
# Set up and run the main job: stage the data, then train the seed's model with DDP on this
# machine (one process per GPU, or 2 CPU processes) and print the seed's lines.
#
#   bash scripts/demo.sh                 # MNIST (downloaded), or Fashion-MNIST offline from Debian
#   DDP_TUTORIAL_DATASET=fashion-mnist bash scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
root=${DDP_TUTORIAL_ROOT:-$PWD/.data}
dataset=${DDP_TUTORIAL_DATASET:-mnist}
if ! .venv/bin/ddp-tutorial data prepare --dataset "$dataset" --root "$root"; then
  if [ "$dataset" = mnist ] && [ -d /usr/share/datasets/fashion-mnist ]; then
    echo "== no network for MNIST: using Debian's Fashion-MNIST instead"
    dataset=fashion-mnist
    .venv/bin/ddp-tutorial data prepare --dataset "$dataset" --root "$root" --from /usr/share/datasets/fashion-mnist
  else
    exit 1
  fi
fi
nproc=$(.venv/bin/python -c "import torch; print(torch.cuda.device_count() or 2)")
exec .venv/bin/ddp-tutorial train --dataset "$dataset" --root "$root" --nproc-per-node "$nproc" \
     --epochs 2 --json runs/demo.json
