#!/bin/sh
# tests/gpu/run.sh BUILD: the GPU tests (`make test-gpu`), against the
# binaries in BUILD (default build):
#
#   1. the conformance suite (BUILD/tests/gpu/conformance, from
#      tests/gpu/conformance.c): every op's CUDA kernel against its CPU
#      kernel; its full output is kept in BUILD/tests/gpu/conformance.txt,
#      failures and its summary are shown here
#   2. training end to end with build/tfg on cuda:0 (20 steps of the
#      digits MLP, checkpoints compared by tests/ckpt_compare.py):
#      mirrored on two logical devices of one GPU (cuda:0*2) equals one GPU,
#      dropout included; one GPU equals the CPU; a run with CUDA Graphs
#      equals one without (TFG_CUDA_GRAPHS=0) bit for bit
#   3. out of memory: the runtime's report (BUILD/tests/gpu/oom, from
#      tests/gpu/oom.c) and the planner's located error from the command
#      line; a kernel's data error (a label past the classes) found on the
#      GPU ends the run with exit 3 and a located message
#   4. on a machine with one GPU, a program naming gpu:1 is told to use
#      --devices cuda:0*2, and runs with it
#   5. f16 and bf16 params train on cuda:0 and mirrored on cuda:0*2
#   6. a pipeline of two stages (parallel(pipeline = 2), each schedule) on
#      cuda:0*2 equals one GPU, and gpipe and 1f1b give the same bytes
#
# Without a GPU (no driver, no device, or a build without CUDA) it prints
# one line, "SKIP: no CUDA device (REASON)", and exits 0. Otherwise it
# ends with "tests-gpu: N passed, M failed" and exits 1 if M > 0.
set -u
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
bin() { if [ -x "$ROOT/$BUILD/$1" ]; then echo "$ROOT/$BUILD/$1"; else echo "$BUILD/$1"; fi; }
TFG=$(bin tfg)
CONF=$(bin tests/gpu/conformance)
OOM=$(bin tests/gpu/oom)
PY=python3
. "$ROOT/tests/lib.sh" # pass, fail, $tmp, ok, ko, expect, contains, mlp_program
suite=gpu
for b in "$TFG" "$CONF" "$OOM"; do
  if [ ! -x "$b" ]; then
    echo "tests/gpu/run.sh: $b is missing (make all test-gpu builds it)" >&2
    exit 2
  fi
done

# ---- 1. conformance ------------------------------------------------------------
# Its first line says whether there is a GPU at all: a SKIP ends everything.
log="$(dirname "$CONF")/conformance.txt"
"$CONF" >"$log" 2>&1
rc=$?
if grep -q '^SKIP: ' "$log"; then
  grep '^SKIP: ' "$log" | head -1
  exit 0
fi
grep '^FAIL' "$log" | head -50
summary=$(grep '^conformance: [0-9]* cases' "$log" | tail -1)
if [ -z "$summary" ]; then
  ko "conformance did not run to completion (exit $rc); the end of $log:"
  tail -5 "$log"
else
  echo "$summary"
  p=$(echo "$summary" | sed -E 's/.*: ([0-9]+) passed.*/\1/')
  f=$(echo "$summary" | sed -E 's/.* ([0-9]+) failed.*/\1/')
  pass=$((pass + p))
  fail=$((fail + f))
  [ "$rc" -eq 0 ] || [ "$f" -gt 0 ] || ko "conformance exited $rc with no failed case"
fi

# ---- helpers (and tests/lib.sh's) ------------------------------------------------
# same NAME A B TOL: the checkpoints A and B hold the same tensors within TOL
# (relative, tests/ckpt_compare.py; 0 is bit for bit)
same() {
  if $PY "$ROOT/tests/ckpt_compare.py" "$2.safetensors" "$3.safetensors" "$4" >"$tmp/cmp" 2>&1; then
    ok; echo "gpu $1: $(cat "$tmp/cmp")"
  else
    ko "gpu $1: $(cat "$tmp/cmp")"
  fi
}

# ---- 2. training end to end ------------------------------------------------------
# The digits MLP of tests/strategies.sh (tests/lib.sh's mlp_program), 20
# steps of batch 16.

# Mirrored on two logical devices of one GPU equals one GPU, within 2e-5
# relative, the tolerance of tests/strategies.sh and for its reasons: each
# replica sums its 8 rows' gradients and the all-reduce adds the two sums,
# another order than one device's sum over 16 rows (~1e-7 relative per
# step, which 20 steps of Adam, dividing by the gradients' running RMS,
# carry to a few 1e-6); on a GPU the products of 8 and of 16 rows may also
# take different cuBLAS algorithms, which is another order again, of the
# same size. A wrong split, a missing mean or a replica out of step is off
# by 1e-3 and more. Dropout: each replica draws its rows' part of the
# whole batch's mask (attrs.start), so the result is the one-device one.
for opt in "sgd(lr = 0.1, momentum = 0.9)" "adam(lr = 1e-2)"; do
  tag=$(echo "$opt" | cut -c1-3)
  mlp_program "$tmp/one_$tag" "$opt" ""
  mlp_program "$tmp/two_$tag" "$opt" "mirrored([gpu:0, gpu:1])"
  expect "one-gpu-$tag" 0 "$TFG" run --devices cuda:0 "$tmp/one_$tag.tfg" &&
    expect "mirrored-$tag" 0 "$TFG" run --devices 'cuda:0*2' "$tmp/two_$tag.tfg" &&
    same "mirrored-$tag" "$tmp/two_$tag" "$tmp/one_$tag" 2e-5
