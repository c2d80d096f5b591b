# tests/cli.sh: command-line behaviour (CLI.md), sourced by tests/run.sh,
# which provides $TFG, and through tests/lib.sh $tmp, ok, ko, expect and
# contains.

expect help 0 "$TFG" --help && contains help "$tmp/out" "usage: tfg COMMAND"
expect no-args 2 "$TFG"
expect unknown-command 2 "$TFG" frobnicate && contains unknown-command "$tmp/err" "unknown command 'frobnicate'"
for cmd in run check place plan devices repl version; do
  expect "$cmd-help" 0 "$TFG" "$cmd" --help && contains "$cmd-help" "$tmp/out" "usage: tfg $cmd"
done
expect check-no-file 2 "$TFG" check && contains check-no-file "$tmp/err" "missing FILE"
expect check-bad-option 2 "$TFG" check --frob x.tfg && contains check-bad-option "$tmp/err" "unknown option '--frob'"
expect check-two-files 2 "$TFG" check a.tfg b.tfg
expect option-after-file 0 "$TFG" check examples/hello.tfg --color=never
expect option-needs-value 2 "$TFG" check examples/hello.tfg --color && contains option-needs-value "$tmp/err" "needs a value"
expect short-option 2 "$TFG" check -x examples/hello.tfg && contains short-option "$tmp/err" "unknown option '-x'"
if [ -w /dev/full ]; then expect write-failure 3 sh -c "\"$TFG\" check --ast examples/hello.tfg >/dev/full"; fi
expect check-bad-color 2 "$TFG" check --color=purple x.tfg
expect check-missing 2 "$TFG" check "$tmp/missing.tfg" && contains check-missing "$tmp/err" "cannot open"
expect check-directory 2 "$TFG" check "$tmp"
expect version 0 "$TFG" version && contains version "$tmp/out" "tfg 0.1.0"

# A valid program: silence and exit 0.
expect check-example 0 "$TFG" check examples/hello.tfg
[ -s "$tmp/out" ] || [ -s "$tmp/err" ] && ko "cli check-example: printed something" || ok

# Standard input.
printf 'let a = 1\n' >"$tmp/in.tfg"
expect stdin-ok 0 sh -c "\"$TFG\" check - <\"$tmp/in.tfg\""
printf 'let a =' >"$tmp/in.tfg"
expect stdin-err 1 sh -c "\"$TFG\" check --color=never - <\"$tmp/in.tfg\"" &&
  contains stdin-err "$tmp/err" "<stdin>:1:8: error: expected an expression after '=', found end of file"
contains stdin-summary "$tmp/err" "1 error"

# Colour only when asked (stderr is not a terminal here).
printf 'let = 1\n' >"$tmp/bad.tfg"
expect color-always 1 "$TFG" check --color=always "$tmp/bad.tfg"
if grep -q "$(printf '\033')\[" "$tmp/err"; then ok; else ko "cli color-always: no ANSI colour"; fi
expect color-auto 1 "$TFG" check "$tmp/bad.tfg"
if grep -q "$(printf '\033')" "$tmp/err"; then ko "cli color-auto: colour on a pipe"; else ok; fi

# run: the example's print actions; a wrong program is reported, not run.
expect run-example 0 "$TFG" run examples/hello.tfg && contains run-example "$tmp/out" "y: f32[2,3] @cpu:0"
expect run-bad-program 1 "$TFG" run "$tmp/bad.tfg"
# The REPL on an empty pipe: a session with no input, exit 0 (tests/repl.sh has the rest).
expect repl-empty 0 sh -c "\"$TFG\" repl </dev/null"
# --set and --feed
expect set-unknown 2 "$TFG" check --set nothere=1 examples/hello.tfg && contains set-unknown "$tmp/err" "no top-level \`let nothere\`"
expect set-bad 2 "$TFG" check --set novalue examples/hello.tfg
expect feed-missing-input 2 "$TFG" run --feed zz=/nonexistent.npy examples/hello.tfg

# Hostile input: never a crash or a hang. 10 MB on one line, valid.
awk 'BEGIN { for (i = 0; i < 1000000; i++) printf "let a = 1; "; }' >"$tmp/long.tfg"
expect long-line-valid 0 timeout 60 "$TFG" check "$tmp/long.tfg"
# 10 MB of blank lines, and of comment lines: linear time.
awk 'BEGIN { for (i = 0; i < 10000000; i++) printf "\n"; }' >"$tmp/blank.tfg"
expect blank-lines 0 timeout 20 "$TFG" check "$tmp/blank.tfg"
awk 'BEGIN { for (i = 0; i < 3000000; i++) printf "#c\n"; }' >"$tmp/comments.tfg"
expect comment-lines 0 timeout 20 "$TFG" check "$tmp/comments.tfg"
# The syntax tree of the 10 MB line: columns counted incrementally.
expect long-line-ast 0 timeout 60 sh -c "\"$TFG\" check --ast \"$tmp/long.tfg\" >/dev/null"
# 10 MB on one line of nested parentheses: the nesting limit, located.
awk 'BEGIN { printf "let a = "; for (i = 0; i < 10000000; i++) printf "("; }' >"$tmp/parens.tfg"
expect long-line-parens 1 timeout 60 "$TFG" check --color=never "$tmp/parens.tfg" &&
  contains long-line-parens "$tmp/err" "nesting is too deep"
# 10 MB of a left-deep sum: the AST depth limit, not a stack overflow.
awk 'BEGIN { printf "let a = 1"; for (i = 0; i < 5000000; i++) printf "+1"; }' >"$tmp/sum.tfg"
expect long-line-sum 1 timeout 60 "$TFG" check --color=never "$tmp/sum.tfg" &&
  contains long-line-sum "$tmp/err" "nesting is too deep"
# 10 MB of stray bytes: the error limit stops the run early.
awk 'BEGIN { for (i = 0; i < 10000000; i++) printf "$"; }' >"$tmp/dollars.tfg"
expect long-line-stray 1 timeout 60 "$TFG" check --color=never "$tmp/dollars.tfg" &&
  contains long-line-stray "$tmp/err" "too many errors"
# NUL bytes and invalid UTF-8 anywhere (C0 80, an overlong NUL, is two bad bytes).
printf 'let a = 1\000\nlet b = "\377"\n# \300\200\n' >"$tmp/bin.tfg"
expect binary 1 timeout 20 "$TFG" check --color=never "$tmp/bin.tfg" &&
  contains binary "$tmp/err" "4 errors"
head -c 200000 /dev/urandom >"$tmp/random.tfg"
timeout 20 "$TFG" check "$tmp/random.tfg" >/dev/null 2>&1
rc=$?
if [ $rc -le 1 ]; then ok; else ko "cli random-bytes: exit $rc"; fi

# ---- training --------------------------------------------------------------
# A tiny regression trained with a checkpoint: 100 steps straight, or 50,
# stop, resume to 100, must give the same bytes (params, Adam state, step).
mkdir -p "$tmp/train"
cat >"$tmp/train/fit.tfg" <<'TFG'
let steps = 100
let ckpt = "a.safetensors"
x = reshape(cast(arange(0, 32), f32) / 32.0, [8, 4])
t = sum(x * tensor([1.0, -2.0, 3.0, 0.5]), axis = 1, keepdims = true)
param w: f32[4, 1] = normal(seed = 3)
param b: f32[1]
h = dropout(x, 0.1)
loss = mse(matmul(h, w) + b, t)
train loss { optimizer = adam(lr = 0.01); steps = steps; checkpoint = ckpt; checkpoint_every = 25; log_every = 50 }
TFG
expect train-straight 0 "$TFG" run --threads 2 "$tmp/train/fit.tfg" &&
  contains train-straight "$tmp/err" "step 100/100"
