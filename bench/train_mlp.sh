#!/bin/sh
# bench/train_mlp.sh [THREADS]: one training step of the same MLPs in tfg
# and in PyTorch on the CPU (Debian's python3-torch), same threads, same
# batch, same optimizer; prints each step time and the ratio tfg / PyTorch.
#
#   make && sh bench/train_mlp.sh 2
#
# tfg's step time is its whole `train` loop (feeding, forward, backward,
# update) divided by the steps, after a warm-up run; PyTorch's is the
# median of its per-step times (bench/pytorch_mlp.py). A benchmark, not a
# test: numbers depend on the machine and its load.
set -eu
cd "$(dirname "$0")/.."
THREADS=${1:-$(nproc)}
TFG=${TFG:-build/tfg}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=$THREADS
. bench/lib.sh # tfg_trained, bench_python
PY=$(bench_python)

# The wide model's batch: 128 random rows (x in [0, 1), labels 0..9), as .npy.
$PY bench/make_batch.py "$tmp"

# Milliseconds per step of tfg's train loop.
tfg_step_ms() { tfg_trained "$TFG" run --threads "$THREADS" "$@" | awk '{ printf "%.4f", 1000 * $2 / $1 }'; }
digits=$(tfg_step_ms bench/mlp_digits.tfg)
wide=$(tfg_step_ms --feed "x=$tmp/x.npy" --feed "y=$tmp/y.npy" bench/mlp_wide.tfg)
echo "tfg digits threads=$THREADS batch=32 step_ms=$digits"
echo "tfg wide threads=$THREADS batch=128 step_ms=$wide"

if ! $PY -c 'import torch' 2>/dev/null; then
  echo "pytorch: not installed (apt-get install python3-torch); no comparison" >&2
  exit 2
fi
$PY bench/pytorch_mlp.py --threads "$THREADS" --digits-hidden 256 --digits-batch 32 | tee "$tmp/torch.txt"
for model in digits wide; do
  t=$(grep "^pytorch $model " "$tmp/torch.txt" | sed -E 's/.*step_ms=([0-9.]+).*/\1/')
  mine=$([ "$model" = digits ] && echo "$digits" || echo "$wide")
  awk -v a="$mine" -v b="$t" -v m="$model" 'BEGIN { printf "ratio %s tfg/pytorch %.2f\n", m, a / b }'
done
