# tests/pipeline.sh: parallel(data, pipeline) end to end on host devices
# (LANGUAGE.md 6.1), sourced by tests/suite.sh (it uses expect, contains
# and ok/ko, tests/lib.sh).
#
# Equality. A pipeline trains the same program as one device with the
# same global batch: each micro-batch's gradient is a sum over its rows,
# the micro-batches' are summed and divided by their count, and the
# data-parallel replicas' all-reduced, where one device sums all the rows
# at once. The f32 sums differ only in their order, about 1e-7 relative
# per step; 10 steps of AdamW, which divides by the gradient's running
# RMS, carry that to a few 1e-6 at most, so params agree within 2e-5
# relative (the tolerance tests/strategies.sh derives for mirrored). A
# wrong stage, a lost micro-batch or a missing 1/M is off by far more
# (1e-3 and up). gpipe and 1f1b sum the same micro-batches in the same
# order (the order is in the graph, not the schedule), so they give the
# same bytes.

# same_params NAME A B: checkpoints A and B hold the same tensors within 2e-5
same_params() {
  if python3 "$ROOT/tests/ckpt_compare.py" "$2" "$3" 2e-5 >"$tmp/cmp" 2>&1; then ok
  else ko "pipeline $1: $(cat "$tmp/cmp")"; fi
}

# pipe_mlp FILE SETTINGS: a 5-layer MLP of the digits data, 10 AdamW steps
pipe_mlp() {
  cat >"$1.tfg" <<EOF
import nn
data digits = csv("$digits", label = -1, test = 0.2, shuffle = true, seed = 7)
input x: f32[16, 64] from digits.x
input y: i32[16] from digits.y
logits = nn.mlp(x / 16.0, [48, 40, 32, 24, 10])
train cross_entropy(logits, y) {
  optimizer = adamw(lr = 1e-2)
  steps = 10
  $2
  checkpoint = "$1.safetensors"
  log_every = 10
}
EOF
}

# pipe_gpt FILE SETTINGS: four transformer blocks of the standard library
# over a fed batch, 10 AdamW steps
pipe_gpt() {
  cat >"$1.tfg" <<EOF
import nn
input x: f32[8, 8, 16]
h = x
for i in 0..4 { h = nn.transformer_block(h, 2, 32) }
train mean(h * h) {
  optimizer = adamw(lr = 1e-2)
  steps = 10
  $2
  checkpoint = "$1.safetensors"
}
EOF
}

mkdir -p "$tmp/pp"
python3 "$ROOT/bench/make_batch.py" "$tmp/pp" normal 8x8x16
for model in mlp gpt; do
  feed=
  [ $model = gpt ] && feed="--feed x=$tmp/pp/x.npy"
  base="$tmp/pp/$model-single"
  pipe_$model "$base" ""
  expect "$model-single" 0 "$TFG" run --devices host*4 $feed "$base.tfg" || continue
  for P in 2 4; do
    for sched in gpipe 1f1b "interleaved(chunks = 2)"; do
      tag=$(echo "$sched" | cut -c1-5)
      f="$tmp/pp/$model-p$P-$tag"
      pipe_$model "$f" "strategy = parallel(pipeline = $P); micro_batches = 4; schedule = $sched"
      expect "$model-p$P-$tag" 0 "$TFG" run --devices host*$P $feed "$f.tfg" &&
        same_params "$model-p$P-$tag" "$f.safetensors" "$base.safetensors"
    done
    if cmp -s "$tmp/pp/$model-p$P-gpipe.safetensors" "$tmp/pp/$model-p$P-1f1b.safetensors"; then ok
    else ko "pipeline $model-p$P: gpipe and 1f1b differ (they sum the same micro-batches in the same order)"; fi
  done
  f="$tmp/pp/$model-d2p2"
  pipe_$model "$f" "strategy = parallel(data = 2, pipeline = 2); micro_batches = 2"
  expect "$model-d2p2" 0 "$TFG" run --devices host*4 $feed "$f.tfg" &&
    same_params "$model-d2p2" "$f.safetensors" "$base.safetensors"
done

# With the other settings of a train: clip_grad_norm (the global norm
# over every stage's gradients) and accumulate (two runs a step, each a
# pipeline) equal one device within the same 2e-5. A run resumed from
# the checkpoint of step 5 ends as the run of 10 steps straight, byte for
# byte (every step is a function of the step number and the checkpoint).
for extra in "clip_grad_norm = 0.5" "accumulate = 2"; do
  tag=$(echo "$extra" | tr -dc 'a-z')
  pipe_mlp "$tmp/pp/s-$tag" "$extra"
  pipe_mlp "$tmp/pp/p-$tag" "$extra; strategy = parallel(pipeline = 2); micro_batches = 4"
  expect "mlp-single-$tag" 0 "$TFG" run --devices host*2 "$tmp/pp/s-$tag.tfg" &&
    expect "mlp-p2-$tag" 0 "$TFG" run --devices host*2 "$tmp/pp/p-$tag.tfg" &&
    same_params "mlp-p2-$tag" "$tmp/pp/p-$tag.safetensors" "$tmp/pp/s-$tag.safetensors"
