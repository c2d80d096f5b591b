#!/bin/sh
# bench/train_pipeline.sh [THREADS] [STEPS]: the byte-level GPT of
# examples/gpt.tfg (d 256, 4 layers, 4 heads, T 128, batch 16, f32 products)
# on host*2 cut into two stages (parallel(pipeline = 2)), run naively (one
# micro-batch: each stage waits while the other computes, as model
# parallelism without a pipeline does) and as pipelines of 4, 8 and 16
# micro-batches under each schedule. Per run: steps per second (from the
# log's seconds column, the first step left out) and the ratio to the
# naive run, the bubble measured on the trace of a second run (per stage
# device: the part of each step's span, its first labelled launch to its
# last backward, that the compute track did not run a launch) against
# the one plan --predict gives, and each stage's planned peak memory.
#
#   make && sh bench/train_pipeline.sh 2
#
# A benchmark, not a test: numbers depend on the machine and its load.
set -eu
cd "$(dirname "$0")/.."
THREADS=${1:-$(nproc)}
STEPS=${2:-8}
TFG=${TFG:-build/tfg}
ROOT=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=$THREADS

# gpt.tfg with the strategy's settings in its train block
program() { # program FILE MICRO SCHEDULE
  sed -e "s|^  seed = 0|  seed = 0\n  strategy = parallel(pipeline = 2)\n  micro_batches = $2\n  schedule = $3|" \
    examples/gpt.tfg >"$1"
}
size() {
  echo --set d=256 --set layers=4 --set heads=4 --set T=128 --set batch=16 --set precision=f32 \
    --set steps="$1" --set log_every=1 --set warmup=1 --set decay="$1" \
    --set "windows=\"$ROOT/examples/data/constitution.npy\"" --set "log_file=\"$tmp/log.csv\""
}
# steps/s over the logged steps after the first
rate() { awk -F, 'NR == 2 { t0 = $NF; s0 = $1 } NR > 2 { t = $NF; s = $1 } END { if (t > t0) printf "%.3f", (s - s0) / (t - t0) }' "$tmp/log.csv"; }
# the measured bubble of gpu:0 and gpu:1 on a trace: per step, the span
# from the first labelled launch to the last backward on the two compute
# tracks, less each track's launches in it; the mean over the steps after
# the first
bubble() {
  python3 - "$1" <<'EOF'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "op" and e["pid"] in (1, 2) and e["tid"] == 0]
ev.sort(key=lambda e: e["ts"])
steps, cur = [], []
for e in ev:  # a step ends at its updates
    if e["name"].endswith("_update"):
        if cur: steps.append(cur)
        cur = []
    elif e["name"].startswith(("fwd ", "bwd ")):
        cur.append(e)
out = []
for pid in (1, 2):
    fr = []
    for st in steps[1:]:
        lo = min(e["ts"] for e in st)
        hi = max(e["ts"] + e["dur"] for e in st)
        busy = sum(e["dur"] for e in st if e["pid"] == pid)
        fr.append(1 - busy / (hi - lo))
    out.append("%.1f%%" % (100 * sum(fr) / len(fr)) if fr else "-")
print(" ".join(out))
EOF
}
predicted() { # the bubble column of gpu:0 and gpu:1
  "$TFG" plan --predict --threads "$THREADS" --devices host*2 $(size "$STEPS") "$1" 2>/dev/null |
    awk '$1 == "gpu:0" || $1 == "gpu:1" { printf "%s ", $NF }'
}
peaks() { # planned peak of gpu:0 and gpu:1
  "$TFG" plan --json --devices host*2 $(size "$STEPS") "$1" 2>/dev/null |
    python3 -c 'import json, sys; d = {x["name"]: x["peak_bytes"] for x in json.load(sys.stdin)["devices"]}; print("%.1f/%.1f MiB" % (d["gpu:0"] / 2**20, d["gpu:1"] / 2**20))'
}

echo "bench/train_pipeline.sh: GPT d 256, 4 layers, T 128, batch 16 on host*2, $THREADS threads, $STEPS steps"
printf '%-22s %9s %7s %17s %17s %17s\n' run steps/s ratio "bubble measured" "bubble predicted" "peak gpu:0/gpu:1"
base=
for run in "naive:1:1f1b" "gpipe:4:gpipe" "gpipe:8:gpipe" "gpipe:16:gpipe" "1f1b:4:1f1b" "1f1b:8:1f1b" "1f1b:16:1f1b" \
  "interleaved:4:interleaved(chunks = 2)" "interleaved:8:interleaved(chunks = 2)" "interleaved:16:interleaved(chunks = 2)"; do
  name=${run%%:*} rest=${run#*:} m=${rest%%:*} sched=${rest#*:}
  program "$tmp/p.tfg" "$m" "$sched"
  "$TFG" run --quiet --threads "$THREADS" --devices host*2 $(size 2) "$tmp/p.tfg" >/dev/null 2>&1 # warm-up
  "$TFG" run --quiet --threads "$THREADS" --devices host*2 $(size "$STEPS") "$tmp/p.tfg" >/dev/null 2>&1
  r=$(rate)
  [ -z "$base" ] && base=$r
  "$TFG" run --quiet --threads "$THREADS" --devices host*2 --trace "$tmp/t.json" $(size 4) "$tmp/p.tfg" >/dev/null 2>&1
  printf '%-22s %9s %7s %17s %17s %17s\n' "$name m=$m" "$r" "$(awk -v r="$r" -v b="$base" 'BEGIN { printf "%.2f", r / b }')" \
    "$(bubble "$tmp/t.json")" "$(predicted "$tmp/p.tfg")" "$(peaks "$tmp/p.tfg")"
done
