#!/bin/sh
# bench/gpu/run.sh [BUILD]: tfg and PyTorch side by side on the same GPU.
#
#   make all bench-build && sh bench/gpu/run.sh
#
#   1. matmul 4096 and 8192 in f32, tf32 and bf16: tfg's matmul kernel
#      through the CUDA backend (build/bench/gpu/gpubench) against
#      torch.matmul
#   2. relu(x * a + b) over 256M floats: tfg's fused chain (one FUSED
#      launch) and unfused (three launches), against PyTorch eager (and
#      torch.compile when it works), all as bandwidth next to a
#      device-to-device copy of the same bytes and the GPU's peak from
#      tfg's planning table
#   3. a training step of the digits MLP (bench/mlp_digits.tfg, 64-256-10,
#      batch 32) and of the wide one (bench/mlp_wide.tfg, 784-1024-1024-10,
#      batch 128) with --devices cuda:0 (CUDA Graphs on, the default, and
#      off: TFG_CUDA_GRAPHS=0), against PyTorch eager and the whole step
#      captured in a CUDA graph (bench/gpu/torch_bench.py)
#   4. the all-reduce of two logical devices on one GPU (cuda:0*2), the
#      shared one (what mirrored uses there) and the ring, against a
#      device-to-device copy of the same bytes
#   4b. causal f32 attention at the GPT's shape (16 x 12 heads of 256 x
#      64), the forward and the whole gradient, with the tiled kernels and
#      the reference ones, against scaled_dot_product_attention and the
#      math form
#   5. a training step (AdamW, cosine lr, clipping) of the byte-level GPT
#      of examples/gpt.tfg at 12 layers, d 768, 12 heads, T 256, batch 16
#      (85M params) with --devices cuda:0 (f32 with the graph passes off
#      with TFG_OPT=0, on, and on with --tf32; then precision = bf16),
#      against the same model in PyTorch on the GPU (bench/pytorch_gpt.py
#      --device cuda): eager with tfg's unfused attention math, eager and
#      torch.compile'd with scaled_dot_product_attention, in f32, in TF32
#      and under bf16 autocast; about six minutes of GPU time
#   6. the same GPT (6 layers) as a pipeline of two stages on the two
#      logical devices of one GPU (cuda:0*2, parallel(pipeline = 2),
#      f32): one micro-batch (the stages one after the other, as model
#      parallelism without a pipeline) against 8 micro-batches under
#      1f1b, step time and the ratio (one GPU's two logical devices share
#      its SMs, so the gain is what overlapping their launches gives)
#
# Output goes to the terminal and to bench/results/gpu-DEVICE-DATE.txt
# (DEVICE: nvidia-smi's name with dashes for spaces). Timings are medians
# of samples after warm-up (see gpubench.c and torch_bench.py); ratios are
# tfg / PyTorch time (below 1: tfg is faster). A benchmark, not a test.
# Without a GPU it prints one line and exits 2; without PyTorch it runs
# tfg's side and says so.
set -u
cd "$(dirname "$0")/../.." || exit 2
. bench/lib.sh # tfg_trained
BUILD=${1:-build}
GB=$BUILD/bench/gpu/gpubench
TFG=${TFG:-$BUILD/tfg}
PY=${PYTHON:-python3}

name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
if [ -z "$name" ]; then
  echo "bench/gpu/run.sh: no GPU (nvidia-smi finds none)"
  exit 2
fi
if [ ! -x "$GB" ] || [ ! -x "$TFG" ]; then
  echo "bench/gpu/run.sh: $GB or $TFG is missing: make all bench-build"
  exit 2
fi
if ! info=$("$GB" info 2>&1); then
  echo "bench/gpu/run.sh: $(echo "$info" | tail -1)"
  exit 2
