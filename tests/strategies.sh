# tests/strategies.sh: the multi-device runtime end to end on host devices
# (issue: executor, all-reduce, strategies, faults, trace), sourced by
# tests/run.sh (it uses expect, contains and mlp_program, tests/lib.sh).
#
# Equality tests train the same model (the digits MLP of mlp_program) for
# 20 steps two ways and compare the checkpoints with
# tests/ckpt_compare.py. The tolerance, 2e-5
# relative, allows f32 sums taken in another order (a replica's gradient
# is a sum over its rows, the all-reduce adds the replicas' in ring
# order): each step's gradients then differ in the last bits (about 1e-7
# relative) and 20 steps of Adam, which divides by the gradient's running
# RMS, carry that to a few 1e-6 at most. A wrong split, a missing mean or
# a replica out of step is off by far more (1e-3 and up).

# same NAME A B: the checkpoints A and B hold the same tensors, within 2e-5
same() {
  if python3 "$ROOT/tests/ckpt_compare.py" "$2.safetensors" "$3.safetensors" 2e-5 >"$tmp/cmp" 2>&1; then ok
  else ko "strategies $1: $(cat "$tmp/cmp")"; fi
}

for opt in "sgd(lr = 0.1, momentum = 0.9)" "adam(lr = 1e-2)"; do
  tag=$(echo "$opt" | cut -c1-3)
  mlp_program "$tmp/single_$tag" "$opt" ""
  expect "single-$tag" 0 "$TFG" run --devices host*4 "$tmp/single_$tag.tfg"
  for n in 1 2 4; do
    case $n in 1) devs="[gpu:0]" ;; 2) devs="[gpu:0, gpu:1]" ;; 4) devs="[gpu:0, gpu:1, gpu:2, gpu:3]" ;; esac
    mlp_program "$tmp/mirrored${n}_$tag" "$opt" "mirrored($devs)"
    expect "mirrored$n-$tag" 0 "$TFG" run --devices host*4 "$tmp/mirrored${n}_$tag.tfg" &&
      same "mirrored$n-$tag" "$tmp/mirrored${n}_$tag" "$tmp/single_$tag"
  done
done

# mirrored() and mirrored(gpu:*) take every GPU entry of the run: on
# host*2 and host*4 they are exactly mirrored([gpu:0, gpu:1]) and
# mirrored([gpu:0 .. gpu:3]) (the same replicas, the same sums, so the
# same bytes); with no --devices and no GPU they ask for one, gpu:0 a
# host device, one replica.
for form in "mirrored()" "mirrored(gpu:*)"; do
  tag=$(echo "$form" | tr -d '()*:')
  mlp_program "$tmp/all_$tag" "adam(lr = 1e-2)" "$form"
  for n in 2 4; do
    rm -f "$tmp/all_$tag.safetensors" # a checkpoint there would be resumed
    expect "mirrored-all-$tag-$n" 0 "$TFG" run --devices host*$n "$tmp/all_$tag.tfg" &&
      if cmp -s "$tmp/all_$tag.safetensors" "$tmp/mirrored${n}_ada.safetensors"; then ok
      else ko "strategies mirrored-all-$tag-$n: $form on host*$n differs from $n named replicas"; fi
  done
done
rm -f "$tmp/all_mirrored.safetensors"
expect mirrored-all-default 0 "$TFG" run "$tmp/all_mirrored.tfg" &&
  contains mirrored-all-default "$tmp/err" "gpu:0 is a host device" &&
  if cmp -s "$tmp/all_mirrored.safetensors" "$tmp/mirrored1_ada.safetensors"; then ok
  else ko "strategies mirrored-all-default: mirrored() alone is not one replica"; fi
expect mirrored-all-uneven 1 "$TFG" run --color=never --devices host*3 "$tmp/all_mirrored.tfg" &&
  contains mirrored-all-uneven "$tmp/err" "mirrored makes 3 replicas here"

# A transformer block (the standard library's: its heads reshape with
# the batch as -1) trains alike alone and mirrored over 2 replicas, each
# of which sees half the batch.
mkdir -p "$tmp/tb"
python3 "$ROOT/bench/make_batch.py" "$tmp/tb" normal 4x8x16
for form in "single()" "mirrored([gpu:0, gpu:1])"; do
  tag=$(echo "$form" | cut -c1-3)
  cat >"$tmp/tb/$tag.tfg" <<EOF