expect train-half 0 "$TFG" run --threads 2 --set steps=50 --set 'ckpt="b.safetensors"' "$tmp/train/fit.tfg"
expect train-resume 0 "$TFG" run --threads 2 --set 'ckpt="b.safetensors"' "$tmp/train/fit.tfg" &&
  contains train-resume "$tmp/err" "restored"
if cmp -s "$tmp/train/a.safetensors" "$tmp/train/b.safetensors"; then ok; else ko "cli train-resume: 50 + 50 steps differ from 100"; fi
# A checkpoint past the train's steps (a.safetensors holds step 100): a
# warning at the setting, nothing trained, the file left as it was.
cp "$tmp/train/a.safetensors" "$tmp/train/past.safetensors"
expect train-past 0 "$TFG" run --color=never --set steps=60 --set 'ckpt="past.safetensors"' "$tmp/train/fit.tfg" &&
  contains train-past "$tmp/err" "past.safetensors holds step 100, past this train's 60 steps: nothing is trained" &&
  if grep -q '^step ' "$tmp/err" || ! cmp -s "$tmp/train/a.safetensors" "$tmp/train/past.safetensors"; then
    ko "cli train-past: it trained, or changed the checkpoint"; else ok; fi
# The loss fell.
expect train-loss-falls 0 "$TFG" run --set steps=200 --set 'ckpt="c.safetensors"' "$tmp/train/fit.tfg"
first=$(grep -m1 '^step 50/' "$tmp/err" | sed -E 's/.*loss ([0-9.]+).*/\1/')
last=$(grep '^step 200/' "$tmp/err" | sed -E 's/.*loss ([0-9.]+).*/\1/')
# (dropout keeps the loss off zero: halving it is the bar)
if awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a / 2) }'; then ok; else ko "cli train-loss-falls: $first -> $last"; fi
# A NaN loss stops the run, naming the step; --check-numerics names the op.
cat >"$tmp/train/nan.tfg" <<'TFG'
param w: f32[2, 2] = ones()
x = tensor([[1.0, -1.0], [2.0, -3.0]])
loss = mean(log(matmul(x, w)))
train loss { optimizer = sgd(lr = 0.1); steps = 3 }
TFG
expect train-nan 3 "$TFG" run "$tmp/train/nan.tfg" && contains train-nan "$tmp/err" "step 1: the loss is NaN"
expect train-check-numerics 3 "$TFG" run --check-numerics "$tmp/train/nan.tfg" &&
  contains train-check-numerics "$tmp/err" "nan.tfg:3:13: error: log on cpu:0 failed: produced -inf at element 0"
# A params-only checkpoint written by another program (tests/ckpt_writer.py,
# standard library only, as PyTorch's safetensors would) initializes the
# params; the optimizer starts fresh.
cat >"$tmp/train/init.tfg" <<'TFG'
scope h {
  param w: f32[2, 3]
  param b: f32[3]
}
train sum(w * w) + sum(b) { optimizer = sgd(lr = 0.0, momentum = 0.9); steps = 1; checkpoint = "init.safetensors" }
print w, b
TFG
python3 tests/ckpt_writer.py "$tmp/train/init.safetensors"
expect ckpt-params-only 0 "$TFG" run "$tmp/train/init.tfg" &&
  contains ckpt-params-only "$tmp/err" "restored" && contains ckpt-params-only "$tmp/err" "optimizer state fresh"
contains ckpt-params-only-values "$tmp/out" "[[0. 1. 2.]"
contains ckpt-params-only-b "$tmp/out" "[ 0.5  -1.5   2.25]"
# A checkpoint whose shapes differ is an error naming the key.
sed 's/f32\[2, 3\]/f32[3, 2]/' "$tmp/train/init.tfg" >"$tmp/train/bad.tfg"
python3 tests/ckpt_writer.py "$tmp/train/init.safetensors"
expect ckpt-mismatch 1 "$TFG" run "$tmp/train/bad.tfg" && contains ckpt-mismatch "$tmp/err" "'h.w' is f32[2,3] but the program's is f32[3,2]"
# ---- load ------------------------------------------------------------------
# A model trained with a checkpoint; a second program that loads the
# checkpoint (strict: its Adam state beside the params is no error) prints
# exactly what a print after the training printed.
mkdir -p "$tmp/load"
cat >"$tmp/load/model.tfg" <<'TFG'
x = reshape(cast(arange(0, 24), f32) / 24.0, [6, 4])
t = sum(x * tensor([1.0, -2.0, 3.0, 0.5]), axis = 1, keepdims = true)
scope fit {
  param w: f32[4, 1] = normal(seed = 3)
  param b: f32[1]
}
y = matmul(x, w) + b
TFG
{ cat "$tmp/load/model.tfg"; echo 'train mse(y, t) { optimizer = adam(lr = 0.05); steps = 30; checkpoint = "m.safetensors"; log_every = 30 }'
  echo 'print w, b, y'; } >"$tmp/load/train.tfg"
{ echo 'load "m.safetensors"'; cat "$tmp/load/model.tfg"; echo 'print w, b, y'; } >"$tmp/load/use.tfg"
expect load-train 0 "$TFG" run "$tmp/load/train.tfg" && cp "$tmp/out" "$tmp/load/trained.out"
expect load-check 0 "$TFG" check "$tmp/load/use.tfg"
expect load-run 0 "$TFG" run "$tmp/load/use.tfg" &&
  if cmp -s "$tmp/out" "$tmp/load/trained.out" && grep -q '^b: f32\[1\]' "$tmp/out"; then ok
  else ko "cli load-run: the loaded model prints otherwise than the trained one"; diff "$tmp/load/trained.out" "$tmp/out" | head -10; fi
# ... and not as the untrained model does (the load did something).
{ cat "$tmp/load/model.tfg"; echo 'print w, b, y'; } >"$tmp/load/init.tfg"
expect load-init 0 "$TFG" run "$tmp/load/init.tfg" &&
  if cmp -s "$tmp/out" "$tmp/load/trained.out"; then ko "cli load-init: the untrained model prints as the trained one"; else ok; fi
# The path starts in the program's folder, as a train's checkpoint does: run from elsewhere.
expect load-folder 0 sh -c "cd / && \"$TFG\" run \"$tmp/load/use.tfg\"" &&
  if cmp -s "$tmp/out" "$tmp/load/trained.out"; then ok; else ko "cli load-folder: run from / prints otherwise"; fi
# A train after the load starts from the loaded values: one SGD step on
# sum(w * w) multiplies w by 1 - 2 lr = 0.8 (the file's h.w is 0 1 2 / 3 4 5).
cp tests/golden/data/load-params.safetensors "$tmp/load/p.safetensors"
cat >"$tmp/load/finetune.tfg" <<'TFG'
load "p.safetensors" { strict = false }
scope h { param w: f32[2, 3] }
train sum(w * w) { optimizer = sgd(lr = 0.1); steps = 1 }
print w
TFG
expect load-train-after 0 "$TFG" run --quiet "$tmp/load/finetune.tfg" &&
  contains load-train-after "$tmp/out" "[[0.  0.8 1.6]" && contains load-train-after "$tmp/out" " [2.4 3.2 4. ]]"