done
mlp_program "$tmp/drop1" "adam(lr = 1e-2)" "" dropout
mlp_program "$tmp/drop2" "adam(lr = 1e-2)" "mirrored([gpu:0, gpu:1])" dropout
expect dropout-one 0 "$TFG" run --devices cuda:0 "$tmp/drop1.tfg" &&
  expect dropout-mirrored 0 "$TFG" run --devices 'cuda:0*2' "$tmp/drop2.tfg" &&
  same dropout-mirrored "$tmp/drop2" "$tmp/drop1" 2e-5

# A pipeline of two stages on the two logical devices of one GPU
# equals one GPU within the same 2e-5 (the micro-batches' gradients are
# summed and divided by their count where one GPU sums all the rows at
# once: the order, as with mirrored's replicas); gpipe and 1f1b sum the
# same micro-batches in the same order, so they give the same bytes.
mlp_program "$tmp/pipe1" "adam(lr = 1e-2)" ""
expect pipeline-one 0 "$TFG" run --devices cuda:0 "$tmp/pipe1.tfg"
for sched in gpipe 1f1b "interleaved(chunks = 2)"; do
  tag=$(echo "$sched" | cut -c1-5)
  mlp_program "$tmp/pipe_$tag" "adam(lr = 1e-2)" "parallel(pipeline = 2); micro_batches = 4; schedule = $sched"
  expect "pipeline-$tag" 0 "$TFG" run --devices 'cuda:0*2' "$tmp/pipe_$tag.tfg" &&
    same "pipeline-$tag" "$tmp/pipe_$tag" "$tmp/pipe1" 2e-5
done
if cmp -s "$tmp/pipe_gpipe.safetensors" "$tmp/pipe_1f1b.safetensors"; then ok
else ko "pipeline: gpipe and 1f1b differ on cuda:0*2"; fi

# One GPU equals the CPU (a host device running the CPU kernels), within
# the same 2e-5: sums in another order (cuBLAS against OpenBLAS, a GPU's
# reductions against the CPU's double accumulators) and exp and log within
# a few ulp of glibc's, each ~1e-7 relative per step (the conformance
# suite's bounds), carried by Adam as above. Dropout's mask is the same
# counter stream on both.
cp "$tmp/one_ada.tfg" "$tmp/cpu_ada.tfg"
sed -i "s|one_ada.safetensors|cpu_ada.safetensors|" "$tmp/cpu_ada.tfg"
cp "$tmp/drop1.tfg" "$tmp/cpu_drop.tfg"
sed -i "s|drop1.safetensors|cpu_drop.safetensors|" "$tmp/cpu_drop.tfg"
expect cpu-adam 0 "$TFG" run --devices host "$tmp/cpu_ada.tfg" && same gpu-equals-cpu "$tmp/one_ada" "$tmp/cpu_ada" 2e-5
expect cpu-dropout 0 "$TFG" run --devices host "$tmp/cpu_drop.tfg" &&
  same gpu-equals-cpu-dropout "$tmp/drop1" "$tmp/cpu_drop" 2e-5

# CUDA Graphs: a captured step replays the very kernels with the very
# arguments, so a run with graphs (the default) must equal one without
# (TFG_CUDA_GRAPHS=0) bit for bit (tolerance 0). That holds only if the
# kernels are deterministic (no atomics whose order varies), which the
# first comparison checks on its own: two runs without graphs. On one GPU
# and on two logical devices (the all-reduce inside the graph).
for which in one two; do
  if [ "$which" = one ]; then devs=cuda:0; else devs='cuda:0*2'; fi
  for run in nograph1 nograph2 graph; do
    sed "s|${which}_ada.safetensors|${which}_$run.safetensors|" "$tmp/${which}_ada.tfg" >"$tmp/${which}_$run.tfg"
  done
  expect "graphs-off-$which" 0 env TFG_CUDA_GRAPHS=0 "$TFG" run --devices "$devs" "$tmp/${which}_nograph1.tfg" &&
    expect "graphs-off-again-$which" 0 env TFG_CUDA_GRAPHS=0 "$TFG" run --devices "$devs" "$tmp/${which}_nograph2.tfg" &&
    same "deterministic-$which" "$tmp/${which}_nograph2" "$tmp/${which}_nograph1" 0
  # ...and the run with graphs did replay: 19 of its 20 steps (the first
  # warms up), and no capture was refused (a warning)
  expect "graphs-on-$which" 0 env -u TFG_CUDA_GRAPHS "$TFG" run --devices "$devs" "$tmp/${which}_graph.tfg" &&
    same "graphs-replay-$which" "$tmp/${which}_graph" "$tmp/${which}_nograph1" 0 &&
    contains "graphs-replayed-$which" "$tmp/err" "(19 replayed from a captured graph)"
  if grep -q "without CUDA Graphs" "$tmp/err"; then ko "gpu graphs-$which: $(grep 'without CUDA Graphs' "$tmp/err")"; else ok; fi