import nn
input x: f32[4, 8, 16]
h = nn.transformer_block(x, 2, 32)
train mean(h * h) { optimizer = adam(lr = 1e-2); steps = 5; strategy = $form; checkpoint = "$tag.safetensors" }
EOF
  expect "transformer-$tag" 0 "$TFG" run --devices host*2 --feed "x=$tmp/tb/x.npy" "$tmp/tb/$tag.tfg"
done
same transformer-mirrored "$tmp/tb/sin" "$tmp/tb/mir"

# accumulate = K: K micro-batches of 16/K rows per step equal one step over
# 16 rows (the same rows: batches follow one another), alone and mirrored
# over two replicas, within the same 2e-5 (the micro-batches' gradients
# are summed, then divided by K: another summation order). Against it, 20
# plain steps of 8 rows are off by far more.
acc_program() { # NAME OPT STRATEGY K: mlp_program's model with batches of 16/K rows
  mlp_program "$1" "$2" "$3"
  b=$((16 / $4))
  sed -i "s/f32\[16, 64\]/f32[$b, 64]/; s/i32\[16\]/i32[$b]/; s/^  steps = 20\$/  steps = 20\n  accumulate = $4/" "$1.tfg"
}
for opt in "sgd(lr = 0.1, momentum = 0.9)" "adam(lr = 1e-2)"; do
  tag=$(echo "$opt" | cut -c1-3)
  for k in 2 4; do
    acc_program "$tmp/acc${k}_$tag" "$opt" "" $k
    expect "accumulate$k-$tag" 0 "$TFG" run --devices host*2 "$tmp/acc${k}_$tag.tfg" &&
      same "accumulate$k-$tag" "$tmp/acc${k}_$tag" "$tmp/single_$tag"
    acc_program "$tmp/accm${k}_$tag" "$opt" "mirrored([gpu:0, gpu:1])" $k
    expect "accumulate$k-mirrored-$tag" 0 "$TFG" run --devices host*2 --profile "$tmp/accm${k}_$tag.tfg" &&
      same "accumulate$k-mirrored-$tag" "$tmp/accm${k}_$tag" "$tmp/single_$tag"
    # one all-reduce per optimizer step: as many as mirrored without accumulation
    grep '^reduce  *collective' "$tmp/err" | awk '{ print $3 }' >"$tmp/acc_reduces_$k"
  done
  grep -q 'accumulate = 4' "$tmp/acc4_$tag.tfg" && grep -q 'f32\[4, 64\]' "$tmp/acc4_$tag.tfg" && ok ||
    ko "strategies accumulate-$tag: the program does not accumulate"
  acc_program "$tmp/acc_plain_$tag" "$opt" "" 2
  sed -i '/accumulate = 2/d' "$tmp/acc_plain_$tag.tfg"
  expect "accumulate-plain-$tag" 0 "$TFG" run --devices host*2 "$tmp/acc_plain_$tag.tfg" &&
    if python3 "$ROOT/tests/ckpt_compare.py" "$tmp/acc_plain_$tag.safetensors" "$tmp/single_$tag.safetensors" 2e-5 \
      >"$tmp/cmp" 2>&1; then ko "strategies accumulate-plain-$tag: 8-row steps equal 16-row ones"; else ok; fi
done
mlp_program "$tmp/m2_reduces" "adam(lr = 1e-2)" "mirrored([gpu:0, gpu:1])"
expect accumulate-reduces 0 "$TFG" run --devices host*2 --profile "$tmp/m2_reduces.tfg" &&
  want=$(grep '^reduce  *collective' "$tmp/err" | awk '{ print $3 }') &&
  if [ -n "$want" ] && [ "$want" = "$(cat "$tmp/acc_reduces_2")" ] && [ "$want" = "$(cat "$tmp/acc_reduces_4")" ]; then ok
  else ko "strategies accumulate-reduces: $want all-reduces without accumulation, $(cat "$tmp/acc_reduces_2") and $(cat "$tmp/acc_reduces_4") with"; fi

