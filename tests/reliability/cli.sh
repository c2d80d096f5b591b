# tests/reliability/cli.sh: the command line and the REPL (issue 13):
# mirrored with the cpu as a replica, the REPL surviving an internal
# error, --trace and --feed refused before anything runs, --memory-limit
# too small for pinned params, --verbose, the help texts, the --devices
# suggested for a missing gpu:N, and README's REPL text. Sourced by
# tests/run.sh ($TFG, $ROOT, $tmp, expect, contains, ok, ko).
suite=cli-reliability
rc_dir="$tmp/cli-rel"
mkdir -p "$rc_dir"

# rc_program OUT DEVICES: examples/data_parallel.tfg with its mirrored
# devices replaced by DEVICES, 5 steps, its data file by absolute path,
# printing the loss and a sum over the logits after training.
rc_program() {
  sed -e "s/mirrored(\[gpu:0, gpu:1\])/mirrored([$2])/" -e 's/epochs = 40/steps = 5/' \
    -e "s|\"data/digits.csv.gz\"|\"$ROOT/examples/data/digits.csv.gz\"|" "$ROOT/examples/data_parallel.tfg" >"$1"
  echo 'print loss, sum(logits * logits)' >>"$1"
}

# ---- mirrored with the cpu first (item 1) ---------------------------------------
# cpu:0 both feeds the replicas (it slices the batch) and is replica 0: the
# executor's walk held its compute stream behind its own all-reduce, which
# waited for gpu:0, which waited for its rows from that compute stream.
rc_program "$rc_dir/ref.tfg" "gpu:0, gpu:1"
rc_program "$rc_dir/cpu-first.tfg" "cpu, gpu:0"
rc_program "$rc_dir/cpu-last.tfg" "gpu:0, cpu"
expect mirrored-ref 0 "$TFG" run --quiet "$rc_dir/ref.tfg" && cp "$tmp/out" "$rc_dir/ref.out"
expect mirrored-cpu-first 0 "$TFG" run --quiet "$rc_dir/cpu-first.tfg" &&
  if cmp -s "$tmp/out" "$rc_dir/ref.out"; then ok; else ko "$suite mirrored-cpu-first: results differ from [gpu:0, gpu:1]"; fi
expect mirrored-cpu-last 0 "$TFG" run --quiet "$rc_dir/cpu-last.tfg" &&
  if cmp -s "$tmp/out" "$rc_dir/ref.out"; then ok; else ko "$suite mirrored-cpu-last: results differ from [gpu:0, gpu:1]"; fi
expect mirrored-cpu-first-plan 0 "$TFG" plan "$rc_dir/cpu-first.tfg"
# A program's own cpu pin stays on the cpu in every replica: replica 1's
# pinned op comes after replica 0's all-reduce in cpu:0's steps, so only
# a walk with a cursor per stream runs it.
sed 's|^logits = nn.mlp(x / 16.0, \[hidden, 10\])|@cpu xs = x / 16.0\nlogits = nn.mlp(xs, [hidden, 10])|' \
  "$rc_dir/cpu-first.tfg" >"$rc_dir/cpu-pin.tfg"
expect mirrored-cpu-pin 0 "$TFG" run --quiet "$rc_dir/cpu-pin.tfg" &&
  if cmp -s "$tmp/out" "$rc_dir/ref.out"; then ok; else ko "$suite mirrored-cpu-pin: results differ from [gpu:0, gpu:1]"; fi
printf ':load %s\n:type loss\n' "$rc_dir/cpu-first.tfg" >"$rc_dir/load.in"
expect mirrored-cpu-first-repl 0 sh -c "\"$TFG\" repl --quiet <\"$rc_dir/load.in\"" &&
  contains mirrored-cpu-first-repl "$tmp/out" "loss: f32[]"

# ---- an internal error never ends the REPL (item 1) ------------------------------
# TFG_FAULT_ASSERT=1 fails an assertion in every run (runtime/exec.h). The
# abandoned input's session is never freed (by design), so LeakSanitizer
# is off for this one.
printf 'let a = 1\nx = tensor([1.0, 2.0])\nx * 2\nprint a\n:type x\nx + 1\n' >"$rc_dir/assert.in"
expect repl-survives-assert 1 env TFG_FAULT_ASSERT=1 ASAN_OPTIONS=detect_leaks=0 sh -c \
  "\"$TFG\" repl --color=never <\"$rc_dir/assert.in\"" &&
  contains repl-survives-assert "$tmp/err" "internal error" &&
  contains repl-survives-assert "$tmp/err" "the input is undone and the session goes on" &&
  contains repl-survives-assert "$tmp/out" "a: 1" && contains repl-survives-assert "$tmp/out" "x: f32[2]"
if [ "$(grep -c 'the input is undone' "$tmp/err")" -eq 2 ]; then ok; else ko "$suite repl-survives-assert: not every run was undone"; fi
expect run-assert-aborts 134 env TFG_FAULT_ASSERT=1 "$TFG" run examples/hello.tfg

# ---- --trace that cannot be written: before the run (item 7) -----------------------
expect trace-unwritable 2 "$TFG" run --trace "$rc_dir/no/such/dir/t.json" "$rc_dir/ref.tfg" &&
  contains trace-unwritable "$tmp/err" "tfg run: --trace $rc_dir/no/such/dir/t.json: cannot write trace"
