# tests/reliability/outputs.sh: the files a run writes (base/file.h
# tfg_file_out, runtime/train_log.h): tfg plot -o, --trace, log and
# checkpoint write through symlinks, never replace a device, FIFO or
# folder; tfg plot refuses its own input as output and never blocks on a
# FIFO; a log that cannot be written fails the run (exit 3); a run that
# fails before its first logged step leaves the previous log; a resumed
# run keeps the rows up to its checkpoint. Sourced by tests/run.sh ($TFG,
# $ROOT, $tmp, expect, contains, ok, ko, mlp_program).
suite=outputs
out="$tmp/outputs"
mkdir -p "$out"
printf 'step,loss\n1,2.5\n2,1.5\n' >"$out/run.csv"

# ---- devices, FIFOs and folders are never replaced ------------------------------
# a character device of our own (the system's /dev/null is not ours to risk)
if mknod "$out/null" c 1 3 2>/dev/null; then
  expect plot-onto-device 3 "$TFG" plot "$out/run.csv" -o "$out/null" &&
    contains plot-onto-device "$tmp/err" "cannot write '$out/null': it is a character device, not a regular file"
  if [ -c "$out/null" ]; then ok; else ko "$suite plot-onto-device: the device was replaced"; fi
  expect trace-onto-device 2 "$TFG" run --quiet --trace "$out/null" "$ROOT/examples/hello.tfg" &&
    contains trace-onto-device "$tmp/err" "it is a character device, not a regular file"
  if [ -c "$out/null" ]; then ok; else ko "$suite trace-onto-device: the device was replaced"; fi
else
  ko "$suite: cannot make a device node to test with (mknod needs root)"
fi
mkfifo "$out/fifo"
expect plot-onto-fifo 3 "$TFG" plot "$out/run.csv" -o "$out/fifo" &&
  contains plot-onto-fifo "$tmp/err" "it is a FIFO (named pipe), not a regular file"
if [ -p "$out/fifo" ]; then ok; else ko "$suite plot-onto-fifo: the FIFO was replaced"; fi
mkdir "$out/dir"
expect plot-onto-folder 3 "$TFG" plot "$out/run.csv" -o "$out/dir" &&
  contains plot-onto-folder "$tmp/err" "cannot write '$out/dir': Is a directory"

# ---- symlinks are written through ----------------------------------------------------
echo old >"$out/real.svg"
ln -s real.svg "$out/link.svg"
expect plot-through-link 0 "$TFG" plot "$out/run.csv" -o "$out/link.svg"
if [ -L "$out/link.svg" ] && grep -q '<svg' "$out/real.svg"; then ok; else ko "$suite plot-through-link: the link was replaced or its file not written"; fi
ln -s trace-real.json "$out/trace-link.json"
expect trace-through-link 0 "$TFG" run --quiet --trace "$out/trace-link.json" "$ROOT/examples/hello.tfg"
if [ -L "$out/trace-link.json" ] && grep -q traceEvents "$out/trace-real.json"; then ok; else ko "$suite trace-through-link: the link was replaced"; fi

# ---- tfg plot: its own input, a FIFO, a folder ---------------------------------------
cp "$out/run.csv" "$out/keep.csv"
(cd "$out" && "$TFG" plot keep.csv -o ./keep.csv) >"$tmp/out" 2>"$tmp/err"
if [ $? -eq 2 ] && cmp -s "$out/keep.csv" "$out/run.csv"; then ok; else ko "$suite plot-over-input: not refused, or the log changed"; fi
contains plot-over-input "$tmp/err" "is the input file"
ln -s keep.csv "$out/keep-link.csv"
expect plot-over-input-link 2 "$TFG" plot "$out/keep-link.csv" -o "$out/keep.csv"
timeout 10 "$TFG" plot "$out/fifo" -o "$out/f.svg" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 1 ]; then ok; else ko "$suite plot-from-fifo: exit $rc (124: it blocked)"; fi
contains plot-from-fifo "$tmp/err" "cannot read '$out/fifo': it is a FIFO (named pipe), not a regular file"
expect plot-from-folder 1 "$TFG" plot "$out/dir" -o "$out/f.svg" &&
  contains plot-from-folder "$tmp/err" "cannot read '$out/dir': Is a directory"