# dropout under mirrored: each replica draws its rows' part of the whole
# batch's mask, so the result is still the single-device one
mlp_program "$tmp/drop1" "adam(lr = 1e-2)" "" dropout
mlp_program "$tmp/drop2" "adam(lr = 1e-2)" "mirrored([gpu:0, gpu:1])" dropout
expect dropout-single 0 "$TFG" run --devices host*2 "$tmp/drop1.tfg"
expect dropout-mirrored 0 "$TFG" run --devices host*2 "$tmp/drop2.tfg" && same dropout-mirrored "$tmp/drop2" "$tmp/drop1"
grep -q dropout "$tmp/drop2.tfg" && ok || ko "strategies dropout: the program has no dropout"

# captured runs (CUDA Graphs' path, emulated by host devices with
# TFG_HOST_GRAPHS=1, runtime/backend.h): the dropout model on one device
# (its inputs go straight to gpu:0) and mirrored (cpu:0 slices the batch
# first, outside the capture), and the data x model split below,
# trained with replays, equal the plain runs bit for bit (tolerance 0: a replay queues the very operations the
# capture recorded, in their order, on the same memory)
sed "s|drop1.safetensors|graph1.safetensors|" "$tmp/drop1.tfg" >"$tmp/graph1.tfg"
sed "s|drop1.safetensors|plain1.safetensors|" "$tmp/drop1.tfg" >"$tmp/plain1.tfg"
expect graphs-single 0 env TFG_HOST_GRAPHS=1 "$TFG" run --devices host "$tmp/graph1.tfg" &&
  expect graphs-single-plain 0 "$TFG" run --devices host "$tmp/plain1.tfg" &&
  if python3 "$ROOT/tests/ckpt_compare.py" "$tmp/graph1.safetensors" "$tmp/plain1.safetensors" 0 >"$tmp/cmp" 2>&1; then ok
  else ko "strategies graphs-single: $(cat "$tmp/cmp")"; fi
sed "s|drop2.safetensors|graph2.safetensors|" "$tmp/drop2.tfg" >"$tmp/graph2.tfg"
expect graphs-mirrored 0 env TFG_HOST_GRAPHS=1 "$TFG" run --devices host*2 "$tmp/graph2.tfg" &&
  contains graphs-replayed "$tmp/err" "(19 replayed from a captured graph)" &&
  if python3 "$ROOT/tests/ckpt_compare.py" "$tmp/graph2.safetensors" "$tmp/drop2.safetensors" 0 >"$tmp/cmp" 2>&1; then ok
  else ko "strategies graphs-mirrored: $(cat "$tmp/cmp")"; fi

# data x model parallel: two replicas, each split over two devices by pins
mlp_program "$tmp/pinned" "adam(lr = 1e-2)" "" pinned
mlp_program "$tmp/dxm" "adam(lr = 1e-2)" "mirrored([[gpu:0, gpu:1], [gpu:2, gpu:3]])" pinned
expect single-pinned 0 "$TFG" run --devices host*4 "$tmp/pinned.tfg"
expect data-x-model 0 "$TFG" run --devices host*4 "$tmp/dxm.tfg" && same data-x-model "$tmp/dxm" "$tmp/pinned"
sed "s|dxm.safetensors|graphdxm.safetensors|" "$tmp/dxm.tfg" >"$tmp/graphdxm.tfg"
expect graphs-data-x-model 0 env TFG_HOST_GRAPHS=1 "$TFG" run --devices host*4 "$tmp/graphdxm.tfg" &&
  if python3 "$ROOT/tests/ckpt_compare.py" "$tmp/graphdxm.safetensors" "$tmp/dxm.safetensors" 0 >"$tmp/cmp" 2>&1; then ok
  else ko "strategies graphs-data-x-model: $(cat "$tmp/cmp")"; fi
contains data-x-model-log "$tmp/err" "step 20/20"

# model parallel: the pinned model split over two devices, and unsplit
cp "$tmp/pinned.tfg" "$tmp/unsplit.tfg"
sed -i "s|pinned.safetensors|unsplit.safetensors|" "$tmp/unsplit.tfg"
expect model-parallel-unsplit 0 "$TFG" run --devices host*2 --set d1=gpu:0 "$tmp/unsplit.tfg" &&
  same model-parallel "$tmp/pinned" "$tmp/unsplit"
expect model-parallel-plan 0 "$TFG" plan --devices host*2 "$tmp/pinned.tfg" && contains model-parallel-plan "$tmp/out" "copy"