# Loads apply in program order, each setting the params its file has: the
# trained fit.b from the second file, h.b from the first.
cat >"$tmp/load/two.tfg" <<'TFG'
load "p.safetensors" { strict = false }
load "m.safetensors" { strict = false }
scope fit { param b: f32[1] }
fit_b = b
scope h { param b: f32[3] }
print fit_b, b
TFG
expect load-order 0 "$TFG" run "$tmp/load/two.tfg" &&
  if [ "$(sed -n 2p "$tmp/out")" = "$(sed -n '/^b: /{n;p;}' "$tmp/load/trained.out")" ]; then ok
  else ko "cli load-order: fit.b is not the trained one"; head -4 "$tmp/out"; fi
contains load-order-first "$tmp/out" "[ 0.5  -1.5   2.25]"
# Strict by default: a param the file lacks, a tensor that is no param; a
# dtype or shape that differs is an error even with strict = false. All are
# found by tfg check, before anything runs: exit 1, located, naming the param.
cat >"$tmp/load/missing.tfg" <<'TFG'
load "p.safetensors"
scope h {
  param w: f32[2, 3]
  param b: f32[3]
  param c: f32[3]
  param d: f32[3]
}
print w
TFG
expect load-missing 1 "$TFG" run "$tmp/load/missing.tfg" &&
  contains load-missing "$tmp/err" "missing.tfg:1:6: error: '$tmp/load/p.safetensors' has no tensor for param 'h.c', nor for 1 more param" &&
  if [ -s "$tmp/out" ]; then ko "cli load-missing: printed before the error"; else ok; fi
printf 'load "p.safetensors"\nscope h { param w: f32[2, 3] }\n' >"$tmp/load/extra.tfg"
expect load-extra 1 "$TFG" check "$tmp/load/extra.tfg" &&
  contains load-extra "$tmp/err" "p.safetensors' has tensor 'h.b', which is no param of this program"
printf 'load "p.safetensors" { strict = false }\nscope h { param w: f32[3, 2] }\n' >"$tmp/load/shape.tfg"
expect load-shape 1 "$TFG" check "$tmp/load/shape.tfg" &&
  contains load-shape "$tmp/err" "p.safetensors' holds 'h.w' as f32[2,3], but the param is f32[3,2]"
# strict = false: a param the file lacks keeps its initializer, a tensor that is no param is skipped.
printf 'load "p.safetensors" { strict = false }\nscope h { param b: f32[3] }\nparam z: f32[2] = full(7.0)\nprint b, z\n' >"$tmp/load/loose.tfg"
expect load-loose 0 "$TFG" run "$tmp/load/loose.tfg" &&
  contains load-loose "$tmp/out" "[ 0.5  -1.5   2.25]" && contains load-loose "$tmp/out" "[7. 7.]"
# Strict and whole: every param from the file.
printf 'load "p.safetensors"\nscope h {\n  param w: f32[2, 3]\n  param b: f32[3]\n}\nprint w\n' >"$tmp/load/all.tfg"
expect load-all 0 "$TFG" run "$tmp/load/all.tfg" && contains load-all "$tmp/out" "[[0. 1. 2.]"
# A truncated or corrupt file is a located error, never a crash.
head -c 300 "$tmp/load/p.safetensors" >"$tmp/load/cut.safetensors"
printf 'load "cut.safetensors" { strict = false }\nscope h { param b: f32[3] }\nprint b\n' >"$tmp/load/cut.tfg"
expect load-truncated 1 "$TFG" run "$tmp/load/cut.tfg" &&
  contains load-truncated "$tmp/err" "cut.safetensors': tensor 'h.w': data_offsets [0, 24] run past the end of the file"
head -c 4096 /dev/urandom >"$tmp/load/noise.safetensors"
printf '\040\000\000\000\000\000\000\000{"h.b": {"dtype": "F32", "shape": [3], "data_offsets": [0, 1' >"$tmp/load/json.safetensors"
for f in noise json; do
  sed "s/cut/$f/" "$tmp/load/cut.tfg" >"$tmp/load/$f.tfg"
  expect "load-corrupt-$f" 1 "$TFG" run "$tmp/load/$f.tfg" &&
    contains "load-corrupt-$f" "$tmp/err" "$f.tfg:1:6: error: '$tmp/load/$f.safetensors': "
done
# The REPL loads too, before the input's actions, and keeps the values; a
# bad file there is an error of its input only.
printf 'scope h { param w: f32[2, 3]; param b: f32[3] }\nload "p.safetensors"\nw\nload "cut.safetensors"\nb\n' >"$tmp/load/repl.in"
expect load-repl 1 sh -c "cd \"$tmp/load\" && \"$TFG\" repl --color=never <repl.in" &&
  contains load-repl "$tmp/out" "[[0. 1. 2.]" && contains load-repl "$tmp/out" "[ 0.5  -1.5   2.25]" &&
  contains load-repl "$tmp/err" "<stdin>:4:6: error: 'cut.safetensors': tensor 'h.w'"

# A strategy over devices the program names runs on host devices when there is no GPU.
printf 'param w: f32[] = ones()\ntrain w * w { optimizer = sgd(lr = 0.1); steps = 1; strategy = mirrored([gpu:0, gpu:1]) }\nprint w\n' >"$tmp/train/mirrored.tfg"
expect train-strategy 0 "$TFG" run "$tmp/train/mirrored.tfg" && contains train-strategy "$tmp/out" "0.8"

# ---- placement ---------------------------------------------------------------
# The 24-layer model of tests/golden/place-memory-split.tfg (72 MiB of
# params and Adam state, 96 MiB with gradients) on 2 and on 4 devices:
# split, each within its capacity.
for spec in host*2:64M host*4:40M; do
  expect "place-split-$spec" 0 "$TFG" place --json --devices "$spec" tests/golden/place-memory-split.tfg &&
  if python3 - "$tmp/out" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
mem = {d["name"]: d["memory"] for d in doc["devices"]}
used = [t for t in doc["totals"] if t["param_bytes"] > 0]
ok = len(used) >= 2 and all(t["param_bytes"] <= mem[t["device"]] for t in doc["totals"])
sys.exit(0 if ok else 1)
PY
  then ok; else ko "place-split-$spec: not split, or a device over capacity"; fi
done
# A pin to a device that does not exist is a located error.
printf 'x = zeros([2, 2])\n@gpu:3 y = relu(x)\nprint y\n' >"$tmp/pin.tfg"
expect place-missing-device 1 "$TFG" place --devices host*2 "$tmp/pin.tfg" &&
  contains place-missing-device "$tmp/err" "pin.tfg:2:2: error: gpu:3 does not exist: this run has 2 GPUs, gpu:0 to gpu:1"
# The default: as many host devices as gpu:N the program names, said once.
printf 'x = zeros([2, 2])\n@gpu:1 y = relu(x)\nprint y\n' >"$tmp/pin2.tfg"
expect place-default 0 "$TFG" place "$tmp/pin2.tfg" && contains place-default "$tmp/err" "2 host devices"
expect place-dot 0 "$TFG" place --dot "$tmp/pin2.tfg" && contains place-dot "$tmp/out" "subgraph cluster_2"
expect devices 0 "$TFG" devices --devices "cuda:0*2:30G,host*2,sim:h100" && contains devices "$tmp/out" "gpu:4"
expect devices-bad 2 "$TFG" devices --devices "tpu*2"