done
pipe_mlp "$tmp/pp/resumed" "strategy = parallel(pipeline = 2); micro_batches = 4"
sed 's/steps = 10/steps = 5/' "$tmp/pp/resumed.tfg" >"$tmp/pp/resumed5.tfg"
expect mlp-p2-half 0 "$TFG" run --devices host*2 "$tmp/pp/resumed5.tfg" &&
  expect mlp-p2-resume 0 "$TFG" run --devices host*2 "$tmp/pp/resumed.tfg" &&
  contains mlp-p2-resume "$tmp/err" "step 5" &&
  if cmp -s "$tmp/pp/resumed.safetensors" "$tmp/pp/mlp-p2-1f1b.safetensors"; then ok
  else ko "pipeline resume: 5 steps and 5 more differ from 10 steps"; fi
# Low precision: bf16 and f16 (with its grad scaler shared by a replica's
# micro-batches) train. Their sums round differently in another grouping
# (as mirrored's do), so the test is that they learn as f32 does: the
# mean loss over 60 steps (the one log line) is 1.36 in f32, and a run
# that does not learn stays near log(10) = 2.30; below 1.6 passes.
for prec in bf16 f16; do
  pipe_mlp "$tmp/pp/p-$prec" "precision = $prec; strategy = parallel(pipeline = 2); micro_batches = 4"
  sed -i -e 's/steps = 10/steps = 60/' -e 's/log_every = 10/log_every = 60/' "$tmp/pp/p-$prec.tfg"
  if expect "mlp-p2-$prec" 0 "$TFG" run --devices host*2 "$tmp/pp/p-$prec.tfg"; then
    loss=$(sed -n 's/^step 60\/60  loss \([0-9.]*\).*/\1/p' "$tmp/err")
    if [ -n "$loss" ] && awk -v l="$loss" 'BEGIN { exit !(l < 1.6) }'; then ok
    else ko "pipeline $prec: the mean loss over 60 steps is ${loss:-not logged}, not below 1.6"; fi
  fi
done

# Memory. With 32 rows per micro-batch (the batch grows with M), stage 0
# holds every micro-batch's activations until its backward under gpipe,
# so its planned activations grow with M; under 1f1b at most P = 2
# micro-batches are in flight, so they stay flat. Measured on the plan
# of gpu:0 (tfg plan --json): the most bytes of non-persistent buffers
# live at one step, for M = 2, 4, 8, 16. From M = 4 on 1f1b's are the
# same bytes (M = 2 holds one partial sum of the micro-batches' gradients
# less: its only sum is made at the end); gpipe's grow at each doubling.
# The planned peak of 1f1b (best fit places the same buffers with a few
# gaps) stays within 25% from M = 4 to 16.
live_of() { # live_of PLAN_JSON: gpu:0's most live non-persistent bytes, and its peak less the persistent bytes
  python3 -c '
import json, sys
d = [x for x in json.load(open(sys.argv[1]))["devices"] if x["name"] == "gpu:0"][0]
live = [0] * (len(d["steps"]) + 1)
for b in d["buffers"]:
    if b["live"] is not None:
        for s in range(b["live"][0], b["live"][1] + 1): live[s] += b["bytes"]
print(max(live), d["peak_bytes"] - d["persistent_bytes"])' "$1"
}
for sched in gpipe 1f1b; do
  lives= peaks=
  for M in 2 4 8 16; do
    cat >"$tmp/pp/mem.tfg" <<EOF
