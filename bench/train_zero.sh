#!/bin/sh
# bench/train_zero.sh [THREADS] [STEPS]: what ZeRO and activation recompute
# cost and save, in two parts.
#
# 1. The byte-level GPT of examples/gpt.tfg (d 256, 4 layers, 4 heads, T
#    128, batch 16, f32) mirrored over host*4, at zero 0, 1 and 2, without
#    and with recompute = ["block"]: steps/s (from the log, the first step
#    left out), and gpu:0's planned peak by kind (tfg plan --json
#    "memory") beside the peak its pool measured.
# 2. tfg plan of a 1.3-billion-param GPT (d 2048, 24 layers, 16 heads, T
#    2048, batch 128, bf16 products) mirrored over sim:h100*8 at each of
#    the same settings: gpu:0's planned peak by kind, or the plan's refusal
#    (out of memory on an 80 GB H100). Its data: 2049-byte windows of
#    examples/data/constitution.txt (make_text_windows.py).
#
#   make && sh bench/train_zero.sh 2
#
# A benchmark, not a test: numbers depend on the machine and its load.
set -eu
cd "$(dirname "$0")/.."
THREADS=${1:-$(nproc)}
STEPS=${2:-6}
TFG=${TFG:-build/tfg}
ROOT=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=$THREADS

program() { # FILE ZERO RECOMPUTE-SETTING
  sed -e "s|^  seed = 0\$|  seed = 0\n  strategy = mirrored()\n  zero = $2\n  $3|" examples/gpt.tfg >"$1"
}
memory() { # gpu:0's planned peak by kind, in MiB, from plan --json on stdin
  python3 -c 'import json, sys
d = [x for x in json.load(sys.stdin)["devices"] if x["name"] == "gpu:0"][0]
m = d["memory"]
print("peak %.1f (params %.1f, gradients %.1f, state %.1f, activations %.1f) MiB" % tuple(
    v / 2**20 for v in (d["peak_bytes"], m["params"], m["gradients"], m["optimizer_state"], m["activations"])))'
}

echo "1. the GPT (d 256, 4 layers, T 128, batch 16, f32) mirrored over host*4, $THREADS threads, $STEPS steps"
small="--set d=256 --set layers=4 --set heads=4 --set T=128 --set batch=16 --set precision=f32
  --set windows=\"$ROOT/examples/data/constitution.npy\" --set log_every=1 --set warmup=1"
for rc in "" 'recompute = ["block"]'; do
  for z in 0 1 2; do
    program "$tmp/g.tfg" "$z" "$rc"
    # shellcheck disable=SC2086 # the options, split on purpose
    "$TFG" run --threads "$THREADS" --devices host*4 $small --set steps="$STEPS" --set decay="$STEPS" \
      --set log_file=\"$tmp/log.csv\" "$tmp/g.tfg" >/dev/null 2>"$tmp/err"
    rate=$(awk -F, 'NR == 2 { t0 = $NF; s0 = $1 } NR > 2 { t = $NF; s = $1 } END { if (t > t0) printf "%.2f", (s - s0) / (t - t0) }' "$tmp/log.csv")
    measured=$(awk '/^memory gpu:0/ { print $(NF - 1), $NF; exit }' "$tmp/err")
    # shellcheck disable=SC2086
    planned=$("$TFG" plan --json --devices host*4 $small --set steps=2 --set log_file=\"$tmp/log.csv\" "$tmp/g.tfg" | memory)
    echo "zero $z${rc:+, $rc}: $rate steps/s; gpu:0 planned $planned; measured $measured"
  done
done

echo "2. a 1.3B-param GPT (d 2048, 24 layers, T 2048, batch 128, bf16) mirrored over sim:h100*8 (80 GB each)"
python3 examples/data/make_text_windows.py examples/data/constitution.txt "$tmp/w2049.npy" --window 2049 --stride 128 >/dev/null
big="--set d=2048 --set layers=24 --set heads=16 --set T=2048 --set window=2049 --set batch=128 --set precision=bf16
  --set windows=\"$tmp/w2049.npy\""
for rc in "" 'recompute = ["block"]'; do
  for z in 0 1 2; do
    program "$tmp/big.tfg" "$z" "$rc"
    # shellcheck disable=SC2086
    if "$TFG" plan --json --devices sim:h100*8 $big "$tmp/big.tfg" >"$tmp/plan.json" 2>"$tmp/err"; then
      echo "zero $z${rc:+, $rc}: fits: gpu:0 $(memory <"$tmp/plan.json")"
    else
      echo "zero $z${rc:+, $rc}: refused: $(grep -m1 'error' "$tmp/err" | sed 's/^[^ ]* error: //')"
    fi
  done
done