# no_decay: a pattern that matches no param is a warning, located, and the
# program still builds (a typo would otherwise decay what it meant to spare).
printf 'param w: f32[3] = normal(seed = 1)\nloss = sum(w * w)\ntrain loss { optimizer = adamw(lr = 0.1); no_decay = ["*.bias"]; steps = 2 }\n' >"$tmp/nodecay.tfg"
expect no-decay-unmatched 0 "$TFG" check --color=never "$tmp/nodecay.tfg" &&
  contains no-decay-unmatched "$tmp/err" 'nodecay.tfg:3:54: warning: no_decay pattern "*.bias" matches no param'

# TFG_PATH: `import NAME` looks in its ':'-separated folders (after the
# importing file's own, before the standard library); the CLI reads it
# and hands it to the interpreter (tfg_interp_opts.path)
mkdir -p "$tmp/tpath/a" "$tmp/tpath/b" "$tmp/tpath/prog"
printf 'fn twice(x) {\n  return x * 2.0\n}\n' >"$tmp/tpath/b/mymod.tfg"
printf 'import mymod\nprint mymod.twice(tensor([1.5]))\n' >"$tmp/tpath/prog/p.tfg"
expect tfg-path 0 env TFG_PATH="$tmp/tpath/a:$tmp/tpath/b" "$TFG" run "$tmp/tpath/prog/p.tfg" &&
  contains tfg-path "$tmp/out" "[3.]"
expect tfg-path-unset 1 env -u TFG_PATH "$TFG" run --color=never "$tmp/tpath/prog/p.tfg" &&
  contains tfg-path-unset "$tmp/err" "no module named 'mymod'"

# log = "FILE": a CSV row per logged step (header step, loss, metrics, lr,
# rows/s, seconds), written under --quiet too, which prints nothing at all
# (no step, eval or restored line).
mkdir -p "$tmp/logrun"
cat >"$tmp/logrun/m.tfg" <<EOF
import nn
data d = csv("$ROOT/examples/data/digits.csv.gz", label = -1, test = 0.2, shuffle = true, seed = 7)
input x: f32[32, 64] from d.x
input y: i32[32] from d.y
logits = nn.mlp(x / 16.0, [32, 10])
train cross_entropy(logits, y) {
  optimizer = adam(lr = 1e-2)
  lr_schedule = cosine(warmup = 2, total = 40)
  metrics = [accuracy(logits, y)]
  steps = 40
  log_every = 10
  log = "run.csv"
}
EOF
expect log-csv 0 "$TFG" run --quiet "$tmp/logrun/m.tfg" &&
  if [ -s "$tmp/out" ] || [ -s "$tmp/err" ]; then ko "log-csv: --quiet printed"; head -3 "$tmp/out" "$tmp/err"; else ok; fi
contains log-csv-header "$tmp/logrun/run.csv" 'step,loss,"accuracy(logits, y)",lr,rows_per_s,seconds'
if [ "$(grep -c '^[0-9]' "$tmp/logrun/run.csv")" = 4 ] && grep -q '^40,' "$tmp/logrun/run.csv"; then ok
else ko "log-csv: expected rows for steps 10, 20, 30, 40"; cat "$tmp/logrun/run.csv"; fi

# tfg plot: the log as SVG, valid XML, one panel per series (loss,
# accuracy), each polyline a point per logged step; bad input located.
expect plot 0 "$TFG" plot "$tmp/logrun/run.csv" -o "$tmp/logrun/loss.svg" &&
  if python3 - "$tmp/logrun/loss.svg" <<'PY'
import sys, xml.etree.ElementTree as E
t = E.parse(sys.argv[1])
ns = "{http://www.w3.org/2000/svg}"
lines = [p.get("points").split() for p in t.iter(ns + "polyline")]
titles = [x.text for x in t.iter(ns + "text") if x.get("font-weight") == "bold"]
sys.exit(0 if [len(l) for l in lines] == [4, 4] and titles == ["loss", "accuracy(logits, y)"] else 1)
PY
  then ok; else ko "plot: not two polylines of 4 points titled loss and accuracy"; head -c 400 "$tmp/logrun/loss.svg"; fi
expect plot-default-name 0 "$TFG" plot "$tmp/logrun/run.csv" && [ -s "$tmp/logrun/run.svg" ] && ok
printf 'a,b\n1,2\n' >"$tmp/notlog.csv"
expect plot-not-a-log 1 "$TFG" plot "$tmp/notlog.csv" && contains plot-not-a-log "$tmp/err" "notlog.csv:1: error: not a train log"
expect plot-missing 1 "$TFG" plot "$tmp/no-such.csv" && contains plot-missing "$tmp/err" "cannot read"
expect plot-no-file 2 "$TFG" plot

# After training, each device's planned peak and what its pool measured:
# the plan's region is taken from the pool, so the measured peak is at
# least the planned one.
expect train-memory 0 "$TFG" run --devices host*2 "$ROOT/examples/data_parallel.tfg" &&
  contains train-memory "$tmp/err" "memory gpu:1: planned peak"
if grep '^memory ' "$tmp/err" | sed 's/.*planned peak \([0-9.]*\) \([KMG]*i*B\), measured peak \([0-9.]*\) \([KMG]*i*B\)/\1 \2 \3 \4/' |
  awk 'function b(v, u) { return v * (u == "KiB" ? 1024 : u == "MiB" ? 1048576 : u == "GiB" ? 1073741824 : 1) }
       { n++; if (b($3, $4) < b($1, $2)) bad++ } END { exit !(n >= 2 && !bad) }'; then ok
else ko "train-memory: a measured peak below its planned one"; grep '^memory ' "$tmp/err"; fi

# --profile: a table by op from the same events as --trace: matmul's calls
# in the table equal the trace's matmul slices (one run with both).
expect profile 0 "$TFG" run --profile --trace "$tmp/prof.json" "$ROOT/examples/xor.tfg" &&
  contains profile "$tmp/err" "name                     category      calls     total ms      mean us   share"
calls=$(awk '$1 == "matmul" && $2 == "op" { print $3 }' "$tmp/err")
slices=$(python3 -c 'import json,sys; print(sum(1 for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X" and e.get("name") == "matmul"))' "$tmp/prof.json")
if [ -n "$calls" ] && [ "$calls" = "$slices" ] && [ "$calls" -gt 0 ]; then ok
else ko "profile: matmul calls '$calls' in the table, $slices in the trace"; fi

# ---- plans ----------------------------------------------------------------------
# Every example and every placement golden plans, and its plan passes the
# validator (tfg plan checks each plan it prints).
for f in examples/*.tfg tests/golden/place-*.tfg tests/golden/run-*.tfg; do
  spec=$(sed -n 's/^# devices: //p' "$f" | head -1)
  expect "plan-$(basename "$f")" 0 "$TFG" plan ${spec:+--devices "$spec"} "$f"
done
# Activations that cannot fit: an error naming the device, the op and its line, and the bytes.
printf 'x = normal([64, 1], seed = 1)\ny = normal([1, 64], seed = 2)\nz = matmul(x, y)\nprint z\n' >"$tmp/oom.tfg"
expect plan-oom 1 "$TFG" plan --devices 'host*1:1K' "$tmp/oom.tfg" &&
  contains plan-oom "$tmp/err" "oom.tfg:3:5: error: out of memory on gpu:0: matmul needs 16.0 KiB"

# ---- the digits example --------------------------------------------------------
# At least 96% on the held-out 20%, well inside 30 s (timeout) on 2 cores.
expect digits 0 timeout 30 "$TFG" run examples/digits.tfg
acc=$(grep '^eval  step 2200' "$tmp/err" | sed -E 's/.*accuracy ([0-9.]+).*/\1/')
if awk -v a="$acc" 'BEGIN { exit !(a >= 0.96) }'; then ok; else ko "digits: test accuracy '$acc' below 0.96"; fi