# a batch that does not split evenly is an error at the input
mlp_program "$tmp/uneven" "sgd(lr = 0.1)" "mirrored([gpu:0, gpu:1, gpu:2])"
expect mirrored-uneven 1 "$TFG" run --devices host*4 --color=never "$tmp/uneven.tfg" &&
  contains mirrored-uneven "$tmp/err" "error:"

# the examples, each without a GPU
for ex in data_parallel model_parallel ensemble async_ps; do
  expect "example-$ex" 0 "$TFG" run "examples/$ex.tfg"
  cp "$tmp/err" "$tmp/$ex.log"
  cp "$tmp/out" "$tmp/$ex.out"
done
contains ensemble-print "$tmp/ensemble.out" "accuracy((softmax(ta) + softmax(tb)) / 2.0, ty): f32[] @"
contains ensemble-grouped "$tmp/ensemble.log" "train (line"
contains async-staleness "$tmp/async_ps.log" "staleness"
# parameter_server reaches within 1% of synchronous training's test accuracy
expect digits-sync 0 "$TFG" run examples/digits.tfg
acc() { sed -n 's/.*eval .*accuracy([^)]*) \([0-9.]*\).*/\1/p' "$1" | tail -1; }
sync_acc=$(acc "$tmp/err")
ps_acc=$(acc "$tmp/async_ps.log")
if python3 -c "import sys; sys.exit(0 if abs($sync_acc - $ps_acc) <= 0.01 else 1)" 2>/dev/null; then ok
else ko "strategies ps-accuracy: parameter_server $ps_acc, synchronous $sync_acc"; fi

# a fault on one device ends the run: exit 3, a message naming the op,
# its device and the step, no hang, and the last checkpoint (step 10)
# intact; by step (the executor's hook) and by launch count (the host
# backend's: a replica launches about 18 kernels a step, its reshapes
# being views (docs/plan.md, Views), so launch 265 falls in step 15)
mlp_program "$tmp/fault" "adam(lr = 1e-2)" "mirrored([gpu:0, gpu:1])"
sed -i 's/  log_every = 20/  checkpoint_every = 10/' "$tmp/fault.tfg"
for hook in TFG_FAULT_STEP=15 TFG_FAULT_AFTER=265; do
  rm -f "$tmp/fault.safetensors"
  expect "fault-$hook" 3 env TFG_FAULT_DEVICE=2 "$hook" timeout 60 "$TFG" run --devices host*2 --color=never "$tmp/fault.tfg" &&
    contains "fault-$hook" "$tmp/err" "on gpu:1 failed: injected fault" && contains "fault-$hook" "$tmp/err" "in training step 15"
  if python3 "$ROOT/tests/ckpt_reader.py" "$tmp/fault.safetensors" 2>/dev/null | grep -q "meta step 10"; then ok
  else ko "strategies fault-$hook: the checkpoint of step 10 is not intact"; fi
done

# --trace: JSON with a track per device stream
expect trace 0 "$TFG" run --devices host*2 --trace "$tmp/trace.json" "$tmp/mirrored2_ada.tfg"
if python3 - "$tmp/trace.json" <<'PY'; then ok; else ko "strategies trace: not a trace with a track per stream"; fi
import json, sys
t = json.load(open(sys.argv[1]))["traceEvents"]
names = {(e["pid"], e["args"]["name"]) for e in t if e.get("ph") == "M" and e.get("name") == "thread_name"}
slices = [e for e in t if e.get("ph") == "X"]
need = {(p, s) for p in (1, 2) for s in ("compute", "copy", "collective")}
sys.exit(0 if need <= names and slices and any(e["tid"] == 2 for e in slices) else 1)
PY

# devices that cannot run: refused with a message, before anything runs
expect run-sim 3 "$TFG" run --devices sim:h100*2 "$tmp/mirrored2_ada.tfg" &&
  contains run-sim "$tmp/err" "sim devices are for tfg place and tfg plan only"
expect run-too-few 1 "$TFG" run --devices host*1 --color=never "$tmp/mirrored2_ada.tfg" &&
  contains run-too-few "$tmp/err" "gpu:1 does not exist"

