#!/usr/bin/env bash
# A short GPU check (benchmarks/README.md 8.2): --optimizer sgd/adam on CUDA, the capstone's script under torchrun on 1 GPU, the CUDA tests.
# Usage, on a GPU machine, after notebook 08 wrote its capstone (notebooks/en/capstone/): OUT=DIR bash benchmarks/gpu_short_check.sh
# (FASHION_MNIST: the four .gz files; CAPSTONE: the folder with cnn_ddp.py and cnn_single.py).
OUT=${OUT:-.}
PY=${PY:-/opt/torch/.venv/bin/python3}; [ -x "$PY" ] || PY=python3
export PYTHONPATH=$PWD DDP_TUTORIAL_LANG=en
D=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
"$PY" -c "import torch; print('torch', torch.__version__, torch.cuda.is_available())"
timeout 60 "$PY" -m ddp_tutorial data prepare --dataset fashion-mnist --root "$D" --from "${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}" | tail -1
for opt in adam sgd; do
  lr=0.001; [ $opt = sgd ] && lr=0.01
  /usr/bin/time -f "train $opt: %e s" timeout 90 "$PY" -m ddp_tutorial train --dataset fashion-mnist --root "$D" \
      --epochs 1 --optimizer $opt --lr $lr --json "$OUT/train-$opt.json" 2>&1 | tail -3
done
TR=$(dirname "$PY")/torchrun
/usr/bin/time -f "capstone torchrun: %e s" timeout 90 "$TR" --standalone --nproc-per-node 1 \
    "${CAPSTONE:-notebooks/en/capstone}/cnn_ddp.py" --root "$D" --limit 6000 --epochs 1 2>&1 | tail -4
timeout 150 "$PY" -m pytest -q -rs -p no:cacheprovider tests/test_device_rule.py::test_nccl_world_one_with_device_id_a_gloo_side_group_and_a_device_barrier \
  tests/test_ipp.py::test_a_kernel_that_initialised_cuda_is_refused tests/test_ipp.py::test_gpu_engines_train_on_their_gpus_while_the_kernel_stays_off_cuda 2>&1 | tail -6