# precision = bf16: the product reads its inputs rounded to bf16 (8 bits of
# mantissa). x = 1 + 2^-9 and w = 1 + 2^-10 are both 1 in bf16, so the
# loss's gradient for w is 1 (x rounded), not x, and one SGD step of lr
# 0.5 moves the f32 master weight by exactly 0.5: 1.0009765625 - 0.5 =
# 0.5009765625. The same step in f32 leaves 1.0009765625 - 0.5009765625 =
# 0.5 (the second print). A print outside the train computes in f32: the
# third product is x w, 1.001953125 x 0.5009765625 = 0.50195503 in f32.
cat >"$tmp/bf16.tfg" <<'TFG'
x = tensor([[1.001953125]])
param w: f32[1, 1] = full(1.0009765625)
param v: f32[1, 1] = full(1.0009765625)
train mean(matmul(x, w)) { optimizer = sgd(lr = 0.5); steps = 1; precision = bf16 }
train mean(matmul(x, v)) { optimizer = sgd(lr = 0.5); steps = 1 }
print w, v, matmul(x, w)
TFG
cat >"$tmp/bf16.want" <<'OUT'
w: f32[1,1] @cpu:0
[[0.50097656]]
v: f32[1,1] @cpu:0
[[0.5]]
matmul(x, w): f32[1,1] @cpu:0
[[0.50195503]]
OUT
expect precision-bf16 0 "$TFG" run --quiet "$tmp/bf16.tfg" &&
  if cmp -s "$tmp/out" "$tmp/bf16.want"; then ok; else ko "precision-bf16: printed $(cat "$tmp/out")"; fi

# precision = f16 resumes exactly: its grad scaler's state (scale, good
# steps in a row, skipped steps) is in the checkpoint's metadata, so 10 +
# 10 steps equal 20 (the inputs times 4 overflow the first scaled
# gradients: 5 steps are skipped and the scale is 2048 when the run is
# cut, not the fresh 65536). A scale that is not a number is refused.
mkdir -p "$tmp/f16"
cat >"$tmp/f16/fit.tfg" <<TFG
import nn
let steps = 20
let ckpt = "a.safetensors"
data digits = csv("$ROOT/examples/data/digits.csv.gz", label = -1, test = 0.2, shuffle = true, seed = 7)
input x: f32[16, 64] from digits.x
input y: i32[16] from digits.y
logits = nn.mlp(x * 4.0, [48, 10])
train cross_entropy(logits, y) { optimizer = adam(lr = 1e-3); steps = steps; precision = f16; checkpoint = ckpt; log_every = 10 }
TFG
expect f16-straight 0 "$TFG" run "$tmp/f16/fit.tfg"
expect f16-half 0 "$TFG" run --set steps=10 --set 'ckpt="b.safetensors"' "$tmp/f16/fit.tfg"
cp "$tmp/f16/b.safetensors" "$tmp/f16/b10.safetensors" # step 10: 5 skipped, 5 good in a row
expect f16-resume 0 "$TFG" run --set 'ckpt="b.safetensors"' "$tmp/f16/fit.tfg" &&
  if cmp -s "$tmp/f16/a.safetensors" "$tmp/f16/b.safetensors" && grep -q '"grad_scaler.skipped":"5"' "$tmp/f16/a.safetensors"
  then ok; else ko "cli f16-resume: 10 + 10 steps differ from 20, or no 5 skipped steps in the metadata"; fi
python3 "$ROOT/tests/ckpt_edit.py" "$tmp/f16/b.safetensors" "$tmp/f16/c.safetensors" meta=grad_scaler.scale=abc
expect f16-bad-scale 1 "$TFG" run --color=never --set 'ckpt="c.safetensors"' "$tmp/f16/fit.tfg" &&
  contains f16-bad-scale "$tmp/err" "metadata grad_scaler.scale is 'abc', not a positive number"
# The scaler's keys agree with each other and with the step (they were
# taken one by one: more skipped steps than steps, a missing step or a
# missing scale were accepted).
f16_edit() { # NAME WANT EDIT
  python3 "$ROOT/tests/ckpt_edit.py" "$tmp/f16/b10.safetensors" "$tmp/f16/c.safetensors" "$3"
  expect "$1" 1 "$TFG" run --color=never --set 'ckpt="c.safetensors"' "$tmp/f16/fit.tfg" && contains "$1" "$tmp/err" "$2"
}
f16_edit f16-skipped-past-step "its grad scaler skipped 11 steps with 5 good ones in a row, more than its 10 steps allow" \
  meta=grad_scaler.skipped=11
f16_edit f16-good-past-step "its grad scaler skipped 5 steps with 6 good ones in a row, more than its 10 steps allow" \
  meta=grad_scaler.growth_tracker=6
f16_edit f16-no-step "has a grad scaler's state but no step metadata" meta=step=
f16_edit f16-no-scale "metadata grad_scaler.scale is '(missing)', not a positive number" meta=grad_scaler.scale=

# tfg plan --json: the plan as data. It parses; each device has the steps
# and buffers the text form counts, the same buckets; two runs give the
# same bytes; and a small plan is exactly its golden file (the schema in
# README's "--json schemas" and compiler/plan.h).
expect plan-json 0 "$TFG" plan --json --devices host*2 "$ROOT/examples/data_parallel.tfg" &&
  cp "$tmp/out" "$tmp/plan1.json" &&
  expect plan-json-text 0 "$TFG" plan --devices host*2 "$ROOT/examples/data_parallel.tfg" &&
  if python3 - "$tmp/plan1.json" "$tmp/out" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
want = {m.group(1): (int(m.group(2)), int(m.group(3)))
        for m in re.finditer(r"^(\S+): .*?, (\d+) steps?, (\d+) buffers?", text, re.M)}
got = {x["name"]: (len(x["steps"]), len(x["buffers"])) for x in d["devices"]}
buckets = re.search(r"^buckets: (\d+)", text, re.M)
ok = d["plan"] == 1 and got == want and len(d["buckets"]) == (int(buckets.group(1)) if buckets else 0) and \
    any(s["kind"] == "allreduce" for x in d["devices"] for s in x["steps"])
sys.exit(0 if ok else 1)
PY
  then ok; else ko "plan-json: the JSON plan does not match the text one"; fi
expect plan-json-again 0 "$TFG" plan --json --devices host*2 "$ROOT/examples/data_parallel.tfg" &&
  if cmp -s "$tmp/out" "$tmp/plan1.json"; then ok; else ko "plan-json-again: two runs gave different JSON"; fi
expect plan-json-golden 0 "$TFG" plan --json --devices host*2:256M "$ROOT/tests/golden/place-pinned.tfg" &&
  if cmp -s "$tmp/out" "$ROOT/tests/golden/place-pinned.plan.json"; then ok
  else ko "plan-json-golden: differs from tests/golden/place-pinned.plan.json"; diff "$ROOT/tests/golden/place-pinned.plan.json" "$tmp/out" | head; fi