# model parallel from the placer's memory split: 24 layers that do not fit
# one 16 MiB device train over two, as on one large device
{
  echo "x = normal([16, 256], seed = 1)"
  echo "let h = x"
  echo "for i in 0..24 {"
  echo "  param w: f32[256, 256] = glorot()"
  echo "  h = relu(matmul(h, w))"
  echo "}"
  echo "train mean(h) { optimizer = adam(lr = 1e-3); steps = 3; checkpoint = \"CK.safetensors\" }"
} >"$tmp/split.tfg"
sed 's/CK/split_two/' "$tmp/split.tfg" >"$tmp/split_two.tfg"
sed 's/CK/split_one/' "$tmp/split.tfg" >"$tmp/split_one.tfg"
expect memory-split-place 0 "$TFG" place --devices host*2:16M "$tmp/split_two.tfg" &&
  contains memory-split-place "$tmp/out" "pass 3"
expect memory-split-two 0 "$TFG" run --devices host*2:16M "$tmp/split_two.tfg"
expect memory-split-one 0 "$TFG" run --devices host*1 "$tmp/split_one.tfg" &&
  same memory-split "$tmp/split_two" "$tmp/split_one"

# activation recompute (compiler/recompute.h): recompute = ["block"] on the
# 4-block GPT replays each block's forward for its backward. The replay
# runs the same ops in the same order on the same inputs, so 5 AdamW steps
# (bf16 autocast, clipping) give bit for bit the params without it
# (tolerance 0), on one device, mirrored and as a pipeline; and the planned
# activation peak (peak less persistent bytes, tfg plan --json) is cut by
# at least half (only each block's input is kept, and one block's
# activations at a time are replayed)
rc_program() { # FILE SETTING...: examples/gpt.tfg writing a checkpoint, with the settings
  rc_file=$1
  shift
  rc_more=$(printf '\\n  %s' "checkpoint = \"$rc_file.safetensors\"" "$@")
  sed -e "s|\"data/constitution.npy\"|\"$ROOT/examples/data/constitution.npy\"|" \
    -e "s|^  seed = 0\$|  seed = 0$rc_more|" "$ROOT/examples/gpt.tfg" >"$rc_file.tfg"
}
rc_set="--set layers=4 --set steps=5 --set warmup=2 --set decay=5 --set log_every=5"
for rc_strategy in "" "strategy = mirrored()" "strategy = parallel(pipeline = 2)"; do
  rc_tag=$(echo "${rc_strategy:-single}" | sed 's/strategy = //; s/(.*//')
  rc_program "$tmp/rc-$rc_tag-kept" "$rc_strategy"
  rc_program "$tmp/rc-$rc_tag-replayed" "$rc_strategy" 'recompute = ["block"]'
  expect "recompute-$rc_tag-kept" 0 "$TFG" run --devices host*2 $rc_set "$tmp/rc-$rc_tag-kept.tfg"
  expect "recompute-$rc_tag" 0 "$TFG" run --devices host*2 $rc_set "$tmp/rc-$rc_tag-replayed.tfg" &&
    if python3 "$ROOT/tests/ckpt_compare.py" "$tmp/rc-$rc_tag-replayed.safetensors" "$tmp/rc-$rc_tag-kept.safetensors" 0 \
      >"$tmp/cmp" 2>&1; then ok; else ko "strategies recompute-$rc_tag: $(cat "$tmp/cmp")"; fi
done
for rc_kind in kept replayed; do
  "$TFG" plan --json --devices host $rc_set "$tmp/rc-single-$rc_kind.tfg" >"$tmp/rc-$rc_kind.json" 2>"$tmp/err" ||
    ko "strategies recompute-plan-$rc_kind: $(cat "$tmp/err")"
done
if python3 - "$tmp/rc-kept.json" "$tmp/rc-replayed.json" >"$tmp/cmp" 2>&1 <<'PY'
import json, sys
act = [sum(d["peak_bytes"] - d["persistent_bytes"] for d in json.load(open(f))["devices"]) for f in sys.argv[1:]]
print("activations %d bytes kept, %d replayed: %.0f%% less" % (act[0], act[1], 100 * (1 - act[1] / act[0])))
sys.exit(0 if act[1] <= act[0] / 2 else 1)
PY
then ok; else ko "strategies recompute-peak: $(cat "$tmp/cmp")"; fi
# recompute = "auto": the GPT (batch 32) mirrored over host*4:8M does not
# fit (tfg plan refuses it, out of memory); "auto" recomputes the calls that
# free most per FLOP replayed until the plan fits (place --explain names
# them), and trains the params the unconstrained run does, bit for bit
rc_set32="$rc_set --set batch=32"
rc_program "$tmp/rc-auto-none" "strategy = mirrored()"
rc_program "$tmp/rc-auto" "strategy = mirrored()" 'recompute = "auto"'
expect recompute-auto-refused 1 "$TFG" plan --color=never --devices host*4:8M $rc_set32 "$tmp/rc-auto-none.tfg" &&
  contains recompute-auto-refused "$tmp/err" "error: out of memory on gpu:0"