if grep -q '^step\|^eval\|^trained' "$tmp/err"; then ko "$suite trace-unwritable: it trained first"; else ok; fi
mkdir -p "$rc_dir/tdir"
expect trace-directory 2 "$TFG" run --trace "$rc_dir/tdir" examples/hello.tfg
expect trace-ok 0 "$TFG" run --quiet --trace "$rc_dir/t.json" examples/hello.tfg &&
  contains trace-ok "$rc_dir/t.json" '"traceEvents"'

# ---- --feed of an input that has a source (item 8) ---------------------------------
printf '\223NUMPY' >"$rc_dir/x.npy"
expect feed-has-from 2 "$TFG" run --feed x="$rc_dir/x.npy" "$rc_dir/ref.tfg" &&
  contains feed-has-from "$tmp/err" "tfg run: --feed x: input x (" &&
  contains feed-has-from "$tmp/err" "(its \`from\`); --feed feeds only an input without one"
printf ':load %s\n' "$rc_dir/ref.tfg" >"$rc_dir/feed.in"
expect feed-has-from-repl 1 sh -c "\"$TFG\" repl --color=never --feed x=\"$rc_dir/x.npy\" <\"$rc_dir/feed.in\"" &&
  contains feed-has-from-repl "$tmp/err" "ref.tfg:13:1: error: --feed x: input x reads its batches from"

# ---- --memory-limit too small: located (messages) ------------------------------------
expect memory-limit-pinned 1 "$TFG" run --color=never --memory-limit 1 examples/model_parallel.tfg &&
  contains memory-limit-pinned "$tmp/err" \
    "examples/model_parallel.tfg:15:6: error: the params pinned to gpu:0 need 260.0 KiB (with their state and gradients) but it has 1 B" &&
  contains memory-limit-pinned "$tmp/err" "help: give gpu:0 more memory (--devices, --memory-limit)"
expect memory-limit-placed 1 "$TFG" place --color=never --memory-limit 1 examples/xor.tfg &&
  contains memory-limit-placed "$tmp/err" "examples/xor.tfg:11:22: error: matmul: no device has room"

# ---- --verbose, --help (spec conformance) --------------------------------------------
expect verbose 0 "$TFG" run --verbose "$rc_dir/cpu-first.tfg" &&
  contains verbose "$tmp/err" "tfg: built the training step of the train at line 19: mirrored over 2 replicas" &&
  contains verbose "$tmp/err" "tfg: devices: cpu:0 (" && contains verbose "$tmp/err" "tfg: placed " &&
  contains verbose "$tmp/err" "tfg: planned: cpu:0 " && contains verbose "$tmp/err" "tfg: ran the train at line 19"
expect verbose-place 0 "$TFG" place --verbose examples/hello.tfg && contains verbose-place "$tmp/err" "tfg: parsed "
expect verbose-quiet 2 "$TFG" run --quiet --verbose examples/hello.tfg &&
  contains verbose-quiet "$tmp/err" "--quiet and --verbose"
expect verbose-devices 2 "$TFG" devices --verbose
for rc_cmd in run check place plan repl; do
  expect "$rc_cmd-help-verbose" 0 "$TFG" "$rc_cmd" --help && contains "$rc_cmd-help-verbose" "$tmp/out" "--verbose"
done
for rc_cmd in run place plan repl; do
  expect "$rc_cmd-help-bucket" 0 "$TFG" "$rc_cmd" --help && contains "$rc_cmd-help-bucket" "$tmp/out" "--bucket-size SIZE"
done

# ---- a program naming more GPUs than the run has ---------------------------------------
# Without a GPU only host devices are suggested (the GPU case: test_device.c).
expect gpu-missing 1 "$TFG" run --color=never --devices 'host*1' examples/model_parallel.tfg &&
  contains gpu-missing "$tmp/err" "help: give more devices, for example --devices host*2 (emulated on the CPU)"

# ---- README's REPL text: the prefixes it gives are unique, :pla is not -----------------
rc_prefixes=$(sed -n 's/.*any unique prefix accepted (\(.*\); an ambiguous one.*/\1/p' "$ROOT/README.md" | tr -d '`,')
if [ -n "$rc_prefixes" ]; then ok; else ko "$suite readme-prefixes: README no longer lists the REPL's prefixes"; fi
for rc_p in $rc_prefixes; do
  printf '%s\n' "$rc_p" >"$rc_dir/prefix.in"
  "$TFG" repl --color=never <"$rc_dir/prefix.in" >"$tmp/out" 2>"$tmp/err"
  if grep -q "ambiguous\|unknown command" "$tmp/err"; then ko "$suite readme-prefix $rc_p: $(head -1 "$tmp/err")"; else ok; fi
done
printf ':pla\n' >"$rc_dir/prefix.in"
expect pla-ambiguous 1 sh -c "\"$TFG\" repl --color=never <\"$rc_dir/prefix.in\"" &&
  contains pla-ambiguous "$tmp/err" "':pla' is ambiguous: :place :plan"
printf 'x = tensor([1.0, 2.0])\nx * 2\n' >"$rc_dir/verbose.in"
expect verbose-repl 0 sh -c "\"$TFG\" repl --verbose <\"$rc_dir/verbose.in\"" &&
  contains verbose-repl "$tmp/err" "tfg: placed " && contains verbose-repl "$tmp/out" "[2. 4.]"