fi
device=$(echo "$name" | tr ' ' '-')
mkdir -p bench/results
out="bench/results/gpu-$device-$(date +%Y-%m-%d).txt"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# val LINE KEY: the value of KEY=VALUE in LINE
val() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
# ratio WHAT A B: "ratio WHAT tfg/torch A/B" when both are numbers
ratio() {
  case "$2$3" in *[!0-9.]*|'') echo "ratio $1: n/a" ;; *) awk -v a="$2" -v b="$3" -v w="$1" 'BEGIN { printf "ratio %s tfg/torch %.2f\n", w, a / b }' ;; esac
}
# torch ARGS...: one torch_bench.py run, or nothing when PyTorch is missing
torch() { [ "$have_torch" = 1 ] && $PY bench/gpu/torch_bench.py "$@" 2>&1 | grep '^torch'; }

# tfg's training step in ms (bench/lib.sh's tfg_trained: the whole train
# loop over the steps, after one untimed run). tfg_step_ms on|off
# ARGS...: CUDA Graphs on (the default) or off (TFG_CUDA_GRAPHS=0).
tfg_step_ms() {
  graphs=$1
  shift
  if [ "$graphs" = off ]; then set -- env TFG_CUDA_GRAPHS=0 "$TFG" run "$@"; else set -- "$TFG" run "$@"; fi
  tfg_trained "$@" | awk '{ if ($2 > 0) printf "%.4f", 1000 * $2 / $1; else printf "n/a" } END { if (NR == 0) printf "n/a" }'
}

# shellcheck disable=SC2086 # $digits and $wide are option lists, split into words on purpose
main() {
  echo "# bench/gpu/run.sh on $(hostname) $(date -u '+%Y-%m-%d %H:%M UTC')"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.memory,power.limit --format=csv 2>&1 |
    sed 's/^/# /'
  echo "# $("$TFG" version 2>&1 | tr '\n' ' ')"
  echo "# $info"
  have_torch=0
  if t=$($PY bench/gpu/torch_bench.py info 2>&1); then
    have_torch=1
    echo "# $t"
  else
    echo "# pytorch: not available ($t); tfg's side only"
  fi

  echo
  echo "## 1. matmul (C = A @ B, n x n, random in [-1, 1))"
  for n in 4096 8192; do
    for dt in f32 tf32 bf16; do
      a=$("$GB" matmul "$n" "$dt" 2>&1 | tail -1)
      b=$(torch matmul "$n" "$dt")
      echo "$a"
      [ -n "$b" ] && echo "$b" && ratio "matmul $n $dt" "$(val "$a" ms)" "$(val "$b" ms)"
    done
  done

  echo
  echo "## 2. relu(x * a + b) over 256M f32 (bandwidth = 8 bytes per element / time)"
  "$GB" chain 2>&1 | tee "$tmp/chain"
  torch chain | tee "$tmp/tchain"
  fused=$(grep 'mode=fused ms=' "$tmp/chain")
  eager=$(grep 'mode=eager' "$tmp/tchain")
  compiled=$(grep 'mode=compiled ms=' "$tmp/tchain")
  [ -n "$fused" ] && [ -n "$eager" ] && ratio "chain fused/eager" "$(val "$fused" ms)" "$(val "$eager" ms)"
  [ -n "$fused" ] && [ -n "$compiled" ] && ratio "chain fused/compiled" "$(val "$fused" ms)" "$(val "$compiled" ms)"
  # the chain as a kernel of its own, generated and compiled by NVRTC (TFG_NVRTC=1)
  nvrtc=$(TFG_NVRTC=1 TFG_CACHE_DIR="$tmp/cache" "$GB" chain 2>&1 | grep 'mode=fused ms=' | sed 's/mode=fused/mode=fused-nvrtc/')
  echo "${nvrtc:-tfg chain mode=fused-nvrtc: no result}"
  [ -n "$nvrtc" ] && [ -n "$compiled" ] && ratio "chain fused-nvrtc/compiled" "$(val "$nvrtc" ms)" "$(val "$compiled" ms)"

  echo
  echo "## 3. one training step (Adam), --devices cuda:0"
  $PY bench/make_batch.py "$tmp"
  digits="--devices cuda:0 --set steps=5000 bench/mlp_digits.tfg"
  wide="--devices cuda:0 --set steps=2000 --feed x=$tmp/x.npy --feed y=$tmp/y.npy bench/mlp_wide.tfg"
  d=$(tfg_step_ms on $digits)
  d0=$(tfg_step_ms off $digits)
  w=$(tfg_step_ms on $wide)
  w0=$(tfg_step_ms off $wide)
  echo "tfg mlp model=digits mode=graphs batch=32 step_ms=$d"
  echo "tfg mlp model=digits mode=no-graphs batch=32 step_ms=$d0"
  echo "tfg mlp model=wide mode=graphs batch=128 step_ms=$w"
  echo "tfg mlp model=wide mode=no-graphs batch=128 step_ms=$w0"
  for model in digits wide; do
    torch mlp "$model" | tee "$tmp/t_$model"
    mine=$([ "$model" = digits ] && echo "$d" || echo "$w")
    for mode in eager graphed; do
      line=$(grep "mode=$mode " "$tmp/t_$model")
      [ -n "$line" ] && ratio "mlp $model tfg/torch-$mode" "$mine" "$(val "$line" step_ms)"
    done
  done

  echo
  echo "## 4. all-reduce over two logical devices of one GPU (cuda:0*2)"
  "$GB" allreduce 2>&1

  echo
  echo "## 4b. causal f32 attention at the GPT's shape (b 16, h 12, t 256, hd 64): forward and gradient"
  "$GB" attention 16 12 256 64 2>&1 | tee "$tmp/att"
  torch attention 16 12 256 64 | tee "$tmp/tatt"
  for pass in forward backward; do
    mine=$(grep "pass=$pass kernel=tiled" "$tmp/att")
    theirs=$(grep "pass=$pass kernel=sdpa" "$tmp/tatt")
    [ -n "$mine" ] && [ -n "$theirs" ] && ratio "attention $pass tiled/sdpa" "$(val "$mine" ms)" "$(val "$theirs" ms)"
  done

  echo
  echo "## 5. GPT training step (AdamW), 12 layers, d 768, 12 heads, T 256, batch 16, --devices cuda:0"
  gpt_step

  echo
  echo "## 6. GPT as two pipeline stages on cuda:0*2, 6 layers, d 768, T 256, batch 16, f32"
  pipe_step
}

