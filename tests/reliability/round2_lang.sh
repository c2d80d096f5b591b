# tests/reliability/round2_lang.sh: the language's part of round 2 (a NaN
# attention scale, build-time arithmetic errors, act = none in nn, eval_every
# with nothing to evaluate, NaN and inf in messages and prints). The messages
# themselves are golden files (build-attention-scale-*, build-arith-*,
# run-nn-act-none, build-settings-eval-every-*, err-load-block-stmt,
# build-settings-clip-inf, build-dim-nan, run-print-nan); these are the checks
# a golden file cannot make: exit codes of `tfg run`, --set, two programs
# compared, no step run, and every place a NaN reaches a message at once.
# Sourced by tests/run.sh from the checkout's root with $TFG, $ROOT, $tmp and
# tests/lib.sh's helpers (every variable here starts r2_: the file is
# sourced into run.sh's shell, whose loop variable is f).
suite=round2-lang
r2="$tmp/round2_lang"
mkdir -p "$r2"
r2_digits="$ROOT/examples/data/digits.csv.gz"

# ---- A: a NaN attention scale is refused, however the NaN is made ----------
# --set gives a top-level let a NaN: the program reads fine, the value not.
printf 'let s = 0.5\ninput q: f32[1, 2, 4, 8]\nh = attention(q, q, q, scale = s)\n' >"$r2/scale.tfg"
expect scale-set-nan 1 "$TFG" check --color=never --set 's=1e308 * 10.0 - 1e308 * 10.0' "$r2/scale.tfg" &&
  contains scale-set-nan "$tmp/err" "scale.tfg:3:24: error: 'scale' must be a number, got NaN"
expect scale-set-inf 1 "$TFG" check --color=never --set 's=-1e308 * 10.0' "$r2/scale.tfg" &&
  contains scale-set-inf "$tmp/err" "error: 'scale' must be a finite number, got -inf"
expect scale-finite 0 "$TFG" check "$r2/scale.tfg"
# none still asks for the default 1 / sqrt(hd), which a number equal to it gives too.
printf 'q = reshape(cast(arange(0, 16), f32), [1, 2, 8]) / 16.0\nprint attention(q, q, q, scale = %s)\n' none \
  >"$r2/none.tfg"
printf 'q = reshape(cast(arange(0, 16), f32), [1, 2, 8]) / 16.0\nprint attention(q, q, q, scale = %s)\n' \
  '1.0 / 2.8284271247461903' >"$r2/given.tfg"
expect scale-none 0 "$TFG" run "$r2/none.tfg" && sed 1d "$tmp/out" >"$r2/none.out"
expect scale-given 0 "$TFG" run "$r2/given.tfg" && sed 1d "$tmp/out" >"$r2/given.out"
if cmp -s "$r2/none.out" "$r2/given.out"; then ok; else ko "$suite scale-none: not the values of scale = 1 / sqrt(8)"; fi

