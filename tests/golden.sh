# tests/golden.sh: the golden files (tests/golden/NAME.tfg), shard
# golden_shard of golden_shards (the files in name order, every
# golden_shards-th from the golden_shard-th), so that tests/run.sh can
# compare them on several cores. Sourced by tests/suite.sh ($TFG, $ROOT,
# $tmp, ok, ko). Each NAME.tfg has one expected output beside it:
#   NAME.err      exact stderr of `tfg check` (exit 1)
#   NAME.ast      exact stdout of `tfg check --ast` (exit 0)
#   NAME.explain  exact stdout of `tfg place --explain --memory-limit 1G`
#                 with the devices of its "# devices: SPEC" line (the host
#                 CPU's own line, which names the machine's cores, is left
#                 out of the compare)
#   NAME.plan     exact stdout of `tfg plan` with those devices
#   NAME.runerr   exact stderr of `tfg run` (exit: its "# exit: N" line,
#                 default 1; stdout empty unless the program prints), with
#                 the devices of its "# devices: SPEC" line when it has one
#   NAME.out      exact stdout of `tfg run` (exit 0)
cd "$ROOT/tests/golden" || exit 1
golden_i=0
for src in *.tfg; do
  golden_i=$((golden_i + 1))
  [ $((golden_i % golden_shards)) -eq "$golden_shard" ] || continue
  name=${src%.tfg}
  spec=$(sed -n 's/^# devices: //p' "$src" | head -1) # the devices of place-, plan- and rerr- files
  if [ -f "$name.err" ]; then
    "$TFG" check --color=never "$src" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 1 ]; then ko "golden $src: exit $rc, expected 1"
    elif ! cmp -s "$tmp/err" "$name.err"; then
      ko "golden $src: stderr differs from $name.err"; diff "$name.err" "$tmp/err" | head -20
    elif [ -s "$tmp/out" ]; then ko "golden $src: unexpected stdout"
    else ok; fi
  elif [ -f "$name.ast" ]; then
    "$TFG" check --ast --color=never "$src" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 0 ]; then ko "golden $src: exit $rc, expected 0"; head -5 "$tmp/err"
    elif ! cmp -s "$tmp/out" "$name.ast"; then
      ko "golden $src: --ast output differs from $name.ast"; diff "$name.ast" "$tmp/out" | head -20
    elif [ -s "$tmp/err" ]; then ko "golden $src: unexpected stderr"
    else ok; fi
  elif [ -f "$name.explain" ]; then
    "$TFG" place --explain --memory-limit 1G --color=never ${spec:+--devices "$spec"} "$src" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    grep -v '^  cpu:0 ' "$tmp/out" >"$tmp/out2"
    grep -v '^  cpu:0 ' "$name.explain" >"$tmp/want"
    if [ $rc -ne 0 ]; then ko "golden $src: exit $rc, expected 0"; head -5 "$tmp/err"
    elif ! cmp -s "$tmp/out2" "$tmp/want"; then
      ko "golden $src: explain differs from $name.explain"; diff "$tmp/want" "$tmp/out2" | head -20
    else ok; fi
  elif [ -f "$name.plan" ]; then
    "$TFG" plan --color=never ${spec:+--devices "$spec"} "$src" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 0 ]; then ko "golden $src: exit $rc, expected 0"; head -5 "$tmp/err"
    elif ! cmp -s "$tmp/out" "$name.plan"; then
      ko "golden $src: plan differs from $name.plan"; diff "$name.plan" "$tmp/out" | head -20
    else ok; fi
  elif [ -f "$name.runerr" ]; then
    want_rc=$(sed -n 's/^# exit: //p' "$src" | head -1)
    "$TFG" run --color=never ${spec:+--devices "$spec"} "$src" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne "${want_rc:-1}" ]; then ko "golden $src: exit $rc, expected ${want_rc:-1}"; head -5 "$tmp/err"
    elif ! cmp -s "$tmp/err" "$name.runerr"; then
      ko "golden $src: run stderr differs from $name.runerr"; diff "$name.runerr" "$tmp/err" | head -20
    else ok; fi
  elif [ -f "$name.out" ]; then
    "$TFG" run --color=never "$src" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 0 ]; then ko "golden $src: exit $rc, expected 0"; head -5 "$tmp/err"
    elif ! cmp -s "$tmp/out" "$name.out"; then
      ko "golden $src: run output differs from $name.out"; diff "$name.out" "$tmp/out" | head -20
    elif [ -s "$tmp/err" ]; then ko "golden $src: unexpected stderr"; head -5 "$tmp/err"
    else ok; fi
  else
    ko "golden $src: no $name.err, $name.ast, $name.explain, $name.plan, $name.runerr or $name.out beside it"
  fi
done
cd "$ROOT" || exit 1
