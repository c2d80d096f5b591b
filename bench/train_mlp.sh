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
# Debian's python3 (where python3-torch installs), else the first on PATH.
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3

# The wide model's batch: 128 random rows (x in [0, 1), labels 0..9), as .npy.
$PY bench/make_batch.py "$tmp"

# Seconds per step from "trained N steps in T s", after one warm-up run.
tfg_step_ms() {
  "$TFG" run --quiet --threads "$THREADS" "$@" >/dev/null 2>&1
  out=$("$TFG" run --threads "$THREADS" "$@" 2>&1 >/dev/null | grep '^trained')
  echo "$out" | awk '{ printf "%.4f", 1000 * $5 / $2 }'
}
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