# tfg plan --predict: on sim devices the table's numbers alone, so the
# same text on every machine (a golden file); on host devices the host is
# measured first (its line), every device that runs has its row; with
# mirrored() the scaling over 1..N replicas, a count the batch does not
# split over said so; a program without a train has nothing to predict.
expect predict-sim 0 "$TFG" plan --predict --devices sim:h100*2 "$ROOT/examples/data_parallel.tfg" &&
  if cmp -s "$tmp/out" "$ROOT/tests/golden/data_parallel.predict"; then ok
  else ko "predict-sim: differs from tests/golden/data_parallel.predict"; diff "$ROOT/tests/golden/data_parallel.predict" "$tmp/out" | head; fi
expect predict-host 0 "$TFG" plan --predict --threads 2 --devices host*2 "$ROOT/examples/data_parallel.tfg" &&
  contains predict-host "$tmp/out" "predicted step: " && contains predict-host "$tmp/out" "host measured: " &&
  if grep -q '^gpu:0 ' "$tmp/out" && grep -q '^gpu:1 ' "$tmp/out"; then ok; else ko "predict-host: no row for gpu:0 and gpu:1"; fi
sed 's/strategy = mirrored([^)]*)/strategy = mirrored()/' "$ROOT/examples/data_parallel.tfg" >"$ROOT/examples/.predict_all.tfg"
expect predict-scaling 0 "$TFG" plan --predict --devices sim:h100*4 "$ROOT/examples/.predict_all.tfg" &&
  contains predict-scaling "$tmp/out" "scaling: mirrored() over 1..4 replicas, the global batch fixed" &&
  contains predict-scaling "$tmp/out" "(the batch does not split over 3)" &&
  if grep -Eq '^ +1 +[0-9.]+ us +1\.00x +100%$' "$tmp/out" && grep -Eq '^ +4 +[0-9.]+ us ' "$tmp/out"; then ok
  else ko "predict-scaling: no rows for 1 and 4 replicas"; fi
rm -f "$ROOT/examples/.predict_all.tfg"
# sim:h100*8x4: 4 nodes of 8, the network between them in the table; the
# same 32 replicas over 4 nodes spend longer in the all-reduce (its ring
# crosses InfiniBand at 50 GB/s, not NVLink's 900) than on one node
expect sim-nodes 0 "$TFG" devices --devices sim:h100*8x4 &&
  if grep -q 'link bw   node  net bw$' "$tmp/out" && grep -Eq '^gpu:31 +sim:h100 .* 3 +50 GB/s$' "$tmp/out" &&
    grep -q 'sim:h100 #8 (hypothetical, node 1): gpu:8$' "$tmp/out"; then ok
  else ko "sim-nodes: no node column or gpu:31 not on node 3: $(grep gpu:31 "$tmp/out")"; fi
expect sim-nodes-json 0 "$TFG" place --json --devices sim:h100*2x2 "$ROOT/examples/data_parallel.tfg" &&
  if python3 -c 'import json, sys; d = {x["name"]: x for x in json.load(open(sys.argv[1]))["devices"]}; sys.exit(not (d["gpu:1"]["node"] == 0 and d["gpu:2"]["node"] == 1 and d["gpu:2"]["net_bw"] == 5e10))' "$tmp/out"
  then ok; else ko "sim-nodes-json: gpu:2 is not on node 1 with 50 GB/s to the others"; fi
ar_of() { awk '$1 == "gpu:0" { v = $6; u = $7; print (u == "us" ? v : u == "ms" ? v * 1e3 : v * 1e6) }' "$1"; }
expect predict-one-node 0 "$TFG" plan --predict --devices sim:h100*32 --set 'strategy=mirrored()' "$ROOT/bench/mlp_wide.tfg" &&
  one=$(ar_of "$tmp/out") &&
  expect predict-nodes 0 "$TFG" plan --predict --devices sim:h100*8x4 --set 'strategy=mirrored()' "$ROOT/bench/mlp_wide.tfg" &&
  four=$(ar_of "$tmp/out") &&
  if [ -n "$one" ] && [ -n "$four" ] && awk -v a="$one" -v b="$four" 'BEGIN { exit !(b > 2 * a) }'; then ok
  else ko "predict-nodes: the all-reduce over 4 nodes ($four us) is not well above one node's ($one us)"; fi
# its scaling keeps to whole nodes past one: 1..8, then 16 and 32, never 9
contains predict-nodes-scaling "$tmp/out" "scaling: mirrored() over 1..32 replicas, the global batch fixed (past one node, whole nodes)" &&
  if grep -Eq '^ +16 +[0-9.]+ [mu]s ' "$tmp/out" && grep -Eq '^ +32 +[0-9.]+ [mu]s ' "$tmp/out" && ! grep -Eq '^ +9 ' "$tmp/out"; then ok
  else ko "predict-nodes-scaling: not whole nodes past 8"; fi
printf 'print 1 + 2\n' >"$tmp/notrain.tfg"
expect predict-none 0 "$TFG" plan --predict "$tmp/notrain.tfg" && contains predict-none "$tmp/out" "nothing to predict"
expect predict-place 2 "$TFG" place --predict "$ROOT/examples/data_parallel.tfg" &&
  contains predict-place "$tmp/err" "unknown option '--predict'"

# ---- the GPT example -------------------------------------------------------------
# A tiny configuration of examples/gpt.tfg (causal mask, tied embeddings,
# AdamW on byte windows): the logged loss falls from near log(256) = 5.5 by
# more than a nat in 40 steps, the run is deterministic (the same log twice,
# less the speed), and the test split is evaluated.
gpt_tiny="--set d=32 --set layers=1 --set T=16 --set batch=8 --set steps=40 --set log_every=4 --set log_file=\"$tmp/gpt-run.csv\""
# shellcheck disable=SC2086 # $gpt_tiny is an option list
expect gpt-tiny 0 timeout 60 "$TFG" run $gpt_tiny examples/gpt.tfg &&
  sed 's/  [0-9.]* steps\/s//' "$tmp/err" | grep -E '^(step|eval)' >"$tmp/gpt1.log"
gpt_first=$(sed -n 's/^step 4\/40  loss \([0-9.]*\).*/\1/p' "$tmp/gpt1.log")
gpt_last=$(sed -n 's/^step 40\/40  loss \([0-9.]*\).*/\1/p' "$tmp/gpt1.log")
if awk -v a="$gpt_first" -v b="$gpt_last" 'BEGIN { exit !(a > 4.5 && a < 5.6 && b < a - 1.0) }'; then ok
else ko "gpt-tiny: loss '$gpt_first' at step 4, '$gpt_last' at step 40: expected a fall of more than 1 from near 5.5"; fi
contains gpt-tiny-eval "$tmp/gpt1.log" "eval  step 40  test loss"
# shellcheck disable=SC2086
expect gpt-tiny-again 0 timeout 60 "$TFG" run $gpt_tiny examples/gpt.tfg &&
  sed 's/  [0-9.]* steps\/s//' "$tmp/err" | grep -E '^(step|eval)' >"$tmp/gpt2.log"
if cmp -s "$tmp/gpt1.log" "$tmp/gpt2.log" && [ -s "$tmp/gpt1.log" ]; then ok; else ko "gpt-tiny: two runs logged different losses"; fi
# Its plan launches no reshape or flatten: they are views of their inputs'
# buffers (docs/plan.md, Views); TFG_OPT=0 launches them.
# shellcheck disable=SC2086
expect gpt-plan-views 0 "$TFG" plan --color=never $gpt_tiny examples/gpt.tfg &&
  if grep -qE 'launch +n[0-9]+ (reshape|flatten)' "$tmp/out"; then ko "gpt-plan-views: a reshape is launched"
  else ok; fi
