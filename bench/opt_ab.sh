#!/bin/sh
# bench/opt_ab.sh [THREADS] [ROUNDS]: the training step of bench/gpt_layers.tfg
# with the graph rewrites off (TFG_OPT=0) and on (the default), interleaved
# over ROUNDS rounds (default 5) so drift in load falls on both; prints
# each round's ms/step and the best of each, and their ratio.
#
#   make && sh bench/opt_ab.sh 2 5
#
# A step's time is the whole train loop divided by its steps (bench/lib.sh,
# after a warm-up run). A benchmark, not a test.
set -eu
cd "$(dirname "$0")/.."
THREADS=${1:-$(nproc)}
ROUNDS=${2:-5}
TFG=${TFG:-build/tfg}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=$THREADS
. bench/lib.sh # tfg_trained, bench_python
PY=$(bench_python)
# The batch: 8 x 128 x 256 f32 normal values, as .npy.
$PY bench/make_batch.py "$tmp" normal 8x128x256
step_ms() { tfg_trained "$TFG" run --threads "$THREADS" --feed "x=$tmp/x.npy" bench/gpt_layers.tfg |
  awk '{ printf "%.1f", 1000 * $2 / $1 }'; }
best_off=0 best_on=0
for r in $(seq "$ROUNDS"); do
  off=$(TFG_OPT=0 step_ms)
  on=$(step_ms)
  echo "round $r: TFG_OPT=0 $off ms/step, default $on ms/step"
  best_off=$(awk -v a="$best_off" -v b="$off" 'BEGIN { print (a == 0 || b < a) ? b : a }')
  best_on=$(awk -v a="$best_on" -v b="$on" 'BEGIN { print (a == 0 || b < a) ? b : a }')
done
awk -v a="$best_off" -v b="$best_on" 'BEGIN { printf "best of %d: TFG_OPT=0 %.1f ms/step, default %.1f ms/step, ratio %.2f\n", '"$ROUNDS"', a, b, b / a }'
