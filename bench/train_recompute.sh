#!/bin/sh
# bench/train_recompute.sh [THREADS] [ROUNDS]: what activation recompute
# costs and saves on the byte-level GPT of examples/gpt.tfg (d 256, 4
# layers, 4 heads, T 128, batch 8, f32 products): the train step with every
# activation kept against recompute = ["block"] (each block's forward
# replayed for its backward), and the same in PyTorch eager on the CPU
# (bench/pytorch_gpt.py without and with --checkpoint:
# torch.utils.checkpoint around each block), same threads. Prints each
# side's step time, the ratio replayed / kept, and tfg's planned
# activation peak (peak less persistent bytes, plan --json) and measured
# peak of each.
#
#   make && sh bench/train_recompute.sh 2
#
# Step times as bench/train_gpt.sh takes them: tfg's is the difference of
# runs of S and 2S steps over S, PyTorch's the median of its steps; ROUNDS
# (default 3) interleaved rounds, the best of each reported. A benchmark,
# not a test: numbers depend on the machine and its load.
set -eu
cd "$(dirname "$0")/.."
THREADS=${1:-$(nproc)}
ROUNDS=${2:-3}
TFG=${TFG:-build/tfg}
ROOT=$(pwd)
S=12
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS="$THREADS"
. bench/lib.sh # bench_python, bench_torch
PY=$(bench_python)
have_torch=$(bench_torch "$PY")

cp examples/gpt.tfg "$tmp/kept.tfg"
sed 's|^  seed = 0$|  seed = 0\n  recompute = ["block"]|' examples/gpt.tfg >"$tmp/replayed.tfg"
opts="--set d=256 --set layers=4 --set heads=4 --set T=128 --set batch=8 --set precision=f32
  --set windows=\"$ROOT/examples/data/constitution.npy\" --set log_file=\"$tmp/log.csv\""

# trained_s KIND STEPS: seconds of tfg's train loop for STEPS steps
trained_s() {
  # shellcheck disable=SC2086 # the options, split on purpose
  "$TFG" run --threads "$THREADS" $opts --set steps="$2" --set log_every="$2" "$tmp/$1.tfg" 2>&1 >/dev/null |
    awk '/^trained/ { print $5; exit }'
}
best() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b + 0 < a + 0) print b; else print a }'; }

for kind in kept replayed; do trained_s "$kind" "$S" >/dev/null; done # warm-up
tk="" tr="" pk="" pr=""
r=0
while [ "$r" -lt "$ROUNDS" ]; do
  r=$((r + 1))
  for kind in kept replayed; do
    t1=$(trained_s "$kind" "$S")
    t2=$(trained_s "$kind" $((2 * S)))
    ms=$(awk -v a="$t1" -v b="$t2" -v s="$S" 'BEGIN { printf "%.2f", 1000 * (b - a) / s }')
    if [ "$kind" = kept ]; then tk=$(best "$tk" "$ms"); else tr=$(best "$tr" "$ms"); fi
    line="round $r tfg $kind step_ms=$ms"
    if [ "$have_torch" = 1 ]; then
      flag=""
      [ "$kind" = replayed ] && flag=--checkpoint
      pms=$($PY bench/pytorch_gpt.py --threads "$THREADS" --d 256 --layers 4 --heads 4 --T 128 --batch 8 \
        --steps $((2 * S + 4)) --warmup 2 $flag 2>/dev/null | sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p') || pms=""
      if [ -n "$pms" ]; then
        if [ "$kind" = kept ]; then pk=$(best "$pk" "$pms"); else pr=$(best "$pr" "$pms"); fi
        line="$line pytorch_step_ms=$pms"
      fi
    fi
    echo "$line" >&2
  done
done
peaks() { # KIND: the planned activation peak, then the measured peak
  # shellcheck disable=SC2086
  "$TFG" plan --json $opts --set steps=2 "$tmp/$1.tfg" 2>/dev/null |
    python3 -c 'import json, sys; d = json.load(sys.stdin)["devices"]; print("%.1f MiB" % (sum(x["peak_bytes"] - x["persistent_bytes"] for x in d) / 2**20))'
  # shellcheck disable=SC2086
  "$TFG" run --threads "$THREADS" $opts --set steps=2 --set log_every=2 "$tmp/$1.tfg" 2>&1 >/dev/null |
    awk '/^memory cpu:0/ { print $(NF - 1), $NF; exit }'
}
echo "tfg gpt recompute threads=$THREADS kept step_ms=$tk replayed step_ms=$tr (best of $ROUNDS)"
awk -v a="$tr" -v b="$tk" 'BEGIN { printf "ratio recompute tfg replayed/kept %.2f\n", a / b }'
if [ -n "$pk" ] && [ -n "$pr" ]; then
  echo "pytorch gpt checkpoint threads=$THREADS kept step_ms=$pk replayed step_ms=$pr (best of $ROUNDS)"
  awk -v a="$pr" -v b="$pk" 'BEGIN { printf "ratio recompute pytorch replayed/kept %.2f\n", a / b }'
  awk -v a="$tr" -v b="$pr" 'BEGIN { printf "ratio recompute tfg/pytorch (replayed) %.2f\n", a / b }'
fi
for kind in kept replayed; do
  set -- $(peaks "$kind" | tr '\n' ' ')
  echo "tfg gpt $kind planned activation peak $1 $2, measured peak $3 $4"
done