contains gpt-plan-views "$tmp/out" "views (no launch, no copy)"
# shellcheck disable=SC2086
expect gpt-plan-no-views 0 env TFG_OPT=0 "$TFG" plan --color=never $gpt_tiny examples/gpt.tfg &&
  if grep -qE 'launch +n[0-9]+ reshape' "$tmp/out" && ! grep -q 'view of' "$tmp/out"; then ok
  else ko "gpt-plan-no-views: with TFG_OPT=0 the reshapes should be launched"; fi
# The whole plan of the tiny GPT, exactly (tests/golden/gpt-tiny.plan):
# the mask, the scale and the constant gradients folded into persistent
# constants, none uploaded per step (the only host copy a step makes is
# the input batch), no reshape launched. When a planner change is meant
# to change it, regenerate it with
#   build/tfg plan --color=never --devices host $gpt_tiny examples/gpt.tfg >tests/golden/gpt-tiny.plan
# shellcheck disable=SC2086
expect gpt-plan-golden 0 "$TFG" plan --color=never --devices host $gpt_tiny examples/gpt.tfg &&
  if cmp -s "$tmp/out" "$ROOT/tests/golden/gpt-tiny.plan"; then ok
  else ko "gpt-plan-golden: tfg plan differs from tests/golden/gpt-tiny.plan"; diff "$ROOT/tests/golden/gpt-tiny.plan" "$tmp/out" | head -20; fi
