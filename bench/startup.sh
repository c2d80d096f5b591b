#!/bin/sh
# bench/startup.sh [THREADS] [DEVICES]: how long the 85M-param GPT of
# examples/gpt.tfg (12 layers, d 768, 12 heads, T 256: the GPU bench's
# model) takes from launch to its first training step, phase by phase, and
# the first step itself.
#
#   make && sh bench/startup.sh 2            # host devices
#   sh bench/startup.sh 16 cuda:0            # a GPU
#
# The phases are `tfg run --verbose`'s: parse, build the graph, the
# training step (autodiff, strategy), the graph passes and placement, the
# plan and its validation, and "started the devices" (memory, streams,
# param and optimizer-state initialization). Each line tfg writes is
# stamped with the wall clock as it arrives: "launch to first step" runs
# from just before the process starts to the line that ends the start-up
# (so it includes process start and everything outside the phases), and
# "first step" from there to the first step's progress line; the run is
# then stopped (the evaluation after the train is not part of this). The
# batch is 1: the parameters, their initialization and the plan's shape
# are the full model's, and the one step stays short on a CPU. Runs twice
# (the first warms the page cache) and reports the second. A benchmark,
# not a test.
set -eu
cd "$(dirname "$0")/.."
THREADS=${1:-$(nproc)}
DEVICES=${2:-}
TFG=${TFG:-build/tfg}
. bench/lib.sh # bench_python
PY=$(bench_python)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$PY examples/data/make_text_windows.py --window 257 --stride 32 examples/data/constitution.txt "$tmp/w257.npy" >/dev/null
dev=""
[ -n "$DEVICES" ] && dev="--devices $DEVICES"

# run LOG: one run, its stderr lines stamped "SECONDS LINE" into LOG, the
# first line "START" stamped just before the launch; stopped after step 1.
run() {
  rm -f "$tmp/err"
  mkfifo "$tmp/err"
  echo "$(date +%s.%N) START" >"$1"
  # shellcheck disable=SC2086 # $dev is an option list
  "$TFG" run --threads "$THREADS" $dev --verbose --set windows="\"$tmp/w257.npy\"" --set window=257 \
    --set d=768 --set layers=12 --set heads=12 --set T=256 --set batch=1 --set steps=1 --set log_every=1 \
    examples/gpt.tfg >/dev/null 2>"$tmp/err" &
  pid=$!
  while IFS= read -r line; do
    echo "$(date +%s.%N) $line" >>"$1"
    case $line in "step 1/"*) kill "$pid" 2>/dev/null || true; break ;; esac
  done <"$tmp/err"
  wait "$pid" 2>/dev/null || true
}
run "$tmp/warm"
run "$tmp/log"
awk -v threads="$THREADS" -v dev="${DEVICES:-default}" '
  NR == 1 { start = $1; next }
  # "tfg: PHASE (12.3 ms)": the phase and its milliseconds
  / ms\)$/ && $2 == "tfg:" {
    ms = $(NF - 1); sub(/^\(/, "", ms)
    what = $0; sub(/^[0-9.]+ tfg: /, "", what); sub(/ \([0-9.]+ ms\)$/, "", what); sub(/:.*/, "", what)
    n++; name[n] = what; t[n] = ms; sum += ms
    if (what ~ /^started the devices/) ready = $1
  }
  $2 == "step" && $3 ~ /^1\// { stepped = $1 }
  END {
    if (ready == "" || stepped == "") { print "startup: the run did not reach its first step"; exit 1 }
    printf "startup gpt 85M threads=%s devices=%s\n", threads, dev
    for (i = 1; i <= n; i++) printf "  %-48s %9.1f ms\n", name[i], t[i]
    total = (ready - start) * 1000
    printf "  %-48s %9.1f ms\n", "outside the phases (process start...)", total - sum
    printf "launch to first step %.1f ms\n", total
    printf "first step %.1f ms\n", (stepped - ready) * 1000
  }' "$tmp/log"