# ---- tfg plot: numbers as the log writes them, coordinates always finite ---------------
printf 'step,loss\n1,1e308\n2,-1e308\n3,1.7e308\n' >"$out/huge.csv"
expect plot-huge 0 "$TFG" plot "$out/huge.csv" -o "$out/huge.svg"
if grep -qi 'nan\|inf' "$out/huge.svg"; then ko "$suite plot-huge: a coordinate is not finite"; grep -i -m2 'nan\|inf' "$out/huge.svg"; else ok; fi
printf 'step,loss\n1,1e20\n2,1e20\n' >"$out/flat.csv"
expect plot-flat-huge 0 "$TFG" plot "$out/flat.csv" -o "$out/flat.svg"
if grep -qi 'nan\|inf' "$out/flat.svg"; then ko "$suite plot-flat-huge: a coordinate is not finite"; else ok; fi
printf 'step,loss\n1,0x10\n' >"$out/hex.csv"
expect plot-hex 1 "$TFG" plot "$out/hex.csv" -o "$out/hex.svg" &&
  contains plot-hex "$tmp/err" "field 2 ('0x10') is not a number"

# ---- the log ------------------------------------------------------------------------
mlp_program "$out/m" "adam(lr = 1e-2)" ""
sed -i 's/^  log_every = 20$/  log_every = 1\n  log = "m.csv"/' "$out/m.tfg"
grep -q 'log = "m.csv"' "$out/m.tfg" || ko "$suite: the test program has no log setting"
# written through a symlink, the link kept
ln -s m-real.csv "$out/m.csv"
expect log-through-link 0 "$TFG" run --quiet "$out/m.tfg"
if [ -L "$out/m.csv" ] && [ "$(grep -c '^[0-9]' "$out/m-real.csv")" = 20 ]; then ok; else ko "$suite log-through-link: $(ls -l "$out/m.csv")"; fi
rm -f "$out/m.csv" "$out/m-real.csv" "$out/m.safetensors"
expect log-first-run 0 "$TFG" run --quiet "$out/m.tfg"
cp "$out/m.csv" "$out/m-first.csv"
# a run that fails before its first step (a damaged checkpoint) leaves the log
cp "$out/m.safetensors" "$out/m-good.safetensors"
printf 'garbage' >"$out/m.safetensors"
expect log-kept-on-failure 1 "$TFG" run --quiet "$out/m.tfg"
if cmp -s "$out/m.csv" "$out/m-first.csv"; then ok; else ko "$suite log-kept-on-failure: the log changed: $(head -c 200 "$out/m.csv")"; fi
# a resumed run keeps the rows up to its checkpoint's step and logs the rest
sed 's/steps = 20/steps = 30/' "$out/m.tfg" >"$out/m30.tfg"
cp "$out/m-good.safetensors" "$out/m.safetensors"
expect log-resumed 0 "$TFG" run --quiet "$out/m30.tfg"
steps=$(cut -d, -f1 "$out/m.csv" | tr '\n' ' ')
want="step $(seq 1 30 | tr '\n' ' ')"
if [ "$steps" = "$want" ]; then ok; else ko "$suite log-resumed: steps are '$steps'"; fi
if [ "$(head -21 "$out/m.csv")" = "$(cat "$out/m-first.csv")" ]; then ok; else ko "$suite log-resumed: the first 20 rows changed"; fi
# a log that cannot be written fails the run (a file size limit: writes
# past it fail with EFBIG once SIGXFSZ is ignored)
rm -f "$out/m.csv" "$out/m.safetensors"
sed 's/steps = 20/steps = 200/; s/checkpoint = "[^"]*"//' "$out/m.tfg" >"$out/mbig.tfg"
(trap '' XFSZ; ulimit -f 4; exec "$TFG" run --quiet --color=never "$out/mbig.tfg") >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 3 ]; then ok; else ko "$suite log-write-error: exit $rc, expected 3"; tail -3 "$tmp/err"; fi
contains log-write-error "$tmp/err" "cannot write log"