# Section 6: tfg's step as in section 5 (runs of S and 2S steps), the
# train block given the pipeline's settings.
pipe_step() {
  [ -f "$tmp/w257.npy" ] || { echo "pipeline: no windows of 257 bytes (section 5 makes them); skipped"; return; }
  S=10
  naive=""
  for m in 1 8; do
    sed -e "s|^  seed = 0|  seed = 0\n  strategy = parallel(pipeline = 2)\n  micro_batches = $m|" examples/gpt.tfg >"$tmp/pipe.tfg"
    # shellcheck disable=SC2089
    popts="--devices cuda:0*2 --set windows=\"$tmp/w257.npy\" --set window=257 --set d=768 --set layers=6 --set heads=12 --set T=256 --set batch=16 --set precision=f32"
    # shellcheck disable=SC2086,SC2090
    pipe_s() { "$TFG" run $popts --set steps="$1" --set log_every="$1" "$tmp/pipe.tfg" 2>&1 >/dev/null | awk '/^trained/ { print $5; exit }'; }
    pipe_s "$S" >/dev/null
    t1=$(pipe_s "$S")
    t2=$(pipe_s $((2 * S)))
    g=$(awk -v a="$t1" -v b="$t2" -v s="$S" 'BEGIN { if (a != "" && b != "") printf "%.4f", 1000 * (b - a) / s; else printf "n/a" }')
    echo "tfg pipeline stages=2 micro_batches=$m schedule=1f1b devices=cuda:0*2 step_ms=$g (runs of $S and $((2 * S)) steps: $t1 s, $t2 s)"
    [ "$m" = 1 ] && naive=$g
  done
  awk -v a="$g" -v b="$naive" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "ratio pipeline m=8/naive step time %.3f\n", a / b }'
}