expect recompute-auto-explain 0 "$TFG" place --explain --devices host*4:8M $rc_set32 "$tmp/rc-auto.tfg" &&
  contains recompute-auto-explain "$tmp/out" "recomputing 3 of 5 calls" &&
  contains recompute-auto-explain "$tmp/out" "  block (rc-auto.tfg:"
expect recompute-auto-unlimited 0 "$TFG" run --devices host*4 $rc_set32 "$tmp/rc-auto-none.tfg"
expect recompute-auto 0 "$TFG" run --devices host*4:8M $rc_set32 "$tmp/rc-auto.tfg" &&
  if python3 "$ROOT/tests/ckpt_compare.py" "$tmp/rc-auto.safetensors" "$tmp/rc-auto-none.safetensors" 0 \
    >"$tmp/cmp" 2>&1; then ok; else ko "strategies recompute-auto: $(cat "$tmp/cmp")"; fi
# and "auto" recomputes nothing where the plan fits
expect recompute-auto-fits 0 "$TFG" place --explain --devices host*4 $rc_set32 "$tmp/rc-auto.tfg" &&
  contains recompute-auto-fits "$tmp/out" "nothing recomputed: the plan fits"
# the plan's memory at a device's fullest step by kind (tfg plan --json
# "memory"): for the GPT under AdamW, the optimizer state is its two
# moments of every trained param, the bytes of the checkpoint's
# "PARAM:m" and "PARAM:v" tensors exactly; params hold at least the
# checkpoint's params (constants count with them); the kinds and the
# gaps add up to the peak
if python3 - "$tmp/rc-kept.json" "$tmp/rc-single-kept.safetensors" >"$tmp/cmp" 2>&1 <<'PY'
import json, struct, sys
plan = json.load(open(sys.argv[1]))
with open(sys.argv[2], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    head = json.loads(f.read(n))
size = {k: v["data_offsets"][1] - v["data_offsets"][0] for k, v in head.items() if k != "__metadata__"}
state = sum(b for k, b in size.items() if ":" in k)
params = sum(b for k, b in size.items() if ":" not in k)
dev = [d for d in plan["devices"] if d["name"] != "cpu:0" or len(plan["devices"]) == 1][0]
m = dev["memory"]
print("plan %s, checkpoint params %d, state %d" % (m, params, state))
parts = m["params"] + m["gradients"] + m["optimizer_state"] + m["activations"] + m["gaps"]
sys.exit(0 if m["optimizer_state"] == state and m["params"] >= params and parts == dev["peak_bytes"] else 1)
PY
then ok; else ko "strategies memory-kinds: $(cat "$tmp/cmp")"; fi
# place --explain says what the named recompute replays and drops
expect recompute-explain 0 "$TFG" place --explain --devices host $rc_set "$tmp/rc-single-replayed.tfg" &&
  contains recompute-explain "$tmp/out" 'recompute = ["block"] (train at line 78): 4 calls replayed for the backward, 0.484 GFLOP a step; the 32.5 MB of activations made in them are not kept for it'

# ZeRO (compiler/strategy/replicate.c): zero = 1 keeps and updates each
# replica's piece of every param (its optimizer state a quarter on
# host*4), all-gathering the pieces back: the same elementwise updates on
# the same all-reduced gradients, so the params are zero 0's bit for bit
# (tolerance 0); zero = 2 reduce-scatters the gradients: the ring sums
# each piece starting one rank later than the all-reduce's does, and the
# clipping norm is the sum of the replicas' partial sums, so each step's
# gradients differ in the last bits (about 1e-7 relative) and 10 steps of
# AdamW stay within the 2e-5 derived at the top. Mirrored on host*4, and
# data 2 x pipeline 2 with bf16 and clipping.
zero_same() { # NAME A B TOLERANCE
  if python3 "$ROOT/tests/ckpt_compare.py" "$2.safetensors" "$3.safetensors" "$4" >"$tmp/cmp" 2>&1; then ok
  else ko "strategies $1: $(cat "$tmp/cmp")"; fi
}
for zs in "mirrored:mirrored():clip_grad_norm = 0.5" \
  "pipe:parallel(data = 2, pipeline = 2):micro_batches = 2; precision = bf16; clip_grad_norm = 0.5"; do
  zt=${zs%%:*} zrest=${zs#*:}
  zstrat=${zrest%%:*} zset=${zrest#*:}
  for z in 0 1 2; do
    zero_program "$tmp/zero-$zt-$z" "$zstrat" "$z" "$zset"
    expect "zero-$zt-$z" 0 "$TFG" run --devices host*4 "$tmp/zero-$zt-$z.tfg"
  done
  zero_same "zero-$zt-1" "$tmp/zero-$zt-1" "$tmp/zero-$zt-0" 0
  zero_same "zero-$zt-2" "$tmp/zero-$zt-2" "$tmp/zero-$zt-0" 2e-5
done
# the plan's optimizer state per device (tfg plan --json "memory") is 1/D
# of zero 0's: each param's 2 AdamW moments in ceil(N / 4)-element pieces
for z in 0 1 2; do
  "$TFG" plan --json --devices host*4 "$tmp/zero-mirrored-$z.tfg" >"$tmp/zero-plan-$z.json" 2>"$tmp/err" ||
    ko "strategies zero-plan-$z: $(cat "$tmp/err")"
done
if python3 - "$tmp/zero-plan-0.json" "$tmp/zero-plan-1.json" "$tmp/zero-plan-2.json" >"$tmp/cmp" 2>&1 <<'PY'
import json, sys
state = [[d["memory"]["optimizer_state"] for d in json.load(open(f))["devices"] if d["name"] != "cpu:0"] for f in sys.argv[1:]]
params = [64 * 48, 48, 48 * 10, 10]  # the MLP's params, f32
want = sum(2 * 4 * ((n + 3) // 4) for n in params)  # 2 moments, a quarter each, rounded up
print("optimizer state per device: zero 0 %s, zero 1 %s, zero 2 %s, want %d" % (state[0], state[1], state[2], want))
sys.exit(0 if all(s == 2 * 4 * sum(params) for s in state[0]) and all(s == want for s in state[1] + state[2]) else 1)
PY
then ok; else ko "strategies zero-state: $(cat "$tmp/cmp")"; fi
# resumed across stages: 5 steps at zero 2, then 5 at zero 0, as 10 at zero 0
zero_program "$tmp/zero-resume" "mirrored()" 2 "clip_grad_norm = 0.5"
sed 's/steps = 10/steps = 5/' "$tmp/zero-resume.tfg" >"$tmp/zero-resume5.tfg"
expect zero-resume-2 0 "$TFG" run --devices host*4 "$tmp/zero-resume5.tfg"
sed 's/zero = 2/zero = 0/' "$tmp/zero-resume.tfg" >"$tmp/zero-resume10.tfg"
expect zero-resume-0 0 "$TFG" run --devices host*4 "$tmp/zero-resume10.tfg" &&
  contains zero-resume-0 "$tmp/err" "restored $tmp/zero-resume.safetensors: 12 tensors, step 5" &&
  zero_same zero-resume "$tmp/zero-resume" "$tmp/zero-mirrored-0" 2e-5
# with accumulate = 2 (a step's other runs fetch an accumulation per update)
for z in 0 1 2; do
  zero_program "$tmp/zero-acc-$z" "mirrored()" "$z" "accumulate = 2"
  sed -i 's/steps = 10/steps = 5/' "$tmp/zero-acc-$z.tfg"
  expect "zero-acc-$z" 0 "$TFG" run --devices host*4 "$tmp/zero-acc-$z.tfg"
done
zero_same zero-acc-1 "$tmp/zero-acc-1" "$tmp/zero-acc-0" 0
zero_same zero-acc-2 "$tmp/zero-acc-2" "$tmp/zero-acc-0" 2e-5
# place --explain says what ZeRO keeps where
expect zero-explain 0 "$TFG" place --explain --devices host*4 "$tmp/zero-mirrored-2.tfg" &&
  contains zero-explain "$tmp/out" "zero = 2 (train at line 6): the optimizer state (8 tensors, 28.2 KiB) in 4 pieces, one a replica: 7.1 KiB on each instead of 28.2 KiB; gradients reduce-scattered"
