#!/bin/sh
# bench/predict.sh [THREADS]: `tfg plan --predict` against measured runs on
# host devices: the digits MLP (64-256-10, batch 32), the wide one
# (784-1024-1024-10, batch 128) and the transformer stack of
# bench/gpt_layers.tfg (4 blocks, d 256, T 128, batch 8, 10 steps) with
# mirrored(...) on 1, 2 and 4 host devices (the MLPs as
# bench/train_devices.sh runs them). For each: the predicted
# step time (the least of 3 predictions), the measured one (the best of
# 5 runs: the whole train loop over its steps, divided by them) and the
# prediction's error.
#
#   make && sh bench/predict.sh 2
#
# A benchmark, not a test: numbers depend on the machine and its load.
set -eu
cd "$(dirname "$0")/.."
THREADS=${1:-$(nproc)}
TFG=${TFG:-build/tfg}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=$THREADS
. bench/lib.sh # tfg_trained, bench_python
$(bench_python) bench/make_batch.py "$tmp"
mkdir -p "$tmp/gpt"
$(bench_python) bench/make_batch.py "$tmp/gpt" normal 8x128x256
# step_s ARGS...: the best of 5 measured step times, in seconds
step_s() {
  best=""
  for _ in 1 2 3 4 5; do
    t=$(tfg_trained "$TFG" run --threads "$THREADS" "$@" | awk '{ printf "%.9f", $2 / $1 }')
    best=$(awk -v a="$t" -v b="${best:-$t}" 'BEGIN { print (a < b ? a : b) }')
  done
  echo "$best"
}
printf '%-7s %7s %12s %12s %7s\n' model devices predicted measured error
for model in digits wide gpt; do
  for n in 1 2 4; do
    devs=$(seq 0 $((n - 1)) | sed 's/^/gpu:/' | paste -sd, - | sed 's/,/, /g')
    set -- --devices "host*$n" --set "strategy=mirrored([$devs])"
    case $model in
    digits) prog=bench/mlp_digits.tfg; feed="" ;;
    wide) prog=bench/mlp_wide.tfg; feed="--feed x=$tmp/x.npy --feed y=$tmp/y.npy" ;;
    gpt) prog=bench/gpt_layers.tfg; feed="--feed x=$tmp/gpt/x.npy"; set -- "$@" --set steps=10 ;;
    esac
    # shellcheck disable=SC2086
    m=$(step_s "$@" $feed "$prog")
    # the least of 3 predictions: each measures the host again, and the
    # least disturbed measurement is the one to trust, as for the runs
    p=""
    for _ in 1 2 3; do
      q=$("$TFG" plan --predict --threads "$THREADS" "$@" "$prog" |
        awk '/^predicted step:/ { v = $3; u = $4; print (u == "us" ? v / 1e6 : u == "ms" ? v / 1e3 : v); exit }')
      p=$(awk -v a="$q" -v b="${p:-$q}" 'BEGIN { print (a < b ? a : b) }')
    done
    awk -v m="$model" -v n="$n" -v p="$p" -v t="$m" \
      'BEGIN { printf "%-7s %7s %9.3f ms %9.3f ms %+6.0f%%\n", m, "host*" n, p * 1e3, t * 1e3, 100 * (p - t) / t }'
  done
done
