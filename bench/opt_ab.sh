#!/bin/sh
# bench/opt_ab.sh [THREADS] [ROUNDS]: the training step of bench/gpt_layers.tfg
# with a switch off (AB=0; AB names the environment variable, default
# TFG_OPT: the graph rewrites) and on (the default), interleaved over
# ROUNDS rounds (default 5) so drift in load falls on both; prints each
# round's ms/step and the best of each, and their ratio. SEQ sets the
# sequence length (default 128; batch 8, d 256).
#
#   make && sh bench/opt_ab.sh 2 5
#   AB=TFG_ATTENTION_GRAD SEQ=512 sh bench/opt_ab.sh 2 3   # attention's fused gradient
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
AB=${AB:-TFG_OPT}
SEQ=${SEQ:-128}
# The batch: 8 x SEQ x 256 f32 normal values, as .npy.
$PY bench/make_batch.py "$tmp" normal "8x${SEQ}x256"
step_ms() { tfg_trained "$TFG" run --threads "$THREADS" --set "seq=$SEQ" --feed "x=$tmp/x.npy" bench/gpt_layers.tfg |
  awk '{ printf "%.1f", 1000 * $2 / $1 }'; }
best_off=0 best_on=0
for r in $(seq "$ROUNDS"); do
  off=$(export "$AB=0" && step_ms) # a subshell: the switch stays off only there
  on=$(step_ms)
  echo "round $r: $AB=0 $off ms/step, default $on ms/step"
  best_off=$(awk -v a="$best_off" -v b="$off" 'BEGIN { print (a == 0 || b < a) ? b : a }')
  best_on=$(awk -v a="$best_on" -v b="$on" 'BEGIN { print (a == 0 || b < a) ? b : a }')
done
awk -v a="$best_off" -v b="$best_on" -v ab="$AB" 'BEGIN { printf "best of %d: %s=0 %.1f ms/step, default %.1f ms/step, ratio %.2f\n", '"$ROUNDS"', ab, a, b, b / a }'