# ---- B: build-time arithmetic errors stay program errors (exit 1) ----------
# Their status is TFG_ERR_ARITH now, not TFG_ERR_NAME: the exit code is the
# user's contract and must not move.
for r2_e in '1 / 0|division by zero' '7 % 0|modulo by zero' '1.5 / 0.0|division by zero' \
  '9223372036854775807 + 1|integer overflow in 9223372036854775807 + 1' \
  '-(-9223372036854775807 - 1)|integer overflow'; do
  r2_expr=${r2_e%|*} r2_msg=${r2_e#*|}
  printf 'let x = %s\nprint x\n' "$r2_expr" >"$r2/arith.tfg"
  expect "arith-check $r2_expr" 1 "$TFG" check --color=never "$r2/arith.tfg" &&
    contains "arith-check $r2_expr" "$tmp/err" "arith.tfg:1:9: error: $r2_msg"
  expect "arith-run $r2_expr" 1 "$TFG" run --color=never "$r2/arith.tfg"
done

# ---- C: act = none is no activation, the same values as nn.identity --------
# One program per spelling, with the same binding names: params are drawn
# from their names, so the two build the same params.
for r2_act in none nn.identity; do
  {
    echo "import nn"
    echo "x = reshape(cast(arange(0, 12), f32), [3, 4]) / 12.0 - 0.5"
    echo "h = nn.dense(x, 5, act = $r2_act)"
    echo "m = nn.mlp(x, [6, 6, 2], act = $r2_act)"
    echo "c = nn.conv_block(reshape(x, [1, 1, 3, 4]), 2, pool = 1, act = $r2_act)"
    echo "print h, m, c"
  } >"$r2/act.tfg"
  expect "act-$r2_act" 0 "$TFG" run "$r2/act.tfg" && sed 's/act = [a-z.]*/act = X/' "$tmp/out" >"$r2/act-$r2_act.out"
done
if cmp -s "$r2/act-none.out" "$r2/act-nn.identity.out"; then ok; else
  ko "$suite act-none: other values than act = nn.identity"; diff "$r2/act-none.out" "$r2/act-nn.identity.out" | head -5
fi
# A train through dense(act = none) (the logits layer Keras users write).
{
  echo "import nn"
  echo "data d = csv(\"$r2_digits\", label = -1, test = 0.2)"
  echo "input x: f32[16, 64] from d.x"
  echo "input y: i32[16] from d.y"
  echo "logits = nn.dense(nn.dense(x / 16.0, 32), 10, act = none)"
  echo "train cross_entropy(logits, y) { optimizer = adam(lr = 1e-2); steps = 3; log_every = 3 }"
} >"$r2/act-train.tfg"
expect act-none-train 0 "$TFG" run --color=never "$r2/act-train.tfg" && contains act-none-train "$tmp/err" "step 3/3"

# ---- D: eval_every with nothing to evaluate stops before the first step -----
r2_model="input x: f32[16, 64] from d.x
input y: i32[16] from d.y
param w: f32[64, 10] = glorot()
loss = cross_entropy(matmul(x / 16.0, w), y)"
printf 'data d = csv("%s", label = -1)\n%s\ntrain loss { optimizer = sgd(lr = 0.1); steps = 4; eval_every = 2 }\n' \
  "$r2_digits" "$r2_model" >"$r2/eval-no-test.tfg"
expect eval-no-test 1 timeout 20 "$TFG" run --color=never "$r2/eval-no-test.tfg" &&
  contains eval-no-test "$tmp/err" "eval_every has no test split to evaluate"
contains eval-no-test-help "$tmp/err" "help: give the dataset a test fraction"
if grep -q "^step" "$tmp/err"; then ko "$suite eval-no-test: a step ran"; else ok; fi
# test = 0 said outright is the same: no test rows.
sed 's/label = -1)/label = -1, test = 0)/' "$r2/eval-no-test.tfg" >"$r2/eval-test-0.tfg"
expect eval-test-0 1 "$TFG" check --color=never "$r2/eval-test-0.tfg" &&
  contains eval-test-0 "$tmp/err" "holds out no rows"
# With a test split it evaluates at the cadence (and at the end).
sed 's/label = -1)/label = -1, test = 0.2)/' "$r2/eval-no-test.tfg" >"$r2/eval-test.tfg"
expect eval-test 0 "$TFG" run --color=never "$r2/eval-test.tfg" && contains eval-test "$tmp/err" "eval  step 2  test loss"
# Without eval_every a program without a test split still trains.
sed 's/; eval_every = 2//' "$r2/eval-no-test.tfg" >"$r2/no-eval.tfg"
expect no-eval 0 "$TFG" run --quiet "$r2/no-eval.tfg"

# ---- E: messages --------------------------------------------------------------
# A statement in a load block names the load block, in a train block the train block.
printf 'param w: f32[2]\nload "m.safetensors" { print w }\n' >"$r2/load.tfg"
expect load-block 1 "$TFG" check --color=never "$r2/load.tfg" &&
  contains load-block "$tmp/err" "help: a load block holds settings only, such as: strict = false"
printf 'param w: f32[2]\ntrain sum(w) { print w }\n' >"$r2/train.tfg"
expect train-block 1 "$TFG" check --color=never "$r2/train.tfg" &&
  contains train-block "$tmp/err" "help: a train block holds settings only, such as: steps = 100"
# Every float that must be finite says NaN or inf, at its argument or setting,
# and no message or print ever says "-nan" (inf - inf has its sign bit set).
r2_pre='let inf = 1e308 * 10.0
let nan = inf - inf
data d = csv("'"$r2_digits"'", label = -1, test = 0.2)
param w: f32[3] = normal(seed = 1)
x = ones([2, 3])
loss = sum(w * w)'
for r2_c in 'train loss { optimizer = sgd(lr = 0.1); clip_grad_norm = nan; steps = 2 }|clip_grad_norm must be a number, got NaN' \
  'train loss { optimizer = sgd(lr = 0.1); clip_grad_norm = -inf; steps = 2 }|clip_grad_norm must be a finite number, got -inf' \
  'train loss { optimizer = adamw(lr = 0.1, weight_decay = inf); steps = 2 }|'"'weight_decay' must be a finite number, got inf" \
  'train loss { optimizer = sgd(lr = nan); steps = 2 }|'"'lr' must be a number, got NaN" \
  'train loss { optimizer = sgd(lr = 0.1); lr_schedule = cosine(total = 9, min = nan); steps = 2 }|'"'min' must be a number, got NaN" \
  'train loss { optimizer = sgd(lr = 0.1); steps = nan }|steps must be an integer, got nan' \
  'print dropout(x, nan)|'"'rate' must be a number, got NaN" \
  'print layer_norm(x, ones([3]), zeros([3]), eps = inf)|'"'eps' must be a finite number, got inf" \
  'data e = csv("'"$r2_digits"'", label = -1, test = nan)|'"'test' must be a number, got NaN" \
  'print reshape(x, [nan, 3])|'"'shape' must hold integers, got nan at position 0" \
  'print tensor([nan], dtype = i32)|tensor: nan is not a whole number' \
  'param u: f32[2] = uniform(lo = 1.0, hi = -inf)|uniform: lo (1) is above hi (-inf)'; do
  r2_stmt=${r2_c%%|*} r2_msg=${r2_c#*|}
  printf '%s\n%s\n' "$r2_pre" "$r2_stmt" >"$r2/finite.tfg"
  expect "finite $r2_stmt" 1 "$TFG" check --color=never "$r2/finite.tfg" &&
    contains "finite $r2_stmt" "$tmp/err" "finite.tfg:7:"
  contains "finite $r2_stmt" "$tmp/err" "error: $r2_msg"
  if grep -q -- "-nan" "$tmp/err"; then ko "$suite finite $r2_stmt: says -nan"; else ok; fi
done
# Build-time values print nan, in `tfg run` and in the REPL, as tensors do.
printf 'let inf = 1e308 * 10.0\nprint inf - inf, [inf - inf]\nprint ones([2]) * (inf - inf)\n' >"$r2/nan.tfg"
expect print-nan 0 "$TFG" run --color=never "$r2/nan.tfg" && contains print-nan "$tmp/out" "[inf - inf]: [nan]"
if grep -q -- "-nan" "$tmp/out"; then ko "$suite print-nan: prints -nan"; else ok; fi
printf 'let inf = 1e308 * 10.0\ninf - inf\n' >"$r2/repl.in"
expect repl-nan 0 "$TFG" repl --color=never <"$r2/repl.in" && contains repl-nan "$tmp/out" "nan"
if grep -q -- "-nan" "$tmp/out"; then ko "$suite repl-nan: shows -nan"; else ok; fi
