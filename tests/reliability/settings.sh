# tests/reliability/settings.sh: a train block's settings and the calls
# in it (issue 13, items 3 to 8): what the golden files cannot show
# (build-settings-*.tfg show the messages): that bad settings stop
# `tfg run` before the first step, that a checkpoint's folder is checked
# as the file system stands, the spec's bare `strategy = single`, and the
# warning for a loss no gradient reaches (a warning: `tfg check` passes).
# Sourced by tests/run.sh ($TFG, $ROOT, $tmp, expect, contains, ok, ko).
suite=settings
st="$tmp/settings"
mkdir -p "$st"

# st_program FILE TRAIN...: FILE.tfg, a linear model on the digits (batch
# 16) with a loss `loss`, then the lines TRAIN.
st_program() {
  f=$1
  shift
  {
    echo "data d = csv(\"$ROOT/examples/data/digits.csv.gz\", label = -1, test = 0.2)"
    echo "input x: f32[16, 64] from d.x"
    echo "input y: i32[16] from d.y"
    echo "param w: f32[64, 10] = glorot()"
    echo "logits = matmul(x / 16.0, w)"
    echo "loss = cross_entropy(logits, y)"
    printf '%s\n' "$@"
  } >"$f.tfg"
}

# Errors in settings stop `tfg run` before any step (exit 1, no step
# logged): the epochs that overflowed trained 2 steps and exited 0.
st_program "$st/epochs" 'train loss { optimizer = sgd(lr = 0.1); epochs = 6148914691236517206 }'
expect run-epochs-overflow 1 timeout 20 "$TFG" run --color=never "$st/epochs.tfg" &&
  contains run-epochs-overflow "$tmp/err" "epochs must be at most 2^53"
if grep -q "^step" "$tmp/err"; then ko "settings run-epochs-overflow: a step ran"; else ok; fi
# 10^15 epochs of 89 batches: past 2^53 only once multiplied.
st_program "$st/epochs2" 'train loss { optimizer = sgd(lr = 0.1); epochs = 1000000000000000 }'
expect run-epochs-total 1 timeout 20 "$TFG" run --color=never "$st/epochs2.tfg" &&
  contains run-epochs-total "$tmp/err" "1000000000000000 epochs of 89 batches are 8.9e+16 steps"