import nn
input x: f32[$((32 * M)), 32]
logits = nn.mlp(x, [128, 128, 128, 128, 10])
train mean(logits * logits) { optimizer = sgd(lr = 0.1); steps = 1; strategy = parallel(pipeline = 2); micro_batches = $M; schedule = $sched }
EOF
    if "$TFG" plan --json --devices host*2 "$tmp/pp/mem.tfg" >"$tmp/pp/mem.json" 2>"$tmp/err"; then
      set -- $(live_of "$tmp/pp/mem.json")
      lives="$lives $1" peaks="$peaks $2"
    else
      ko "pipeline memory $sched M=$M: $(head -3 "$tmp/err")"
    fi
  done
  set -- $lives
  [ $# -eq 4 ] || continue
  if [ $sched = gpipe ]; then
    if [ "$1" -lt "$2" ] && [ "$2" -lt "$3" ] && [ "$3" -lt "$4" ]; then ok
    else ko "pipeline memory: gpipe's stage 0 activations do not grow with M = 2, 4, 8, 16:$lives"; fi
  else
    if [ "$1" -le "$2" ] && [ "$2" -eq "$3" ] && [ "$3" -eq "$4" ]; then ok
    else ko "pipeline memory: 1f1b's stage 0 activations are not flat over M = 2, 4, 8, 16:$lives"; fi
    set -- $peaks
    if [ $(($4 * 4)) -le $(($2 * 5)) ]; then ok
    else ko "pipeline memory: 1f1b's stage 0 planned peak grows by more than 25% from M = 4 to 16:$peaks"; fi
  fi
done

# Predict. Four equal stages on sim:h100*4 (a cheap first layer, then
# sixteen 4096-wide layers: four to a stage, two with interleaved's
# eight; 32768 rows, so that summing a micro-batch's weight gradient is
# about 1% of its matmuls). The bubble
# plan --predict gives each stage, the part of the pipeline's span it
# does not compute, must be within 2 points of the schedule's formula:
# (P - 1) / (m + P - 1) for gpipe and 1f1b, (P - 1) / (v m + P - 1) for
# interleaved with v chunks (Megatron-LM's). What the formula leaves out
# (copies between stages, the first stage's cheap layer and the last's
# loss, the sums of the micro-batches' gradients) is about a point here.
for case in "1f1b:4:1" "1f1b:8:1" "1f1b:16:1" "gpipe:8:1" "interleaved(chunks = 2):8:2" "interleaved(chunks = 2):16:2"; do
  sched=${case%%:*} v=${case##*:} M=${case#*:}
  M=${M%:*}
  cat >"$tmp/pp/pred.tfg" <<EOF
import nn
input x: f32[32768, 8]
h = nn.dense(x, 4096)
for i in 0..16 { h = nn.dense(h, 4096) }
train mean(h * h) { optimizer = sgd(lr = 0.1); steps = 1; strategy = parallel(pipeline = 4); micro_batches = $M; schedule = $sched }
EOF
  if "$TFG" plan --predict --devices sim:h100*4 "$tmp/pp/pred.tfg" >"$tmp/pp/pred.out" 2>"$tmp/err"; then
    want=$(awk -v m="$M" -v v="$v" 'BEGIN { printf "%.2f", 100 * 3 / (v * m + 3) }')
    bad=$(awk -v w="$want" '/^gpu:/ { b = $NF; sub(/%/, "", b); d = b - w; if (d < 0) d = -d; if (d > 2) print $1 " " b "%" }' "$tmp/pp/pred.out")
    n=$(grep -c '^gpu:' "$tmp/pp/pred.out")
    if [ "$n" -eq 4 ] && [ -z "$bad" ]; then ok
    else ko "pipeline predict $sched m=$M: bubble not within 2 points of $want%: ${bad:-$n stages}"; fi
  else
    ko "pipeline predict $sched m=$M: $(head -3 "$tmp/err")"
  fi
done

# Trace. Every launch of a pipeline's stages but the updates after it is
# labelled with its unit ("fwd s0 m3 matmul"), and gpu:0's compute track
# runs its units in the 1F1B order of stage 0 of 2 with 8 micro-batches:
# one forward ahead, then a forward and a backward in turn, then the
# last backward (examples/pipeline.tfg, 2 steps).
sed -e 's/epochs = 20/steps = 2/' -e "s|data/digits|$ROOT/examples/data/digits|" examples/pipeline.tfg >"$tmp/pp/pipe2.tfg"
if "$TFG" run --devices host*2 --trace "$tmp/pp/trace.json" "$tmp/pp/pipe2.tfg" >"$tmp/out" 2>"$tmp/err"; then
  why=$(python3 -c '
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "op"]
gpus = [e for e in ev if e["pid"] in (1, 2)]
bad = [e["name"] for e in gpus if not e["name"].startswith(("fwd ", "bwd ")) and not e["name"].endswith("_update")]
if bad: sys.exit("unlabelled launches: %s" % sorted(set(bad))[:5])
units = []
for e in sorted((e for e in gpus if e["pid"] == 1 and e["tid"] == 0), key=lambda e: e["ts"]):
    if e["name"].endswith("_update"): break
    u = " ".join(e["name"].split()[:3])
    if not units or units[-1] != u: units.append(u)
want = ["fwd s0 m0"]
for m in range(1, 8): want += ["fwd s0 m%d" % m, "bwd s0 m%d" % (m - 1)]
want.append("bwd s0 m7")
if units != want: sys.exit("gpu:0 ran %s, not 1F1B: %s" % (units, want))
' "$tmp/pp/trace.json" 2>&1)
  if [ -z "$why" ]; then ok; else ko "pipeline trace: $why"; fi
else
  ko "pipeline trace: $(head -3 "$tmp/err")"
fi

# The cut keeps each stage's params within its device: two 1 MiB weights
# with Adam (4 MiB each with gradient and state) then 200 cheap ops. The
# fastest cut puts both weights on stage 0 (8 MiB), which a 7 MiB device
# cannot hold; the cut that fits puts one on each stage.
{
  echo "input x: f32[2, 512]"
  echo "param w1: f32[512, 512] = glorot(seed = 1)"
  echo "param w2: f32[512, 512] = glorot(seed = 2)"
  echo "h = matmul(matmul(x, w1), w2)"
  echo "for i in 0..200 { h = tanh(h) }"
  echo "train mean(h * h) { optimizer = adam(lr = 1e-3); steps = 1; strategy = parallel(pipeline = 2); micro_batches = 2 }"
} >"$tmp/pp/memcut.tfg"
expect pipeline-memory-cut 0 "$TFG" plan --devices host*2:7M "$tmp/pp/memcut.tfg"