# Section 5. tfg's step is the difference of two runs of its train loop, of
# S and 2S steps, over S (start-up, the first step and the final evaluation
# cancel out; bench/train_gpt.sh does the same on the CPU), after one
# untimed run; PyTorch's is the median of its per-step times, each ended by
# torch.cuda.synchronize().
gpt_step() {
  if ! $PY examples/data/make_text_windows.py --window 257 --stride 32 \
    examples/data/constitution.txt "$tmp/w257.npy" >/dev/null; then
    echo "gpt: cannot make the windows of 257 bytes; skipped"
    return
  fi
  # the quotes around the path are tfg's: --set's value is a tfg expression, a string
  # shellcheck disable=SC2089
  gopts="--devices cuda:0 --set windows=\"$tmp/w257.npy\" --set window=257 --set d=768 --set layers=12 --set heads=12 --set T=256 --set batch=16"
  S=20
  extra=""
  # shellcheck disable=SC2086,SC2090 # $gopts and $extra are option lists, their quotes tfg's
  gpt_s() { "$TFG" run $gopts $extra --set steps="$1" --set log_every="$1" examples/gpt.tfg 2>&1 >/dev/null | awk '/^trained/ { print $5; exit }'; }
  # the graph passes off (TFG_OPT=0) first, then on (the default): the gain
  # side by side; then with TF32 tensor cores (--tf32); all with f32
  # products; then gpt.tfg's own precision, bf16
  for mode in opt0 f32 tf32 bf16; do
    extra="--set precision=f32"
    case $mode in opt0) export TFG_OPT=0 ;; tf32) extra="$extra --tf32" ;; bf16) extra="--set precision=bf16" ;; esac
    gpt_s "$S" >/dev/null
    t1=$(gpt_s "$S")
    t2=$(gpt_s $((2 * S)))
    g=$(awk -v a="$t1" -v b="$t2" -v s="$S" 'BEGIN { if (a != "" && b != "") printf "%.4f", 1000 * (b - a) / s; else printf "n/a" }')
    echo "tfg gpt mode=graphs-$mode d=768 layers=12 heads=12 T=256 batch=16 step_ms=$g tokens_per_s=$(awk -v g="$g" 'BEGIN { if (g + 0 > 0) printf "%.0f", 16 * 256 * 1000 / g; else printf "n/a" }') (runs of $S and $((2 * S)) steps: $t1 s, $t2 s)"
    unset TFG_OPT
    case $mode in f32) g32=$g ;; tf32) g_tf32=$g ;; bf16) g_bf16=$g ;; esac
  done
  [ "$have_torch" = 1 ] || return
  # PyTorch: eager with tfg's unfused math, eager and compiled with
  # scaled_dot_product_attention; f32, then TF32, then bf16 autocast
  for prec in f32 tf32 bf16; do
    for how in "--attention math" "--attention sdpa" "--attention sdpa --compile"; do
      flag=""
      [ "$prec" = tf32 ] && flag="--tf32"
      [ "$prec" = bf16 ] && flag="--precision bf16"
      # shellcheck disable=SC2086 # $how and $flag are option lists
      line=$($PY bench/pytorch_gpt.py --device cuda --d 768 --layers 12 --heads 12 --T 256 --batch 16 --steps 30 --warmup 5 $how $flag 2>&1 | grep '^pytorch')
      echo "${line:-pytorch gpt $how $flag: failed}"
      [ -n "$line" ] || continue
      mine=$g32
      [ "$prec" = tf32 ] && mine=$g_tf32
      [ "$prec" = bf16 ] && mine=$g_bf16
      ratio "gpt $prec tfg/torch-$(val "$line" mode)" "$mine" "$(val "$line" step_ms)"
    done
  done
}

main 2>&1 | tee "$out"
echo "results: $out"
