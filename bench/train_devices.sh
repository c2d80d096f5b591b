#!/bin/sh
# bench/train_devices.sh [THREADS]: the digits MLP (64-256-10, global
# batch 32) and a wide one (784-1024-1024-10, global batch 128) trained
# with mirrored(...) on 1, 2 and 4 host devices: steps per second and the
# speed-up over one device. Host devices share this machine's cores, so
# the speed-up is bounded by its core count; on a GPU machine the same
# programs run on cuda devices.
#
#   make && sh bench/train_devices.sh 2
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
steps_per_s() { tfg_trained "$TFG" run --threads "$THREADS" "$@" | awk '{ printf "%.1f", $1 / $2 }'; }
for model in digits wide; do
  base=""
  for n in 1 2 4; do
    devs=$(seq 0 $((n - 1)) | sed 's/^/gpu:/' | paste -sd, - | sed 's/,/, /g')
    set -- --devices "host*$n" --set "strategy=mirrored([$devs])"
    if [ "$model" = digits ]; then r=$(steps_per_s "$@" bench/mlp_digits.tfg)
    else r=$(steps_per_s "$@" --feed "x=$tmp/x.npy" --feed "y=$tmp/y.npy" bench/mlp_wide.tfg); fi
    [ -z "$base" ] && base=$r
    awk -v m="$model" -v n="$n" -v r="$r" -v b="$base" -v t="$THREADS" \
      'BEGIN { printf "%s devices=%d threads=%s steps_per_s=%s speedup=%.2f\n", m, n, t, r, r / b }'
  done
done