# Each bad optimizer argument, refused at the argument (it trained with
# 0, 1.0 or the default in its place).
for arg in 'sgd(lr = "x")|lr' 'sgd(lr = [0.1])|lr' 'sgd(lr = ones([1]))|lr' 'sgd(lr = true)|lr' \
  'adam(b1 = "q")|b1' 'adam(b2 = none)|b2' 'sgd(lr = 0.1, momentum = "q")|momentum' \
  'adamw(weight_decay = "q")|weight_decay' 'adam(eps = "q")|eps'; do
  call=${arg%|*} param=${arg#*|}
  st_program "$st/opt" "train loss { optimizer = $call; steps = 2 }"
  expect "optimizer $call" 1 "$TFG" run --color=never "$st/opt.tfg" &&
    contains "optimizer $call" "$tmp/err" "error: '$param' must be a number, got"
done
st_program "$st/nan" 'let inf = 1e308 * 10.0' 'train loss { optimizer = adamw(lr = inf - inf); steps = 2 }'
expect optimizer-nan 1 "$TFG" check --color=never "$st/nan.tfg" &&
  contains optimizer-nan "$tmp/err" ":8:32: error: 'lr' must be a number, got NaN"

# The spec's bare constructors: strategy = single (LANGUAGE.md section
# 6), optimizer = adam with its defaults; they train as their calls.
st_program "$st/bare" 'train loss { optimizer = adam; steps = 3; strategy = single; seed = 1; checkpoint = "bare.safetensors" }'
st_program "$st/called" 'train loss { optimizer = adam(); steps = 3; strategy = single(); seed = 1; checkpoint = "called.safetensors" }'
expect bare-constructors 0 "$TFG" run --quiet "$st/bare.tfg"
expect called-constructors 0 "$TFG" run --quiet "$st/called.tfg"
if cmp -s "$st/bare.safetensors" "$st/called.safetensors"; then ok; else ko "settings bare-constructors: another result than the calls"; fi

# Whole floats are counts, as wherever tfg needs an integer.
st_program "$st/float" 'train loss { optimizer = sgd(lr = 0.1); steps = 2.0; log_every = 1e0 }'
expect float-steps 0 "$TFG" run --color=never "$st/float.tfg" && contains float-steps "$tmp/err" "step 2/2"

# Checkpoints: checked when the setting is evaluated (`tfg check`, and
# before the first step of `tfg run`), against the file system.
st_program "$st/ck" 'train loss { optimizer = sgd(lr = 0.1); steps = 2; checkpoint = "out/m.safetensors" }'
expect ckpt-no-folder 1 "$TFG" check --color=never "$st/ck.tfg" &&
  contains ckpt-no-folder "$tmp/err" "error: the folder '$st/out' of checkpoint '$st/out/m.safetensors' does not exist"
expect ckpt-no-folder-run 1 "$TFG" run --color=never "$st/ck.tfg"
if grep -q "^step" "$tmp/err"; then ko "settings ckpt-no-folder-run: a step ran"; else ok; fi
mkdir -p "$st/out"
expect ckpt-folder-made 0 "$TFG" run --quiet "$st/ck.tfg"
if [ "$(id -u)" -ne 0 ]; then # root writes anywhere
  chmod a-w "$st/out"
  expect ckpt-folder-read-only 1 "$TFG" check --color=never "$st/ck.tfg" &&
    contains ckpt-folder-read-only "$tmp/err" "cannot be written in folder '$st/out': Permission denied"
  chmod u+w "$st/out"
fi
mkfifo "$st/out/fifo.safetensors"
st_program "$st/ckfifo" 'train loss { optimizer = sgd(lr = 0.1); steps = 2; checkpoint = "out/fifo.safetensors" }'
expect ckpt-fifo 1 "$TFG" check --color=never "$st/ckfifo.tfg" &&
  contains ckpt-fifo "$tmp/err" "is not a regular file"

# Jobs of one group may not share a param; a print between them ends the
# group, and a parameter_server job runs alone.
st_program "$st/apart" 'train loss { optimizer = sgd(lr = 0.1); steps = 2 }' 'print w' \
  'train loss { optimizer = adam(); steps = 2 }'
expect group-broken-by-print 0 "$TFG" check --color=never "$st/apart.tfg"
st_program "$st/ps" 'train loss { optimizer = sgd(lr = 0.1); steps = 2; strategy = parameter_server(workers = [gpu:0, gpu:1]) }' \
  'train loss { optimizer = adam(); steps = 2 }'
expect group-ps-alone 0 "$TFG" check --color=never "$st/ps.tfg"
# Two spellings of one checkpoint, also across groups.
st_program "$st/twice" 'train loss { optimizer = sgd(lr = 0.1); steps = 2; checkpoint = "out/a.safetensors" }' 'print w' \
  'train loss { optimizer = adam(); steps = 2; checkpoint = "out/../out/a.safetensors" }'
expect ckpt-twice 1 "$TFG" check --color=never "$st/twice.tfg" &&
  contains ckpt-twice "$tmp/err" "is another train's checkpoint too"

# A loss that reaches its param only through argmax, or a cast to an
# integer: a warning that names where the gradient stops (it trained with
# zero gradients in silence).
st_program "$st/argmax" 'train mean(cast(argmax(logits), f32)) { optimizer = sgd(lr = 0.1); steps = 2 }'
expect no-gradient-argmax 0 "$TFG" check --color=never "$st/argmax.tfg" &&
  contains no-gradient-argmax "$tmp/err" ":7:1: warning: no gradient flows to any param" &&
  contains no-gradient-argmax "$tmp/err" ":7:17: note: the gradient stops at argmax: its i32 result carries none"
st_program "$st/cast" 'train mean(cast(cast(logits, i32), f32)) { optimizer = sgd(lr = 0.1); steps = 2 }'
expect no-gradient-cast 0 "$TFG" run --color=never "$st/cast.tfg" &&
  contains no-gradient-cast "$tmp/err" "note: the gradient stops at cast: its i32 result carries none"
st_program "$st/acc" 'train accuracy(logits, y) { optimizer = sgd(lr = 0.1); steps = 2 }'
expect no-gradient-accuracy 0 "$TFG" check --color=never "$st/acc.tfg" &&
  contains no-gradient-accuracy "$tmp/err" "note: the gradient stops at accuracy, which has none"
st_program "$st/fine" 'train loss { optimizer = sgd(lr = 0.1); steps = 2 }'
expect gradient-flows 0 "$TFG" check --color=never "$st/fine.tfg"
if [ -s "$tmp/err" ]; then ko "settings gradient-flows: a warning for a loss that trains"; else ok; fi
# The same warning when a strategy clones the step for its replicas.
st_program "$st/argmax_mirrored" 'train mean(cast(argmax(logits), f32)) { optimizer = sgd(lr = 0.1); steps = 2; strategy = mirrored([gpu:0, gpu:1]) }'
expect no-gradient-mirrored 0 "$TFG" check --color=never "$st/argmax_mirrored.tfg" &&
  contains no-gradient-mirrored "$tmp/err" ":7:1: warning: no gradient flows to any param"