# attention's fused gradient keeps no Tq x Tk tensor: the planned peak of
# 4 transformer blocks (bench/gpt_layers.tfg, batch 4) grows with T as
# the activations do, not as T^2. With TFG_ATTENTION_GRAD=0 the gradient
# goes through the probabilities (4 x 4 heads x T x T floats and their
# gradient chain, 1.3 GiB at T 2048 against 604 MiB fused).
att_peak() { # att_peak T [VAR=VALUE]: the plan's peak bytes on gpu:0
  env ${2:-TFG_X=} "$TFG" plan --devices host --set "seq=$1" --set batch=4 "$ROOT/bench/gpt_layers.tfg" 2>&1 |
    sed -n 's/^gpu:0: .*(\([0-9]*\) bytes)$/\1/p'
}
p1=$(att_peak 1024) p2=$(att_peak 2048) u2=$(att_peak 2048 TFG_ATTENTION_GRAD=0)
if [ -n "$p1" ] && [ -n "$p2" ] && [ -n "$u2" ] && [ "$p2" -lt $((p1 * 2 + p1 / 10)) ] && [ "$p2" -lt $((u2 / 2)) ]; then ok
else ko "attention-grad-memory: peaks T 1024 '$p1', T 2048 '$p2', T 2048 unfused '$u2': fused should grow about 2x and stay below half the unfused"; fi
# The layout pass moves no work: the tiny GPT's FLOPs per step are the
# same with the heads' transposes folded into its attention ops (their
# costs read the operands through the views) and with TFG_LAYOUT=0.
gpt_flops() {
  env ${1:-TFG_X=} "$TFG" place --json --devices host --set d=32 --set layers=1 --set T=64 --set batch=8 \
    "$ROOT/examples/gpt.tfg" | grep '"device": "gpu:0", "ops"' | sed 's/.*"flops": \([^,]*\),.*/\1/'
}
f_on=$(gpt_flops) f_off=$(gpt_flops TFG_LAYOUT=0)
if [ -n "$f_on" ] && [ "$f_on" = "$f_off" ]; then ok
else ko "layout-flops: the GPT's FLOPs $f_on with the layout pass, $f_off without"; fi
# Evaluation is over exactly the test split's rows, each counted once
# (runtime/train.c, evaluate): 20 rows labelled 0..19, the test split the
# last ones, batches of 4, the metric the mean label. 5 rows (15..19): one
# whole batch and 1 row: 17 exactly; 7 rows (13..19): 16 exactly; 3 rows
# (17..19), no whole batch: 18 exactly (it wrapped around to 17 and said
# "1 counted twice": 17.75). Also mirrored (each replica gets its part of
# the padded batch).
seq 0 19 | awk '{ print $1 "," $1 }' >"$tmp/labels.csv"
eval_program() { # FILE TEST STRATEGY
  {
    echo "import nn"
    echo "data d = csv(\"$tmp/labels.csv\", label = -1, test = $2)"
    echo "input x: f32[4, 1] from d.x"
    echo "input y: i32[4] from d.y"
    echo "logits = nn.dense(x, 20, act = nn.identity)"
    echo "train cross_entropy(logits, y) { optimizer = sgd(lr = 0.0); steps = 1; metrics = [mean(cast(y, f32))]$3 }"
  } >"$1"
}
for c in 0.25:17.0000:5 0.35:16.0000:7 0.15:18.0000:3; do # TEST:MEAN:ROWS
  frac=${c%%:*} mean=${c#*:}
  n=${mean#*:} mean=${mean%%:*}
  eval_program "$tmp/eval.tfg" "$frac" ""
  expect "eval-exact-$n" 0 "$TFG" run --devices host "$tmp/eval.tfg" &&
    contains "eval-exact-$n" "$tmp/err" "mean(cast(y, f32)) $mean  ($n rows)"
  eval_program "$tmp/eval.tfg" "$frac" "; strategy = mirrored([gpu:0, gpu:1])"
  expect "eval-exact-mirrored-$n" 0 "$TFG" run --devices host*2 "$tmp/eval.tfg" &&
    contains "eval-exact-mirrored-$n" "$tmp/err" "mean(cast(y, f32)) $mean  ($n rows)"
done
# tfg's checkpoints read back with an independent reader written from the
# safetensors specification (tests/ckpt_reader.py, standard library only).
expect ckpt-reader 0 python3 tests/ckpt_reader.py "$tmp/train/a.safetensors" &&
  contains ckpt-reader "$tmp/out" "w F32 [4, 1]" && contains ckpt-reader "$tmp/out" "w:exp_avg_sq F32 [4, 1]" &&
  contains ckpt-reader "$tmp/out" "meta step 100" && contains ckpt-reader "$tmp/out" "meta optimizer adam"

# ---- fusion --------------------------------------------------------------------
# Chains of elementwise ops run as one launch (compiler/plan.h, Fusion);
# TFG_FUSE=0 turns fusion off, and results do not change. The constants 2
# and 1 are persistent (written once, docs/plan.md): the normal draw and
# the chain are the only launches.
printf 'x = normal([4, 3], seed = 1)\ny = relu(x * 2 + 1)\nprint y\n' >"$tmp/fuse.tfg"
expect plan-fused 0 "$TFG" plan "$tmp/fuse.tfg" &&
  contains plan-fused "$tmp/out" "launch  fused relu(add(mul)) n5 (fuse.tfg:2), members n2 n4 n5"
if [ "$(grep -c '  launch  ' "$tmp/out")" = 2 ] && [ "$(grep -c 'fused' "$tmp/out")" = 2 ]; then ok
else ko "cli plan-fused: not one fused launch among 2"; fi
expect plan-unfused 0 env TFG_FUSE=0 "$TFG" plan "$tmp/fuse.tfg"
if grep -q fused "$tmp/out"; then ko "cli plan-unfused: TFG_FUSE=0 still fuses"; else ok; fi
# A plan with GPUs says whether its runs can be captured as CUDA graphs
# (compiler/plan.h, tfg_plan_capturable): yes when cpu:0 only feeds them;
# no when cpu:0 waits for a GPU's result (it runs first, to the end)
printf 'a = normal([4], seed = 1)\nwith gpu:0 { y = a * 2.0 }\nprint y\n' >"$tmp/fwd.tfg"
expect plan-graphs 0 "$TFG" plan --devices sim:h100 "$tmp/fwd.tfg" &&
  contains plan-graphs "$tmp/out" "graphs: runs seen before can be replayed as CUDA graphs on gpu:0"
printf 'a = normal([4], seed = 1)\nwith gpu:0 { y = a * 2.0 }\nwith cpu { z = y + 1.0 }\nprint z\n' >"$tmp/back.tfg"
expect plan-no-graphs 0 "$TFG" plan --devices sim:h100 "$tmp/back.tfg" &&
  contains plan-no-graphs "$tmp/out" "graphs: not captured: cpu:0 waits for gpu:0 (its step 0)"
expect plan-host-no-graphs-line 0 "$TFG" plan --devices host "$tmp/fwd.tfg"
if grep -q '^graphs:' "$tmp/out"; then ko "cli plan-host-no-graphs-line: a host plan names graphs"; else ok; fi
# digits (an MLP: no chain fuses in it) and xor (tanh's gradient fuses): the same
# output, and the same log and evaluation lines (less their speed), with
# fusion as without.
for ex in digits xor; do
  expect "fused-$ex" 0 "$TFG" run "examples/$ex.tfg" && cp "$tmp/out" "$tmp/fused.out" &&
    grep -E '^(step|eval)' "$tmp/err" | sed 's/  [0-9.]* steps\/s//' >"$tmp/fused.log"
  expect "unfused-$ex" 0 env TFG_FUSE=0 "$TFG" run "examples/$ex.tfg" &&
    grep -E '^(step|eval)' "$tmp/err" | sed 's/  [0-9.]* steps\/s//' >"$tmp/unfused.log"
  if cmp -s "$tmp/out" "$tmp/fused.out" && cmp -s "$tmp/fused.log" "$tmp/unfused.log" && [ -s "$tmp/fused.log" ]; then ok
  else ko "cli fused-$ex: output or log differs with TFG_FUSE=0"; fi
done

# ---- constant folding -------------------------------------------------------------
# Ops that depend on no input, param or random op are computed once when the
# program is compiled (compiler/fold.h; the golden plan-attention.plan shows
# a plan). TFG_OPT=0 turns it off: the same output and log lines, bit for
# bit (folding runs the CPU kernels the ops would run), and nothing folded.
for ex in digits xor hello; do
  expect "opt-$ex" 0 "$TFG" run "examples/$ex.tfg" && cp "$tmp/out" "$tmp/opt.out" &&
    grep -E '^(step|eval)' "$tmp/err" | sed 's/  [0-9.]* steps\/s//' >"$tmp/opt.log"
  expect "no-opt-$ex" 0 env TFG_OPT=0 "$TFG" run "examples/$ex.tfg" &&
    grep -E '^(step|eval)' "$tmp/err" | sed 's/  [0-9.]* steps\/s//' >"$tmp/noopt.log"
  if cmp -s "$tmp/out" "$tmp/opt.out" && cmp -s "$tmp/opt.log" "$tmp/noopt.log"; then ok
  else ko "cli opt-$ex: output or log differs with TFG_OPT=0"; fi
done
expect plan-folded 0 "$TFG" plan examples/hello.tfg && contains plan-folded "$tmp/out" "folded into 2 constants"
expect plan-not-folded 0 env TFG_OPT=0 "$TFG" plan examples/hello.tfg
if grep -q folded "$tmp/out"; then ko "cli plan-not-folded: TFG_OPT=0 still folds"; else ok; fi

# ---- shapes too large -----------------------------------------------------------
printf 'param w: f32[10000000000, 10000000000]\n' >"$tmp/huge1.tfg"
expect huge-type 1 "$TFG" check "$tmp/huge1.tfg" && contains huge-type "$tmp/err" "has more than 2^48 elements"
printf 'x = zeros([10000000000, 10000000000])\n' >"$tmp/huge2.tfg"
expect huge-init 1 "$TFG" check "$tmp/huge2.tfg" && contains huge-init "$tmp/err" "zeros: the shape has more than 2^48 elements"
# Larger than this host: memory that cannot fit is a located error of the
# program, found before anything runs (exit 1); nothing is allocated.
printf 'param w: f32[1000000, 1000000]\nprint sum(w)\n' >"$tmp/huge3.tfg"
expect huge-param-run 1 "$TFG" run "$tmp/huge3.tfg" && contains huge-param-run "$tmp/err" "no device has room for the 3.6 TiB"

# ---- found by review -------------------------------------------------------------
# A print of many items (more than any fixed array).
python3 -c "print('x = zeros([1])'); print('print ' + ', '.join(['x'] * 70 + [str(i) for i in range(80)]))" >"$tmp/many.tfg"
expect print-many 0 "$TFG" run "$tmp/many.tfg" && contains print-many "$tmp/out" "79: 79"
# Long scope paths name params without limit (no truncation, no hang).
python3 -c "
a = 'a' * 300
print('fn f(x) { param w: f32[1] = zeros(); return x }')
print('scope %s { scope %s { y = f(1); y = f(1); param w: f32[1]; param w: f32[1] } }' % (a, a))" >"$tmp/long_scope.tfg"
expect long-scope 0 timeout 10 "$TFG" place --json "$tmp/long_scope.tfg" &&
  contains long-scope "$tmp/out" ".y_1.w\"" && contains long-scope "$tmp/out" ".w_1\""
# A dataset input with a batch of 0 is refused where it is declared.
printf '1,2,0\n3,4,1\n' >"$tmp/d0.csv"
printf 'data d = csv("d0.csv", label = -1)\ninput x: f32[0, 2] from d.x\n' >"$tmp/b0.tfg"
expect batch-zero 1 "$TFG" check "$tmp/b0.tfg" && contains batch-zero "$tmp/err" "a dimension must be at least 1, got 0"
# Unseeded dropouts draw different masks (mean(a * b) is 1 for independent masks, 2 for equal ones).
cat >"$tmp/drop.tfg" <<'TFG'
param w: f32[100, 100] = ones()
a = dropout(w, 0.5)
b = dropout(w * 1.0, 0.5)
train mean(a * b) { optimizer = sgd(lr = 0.0); steps = 1; log_every = 1 }
TFG
expect dropout-independent 0 "$TFG" run "$tmp/drop.tfg"
loss=$(grep '^step 1/1' "$tmp/err" | sed -E 's/.*loss ([0-9.]+).*/\1/')
if awk -v a="$loss" 'BEGIN { exit !(a > 0.85 && a < 1.15) }'; then ok; else ko "dropout-independent: mean(a * b) = $loss"; fi
# Metrics are float scalars.
printf 'param w: f32[2]\ntrain sum(w * w) { optimizer = sgd(lr = 0.1); steps = 1; metrics = [w] }\n' >"$tmp/metric.tfg"
expect metric-scalar 1 "$TFG" check "$tmp/metric.tfg" && contains metric-scalar "$tmp/err" "metrics must be a list of float scalars"
expect feed-twice 2 "$TFG" run --feed z=a.npy --feed z=b.npy examples/hello.tfg
