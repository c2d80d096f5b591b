#!/bin/sh
# bench/train_gpt.sh [THREADS] [ROUNDS]: one training step (forward, loss,
# backward, clipping, AdamW with its cosine schedule) of the byte-level GPT
# of examples/gpt.tfg in tfg and of the same model in PyTorch eager on the
# CPU (bench/pytorch_gpt.py, Debian's python3-torch), same threads, at three
# sizes, both with f32 products (--set precision=f32: a CPU has no bf16
# matrix units here, and both sides would only emulate them); prints each
# step time and the ratio tfg / PyTorch.
#
#   make && sh bench/train_gpt.sh 2
#
# Sizes (d, layers, heads, T, batch): small 128 2 4 64 8; default 256 4 4
# 128 8 (the size bench/README's CPU numbers use); large 384 6 6 128 8.
#
# Each size runs ROUNDS (default 3) interleaved rounds: tfg, then PyTorch,
# then tfg again, and so on, so that a change in the machine's load hits
# both; each side's best round is reported and the ratio is of the bests.
# tfg's step time in a round is the difference of two runs of its `train`
# loop, of S and 2S steps (S: 40, 12 and 6 for the three sizes, about
# a second of steps, so a noisy second does not make the difference of
# the two runs meaningless), divided by S: what a step costs once the loop
# runs (the first step's page faults and the final evaluation of the test
# split, which both runs have, cancel out); one untimed run per size
# warms up first. PyTorch's is the median of its per-step times after
# warm-up steps (bench/pytorch_gpt.py). SIZES="default large" runs only
# the sizes named. The environment reaches tfg
# (TFG_FUSE=0 and the like). A benchmark, not a test: numbers depend on the
# machine and its load.
set -eu
cd "$(dirname "$0")/.."
THREADS=${1:-$(nproc)}
ROUNDS=${2:-3}
TFG=${TFG:-build/tfg}
export OPENBLAS_NUM_THREADS="$THREADS"
. bench/lib.sh # bench_python, bench_torch
PY=$(bench_python)
have_torch=$(bench_torch "$PY")

# trained_s STEPS SIZE-OPTIONS...: seconds of tfg's train loop for STEPS steps
trained_s() {
  steps=$1
  shift
  "$TFG" run --threads "$THREADS" --set steps="$steps" --set log_every="$steps" "$@" examples/gpt.tfg 2>&1 >/dev/null |
    awk '/^trained/ { print $5; exit }'
}
# best A B: the smaller of two numbers (A may be empty: none yet)
best() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b + 0 < a + 0) print b; else print a }'; }

status=0
# name d layers heads T batch S (tfg's short run; the long one is 2S)
for size in "small 128 2 4 64 8 40" "default 256 4 4 128 8 12" "large 384 6 6 128 8 6"; do
  # shellcheck disable=SC2086 # the size's fields, split on purpose
  set -- $size
  name=$1 d=$2 layers=$3 heads=$4 T=$5 batch=$6 S=$7
  case " ${SIZES:-small default large} " in *" $name "*) ;; *) continue ;; esac
  opts="--set d=$d --set layers=$layers --set heads=$heads --set T=$T --set batch=$batch --set precision=f32"
  # shellcheck disable=SC2086
  trained_s "$S" $opts >/dev/null # warm-up: page cache, OpenBLAS's threads
  tbest="" pbest=""
  r=0
  while [ "$r" -lt "$ROUNDS" ]; do
    r=$((r + 1))
    # shellcheck disable=SC2086
    t1=$(trained_s "$S" $opts)
    # shellcheck disable=SC2086
    t2=$(trained_s $((2 * S)) $opts)
    if [ -z "$t1" ] || [ -z "$t2" ]; then
      echo "tfg gpt size=$name: the run printed no 'trained' line" >&2
      status=1
      break
    fi
    ms=$(awk -v a="$t1" -v b="$t2" -v s="$S" 'BEGIN { printf "%.2f", 1000 * (b - a) / s }')
    tbest=$(best "$tbest" "$ms")
    line="round $r size=$name tfg_step_ms=$ms"
    if [ "$have_torch" = 1 ]; then
      pline=$($PY bench/pytorch_gpt.py --threads "$THREADS" --d "$d" --layers "$layers" --heads "$heads" \
        --T "$T" --batch "$batch" --steps $((2 * S + 4)) --warmup 2 2>/dev/null) || pline=""
      pms=$(echo "$pline" | sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p')
      if [ -n "$pms" ]; then
        pbest=$(best "$pbest" "$pms")
        line="$line pytorch_step_ms=$pms"
      fi
    fi
    echo "$line" >&2
  done
  [ -n "$tbest" ] || continue
  echo "tfg gpt size=$name threads=$THREADS d=$d layers=$layers heads=$heads T=$T batch=$batch step_ms=$tbest (best of $ROUNDS)"
  if [ -n "$pbest" ]; then
    echo "pytorch gpt size=$name threads=$THREADS d=$d layers=$layers heads=$heads T=$T batch=$batch step_ms=$pbest (best of $ROUNDS)"
    awk -v a="$tbest" -v b="$pbest" -v m="$name" 'BEGIN { printf "ratio gpt %s tfg/pytorch %.2f\n", m, a / b }'
  fi
done
[ "$have_torch" = 1 ] || exit 2
exit $status
