# tests/reliability/io.sh: files in and out (issue 13): checkpoints that
# do not match the run, stale checkpoint temporaries, data files that are
# not regular files, --feed of scalars and of values a dtype cannot hold,
# and JSON written for names that are not UTF-8. Sourced by tests/run.sh
# ($TFG, $ROOT, $tmp, expect, contains, ok, ko, mlp_program).
suite=io
io="$tmp/io"
mkdir -p "$io"

# io_npy OUT DESCR SHAPE VALUES: a version 1.0 .npy file, written with the
# standard library (numpy may be missing): SHAPE a Python tuple ("()",
# "(3,)"), VALUES a Python list, packed with the struct code of DESCR.
io_npy() {
  python3 - "$@" <<'EOF'
import struct, sys
out, descr, shape, values = sys.argv[1], sys.argv[2], eval(sys.argv[3]), eval(sys.argv[4])
code = {"<f4": "f", "<f8": "d", "<i4": "i", "<i8": "q"}[descr]
hdr = "{'descr': '%s', 'fortran_order': False, 'shape': %r, }" % (descr, shape)
hdr += " " * (-(len(hdr) + 11) % 64) + "\n"
with open(out, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
    f.write(struct.pack("<%d%s" % (len(values), code), *values))
EOF
}

# ---- checkpoints that do not match the run (LANGUAGE.md section 6) --------
# These need runtime/train.c's restore() to match the file with
# tfg_ckpt_match (runtime/ckpt.h).
mlp_program "$io/m" "adam(lr = 1e-2)" ""
expect ckpt-first-run 0 "$TFG" run --quiet "$io/m.tfg"
cp "$io/m.safetensors" "$io/full.safetensors"
io_edit() { python3 "$ROOT/tests/ckpt_edit.py" "$io/full.safetensors" "$io/m.safetensors" "$@"; }
# One optimizer-state tensor missing: an error, not "optimizer state fresh, step 0".
io_edit drop=logits.h.w:exp_avg
expect ckpt-partial-state 1 "$TFG" run --color=never "$io/m.tfg" &&
  contains ckpt-partial-state "$tmp/err" "has no tensor 'logits.h.w:exp_avg' for the optimizer state of that name"
# Extra keys are refused by name (they were ignored).
io_edit copy=logits.h.w:exp_avg=logits.h.w:bogus_slot
expect ckpt-extra-slot 1 "$TFG" run --color=never "$io/m.tfg" &&
  contains ckpt-extra-slot "$tmp/err" "has tensor 'logits.h.w:bogus_slot', optimizer state that this run's adam does not keep"
io_edit copy=logits.h.b=bogus.b
expect ckpt-extra-param 1 "$TFG" run --color=never "$io/m.tfg" &&
  contains ckpt-extra-param "$tmp/err" "has tensor 'bogus.b', which is neither a param of this program nor its optimizer state"
# Another optimizer's file: params restored, a warning, our state fresh from step 0.
io_edit meta=optimizer=sgd
expect ckpt-other-optimizer 0 "$TFG" run --color=never "$io/m.tfg" &&
  contains ckpt-other-optimizer "$tmp/err" "warning: checkpoint $io/m.safetensors was saved by optimizer sgd, not this run's adam"
contains ckpt-other-optimizer "$tmp/err" "restored $io/m.safetensors: 4 tensors, optimizer state fresh, step 0"
# A negative step says so (it said "not a number").
io_edit meta=step=-5
expect ckpt-step-negative 1 "$TFG" run --color=never "$io/m.tfg" &&
  contains ckpt-step-negative "$tmp/err" "its step '-5' is negative"
# A file with params only still starts the state fresh.
io_edit drop=logits.h.w:exp_avg drop=logits.h.w:exp_avg_sq drop=logits.h.b:exp_avg drop=logits.h.b:exp_avg_sq \
  drop=logits.dense.w:exp_avg drop=logits.dense.w:exp_avg_sq drop=logits.dense.b:exp_avg drop=logits.dense.b:exp_avg_sq
expect ckpt-params-only 0 "$TFG" run --color=never "$io/m.tfg" &&
  contains ckpt-params-only "$tmp/err" "restored $io/m.safetensors: 4 tensors, optimizer state fresh, step 0"

# ---- stale temporaries of killed saves (kill -9 mid-save) -----------------
# The next save removes "<checkpoint>.tmp.<pid>" of a dead pid, and keeps a
# live process's (this shell's) and other names.
sh -c 'exit 0' &
dead=$!
wait "$dead"
rm -f "$io/m.safetensors"
: >"$io/m.safetensors.tmp.$dead"
: >"$io/m.safetensors.tmp.$$"
: >"$io/m.safetensors.tmp.$dead.1"
expect stale-tmp-save 0 "$TFG" run --quiet "$io/m.tfg"
if [ -e "$io/m.safetensors.tmp.$dead" ]; then ko "io stale-tmp: the dead writer's temporary is still there"; else ok; fi
if [ -e "$io/m.safetensors.tmp.$$" ] && [ -e "$io/m.safetensors.tmp.$dead.1" ]; then ok; else
  ko "io stale-tmp: a live writer's temporary or another name was removed"; fi

# ---- data files that are not regular files --------------------------------
# A FIFO blocked the reader forever: refused at once, by name.
mkfifo "$io/fifo.csv"
printf 'data d = csv("%s", label = -1)\n' "$io/fifo.csv" >"$io/fifo-csv.tfg"
expect data-fifo-csv 1 timeout 10 "$TFG" check --color=never "$io/fifo-csv.tfg" &&
  contains data-fifo-csv "$tmp/err" "cannot open '$io/fifo.csv': it is a FIFO (named pipe), not a regular file"
printf 'data d = npy(x = "%s")\n' "$io/fifo.csv" >"$io/fifo-npy.tfg"
expect data-fifo-npy 1 timeout 10 "$TFG" check --color=never "$io/fifo-npy.tfg" &&
  contains data-fifo-npy "$tmp/err" "it is a FIFO"
printf 'input s: f32[]\nprint s\n' >"$io/scalar.tfg"
expect feed-fifo 3 timeout 10 "$TFG" run --color=never --feed s="$io/fifo.csv" "$io/scalar.tfg" &&
  contains feed-fifo "$tmp/err" "it is a FIFO"
printf 'data d = csv("/dev/null", label = -1)\n' >"$io/devnull.tfg"
expect data-device 1 timeout 10 "$TFG" check --color=never "$io/devnull.tfg" &&
  contains data-device "$tmp/err" "cannot open '/dev/null': it is a character device, not a regular file"

# ---- --feed: scalars, shapes, values out of range -------------------------
io_npy "$io/s.npy" "<f8" "()" "[2.5]"
expect feed-scalar 0 "$TFG" run --color=never --feed s="$io/s.npy" "$io/scalar.tfg" &&
  contains feed-scalar "$tmp/out" "2.5"
io_npy "$io/v.npy" "<f4" "(3,)" "[1, 2, 3]"
expect feed-scalar-shape 3 "$TFG" run --color=never --feed s="$io/v.npy" "$io/scalar.tfg" &&
  contains feed-scalar-shape "$tmp/err" "--feed s: '$io/v.npy' holds an array of shape (3,), but input s has shape ()"
printf 'input y: i32[3]\nprint y\n' >"$io/labels.tfg"
io_npy "$io/y.npy" "<i8" "(3,)" "[0, 1, 2**40]"
expect feed-out-of-range 3 "$TFG" run --color=never --feed y="$io/y.npy" "$io/labels.tfg" &&
  contains feed-out-of-range "$tmp/err" "'$io/y.npy': the value at [2] is 1099511627776, out of range for i32"
[ -s "$tmp/out" ] && ko "io feed-out-of-range: printed a value" || ok
io_npy "$io/yf.npy" "<f8" "(3,)" "[0.5, 1, 2]"
expect feed-dtype 3 "$TFG" run --color=never --feed y="$io/yf.npy" "$io/labels.tfg" &&
  contains feed-dtype "$tmp/err" "--feed y: '$io/yf.npy' holds f64 values, which cannot feed input y of dtype i32"

# ---- JSON for names that are not UTF-8 ------------------------------------
# place --json wrote the byte raw (invalid JSON); now U+FFFD, as the trace.
bad="$io/bad$(printf '\377').tfg"
printf 'param w: f32[2] = zeros()\nprint w\n' >"$bad"
expect place-json-utf8 0 "$TFG" place --json "$bad" &&
  if python3 -c 'import json, sys; d = json.load(open(sys.argv[1], encoding="utf-8")); assert "bad\ufffd.tfg:1:1" in d["ops"][0]["loc"], d["ops"][0]' "$tmp/out"; then
    ok; else ko "io place-json-utf8: not JSON, or the name is not bad\\ufffd.tfg"; fi