done

# ---- 3. out of memory, data errors -------------------------------------------------
# The runtime's OOM: see tests/gpu/oom.c (the planner catches every OOM
# the command line can cause, so it lowers the device after planning).
"$OOM" >"$tmp/oom" 2>&1
rc=$?
cat "$tmp/oom"
if [ "$rc" -eq 0 ] && grep -q '^PASS' "$tmp/oom"; then ok; else ko "gpu oom-runtime: exit $rc"; fi

# The planner's: a 128 MiB product on a GPU capped at 64 MiB (every device
# capped, so the placer cannot move it to cpu:0) is an error at its line
# naming the device and the bytes; nothing runs (exit 1).
printf 'x = ones([4096, 1])\ny = ones([1, 8192])\nz = matmul(x, y)\nprint sum(z)\n' >"$tmp/oom.tfg"
expect oom-plan 1 "$TFG" run --devices cuda:0:64M --memory-limit 64M --color=never "$tmp/oom.tfg" &&
  contains oom-plan "$tmp/err" "oom.tfg:3:5: error: out of memory on gpu:0: matmul needs 128.0 MiB"

# A label past the classes, found by the GPU kernel (kernels/cuda/cuda.h:
# tfg_cuda_flag) and read at the next synchronize: exit 3, the op, its
# device, the value and the train action's line, as on the CPU.
printf '1,2,3,4,1\n2,3,4,5,12\n3,4,5,6,2\n4,5,6,7,3\n' >"$tmp/bad.csv"
{
  echo "import nn"
  echo "data d = csv(\"$tmp/bad.csv\", label = -1)"
  echo "input x: f32[4, 4] from d.x"
  echo "input y: i32[4] from d.y"
  echo "logits = nn.dense(x, 10, act = nn.identity)"
  echo "train cross_entropy(logits, y) { optimizer = sgd(lr = 0.1); steps = 2 }"
} >"$tmp/bad.tfg"
expect data-error 3 "$TFG" run --devices cuda:0 --color=never "$tmp/bad.tfg" &&
  contains data-error "$tmp/err" "bad.tfg:6:7: error: cross_entropy on gpu:0 failed" &&
  contains data-error-value "$tmp/err" "label 12"

# ---- 4. one GPU, a program naming two -------------------------------------------------
# With the default devices (every physical GPU, one logical device each) a
# program that names gpu:1 on a one-GPU machine is told first to split the
# GPU into logical devices (CLI.md), and that advice then runs.
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
printf '@gpu:0 a = ones([2, 2])\n@gpu:1 b = a * 2.0\nprint b\n' >"$tmp/two.tfg"
if [ "$ngpu" = 1 ]; then
  expect one-gpu-hint 1 "$TFG" run --color=never "$tmp/two.tfg" &&
    contains one-gpu-hint "$tmp/err" "--devices cuda:0*2 (2 logical devices sharing" &&
    contains one-gpu-hint-host "$tmp/err" "or --devices host*2 (emulated on the CPU)"
  expect one-gpu-hint-taken 0 "$TFG" run --devices 'cuda:0*2' --color=never "$tmp/two.tfg" &&
    contains one-gpu-hint-taken "$tmp/out" "b: f32[2,2] @gpu:1"
fi

# ---- 5. f16 and bf16 training on a GPU ----------------------------------------------------
# 16-bit params and loss train on cuda:0, alone and mirrored over two
# logical devices (16-bit gradients all-reduced): the loss falls.
for dt in f16 bf16; do
  for devs in cuda:0 'cuda:0*2'; do
    strategy=single
    [ "$devs" = cuda:0 ] || strategy='mirrored([gpu:0, gpu:1])'
    {
      echo "param w: $dt[4, 3] = normal(seed = 1)"
      echo "x0 = cast(tensor([[1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 0.25, 2.0]]), $dt)"
      echo "y = matmul(x0, w)"
      echo "train mean(sqrt(y * y)) { optimizer = adam(lr = 0.01); steps = 40; log_every = 20; strategy = $strategy }"
    } >"$tmp/h16.tfg"
    if expect "train-$dt-$devs" 0 "$TFG" run --devices "$devs" --color=never "$tmp/h16.tfg"; then
      first=$(sed -n 's/^step 20\/40  loss \([0-9.]*\).*/\1/p' "$tmp/err")
      last=$(sed -n 's/^step 40\/40  loss \([0-9.]*\).*/\1/p' "$tmp/err")
      if [ -n "$first" ] && [ -n "$last" ] && awk "BEGIN { exit !($last < $first) }"; then ok; else
        ko "gpu train-$dt-$devs: the loss did not fall ($first then $last)"
      fi
    fi
  done
done

echo "tests-gpu: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
