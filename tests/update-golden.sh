#!/bin/sh
# tests/update-golden.sh [BUILD]: rewrite the expected output of every golden
# file from the current build. Read the diff before committing it: the
# golden files are the specification of tfg's messages and output.
#   ok-*.tfg     -> .ast  (tfg check --ast)
#   run-*.tfg    -> .out  (tfg run)
#   place-*.tfg  -> .explain (tfg place --explain, devices from "# devices: SPEC")
#   plan-*.tfg   -> .plan (tfg plan, devices from "# devices: SPEC")
#   rerr-*.tfg   -> .runerr (tfg run, stderr; exit code from "# exit: N";
#                   devices from "# devices: SPEC")
#   err-*, build-* and anything else -> .err (tfg check, stderr)
BUILD=${1:-build}
TFG="$(cd "$(dirname "$0")/.." && pwd)/$BUILD/tfg"
cd "$(dirname "$0")/golden" || exit 1
for src in *.tfg; do
  name=${src%.tfg}
  spec=$(sed -n 's/^# devices: //p' "$src" | head -1) # the devices of place-, plan- and rerr- files
  case $name in
    ok-*) "$TFG" check --ast --color=never "$src" >"$name.ast" ;;
    run-*) "$TFG" run --color=never "$src" >"$name.out" ;;
    rerr-*) "$TFG" run --color=never ${spec:+--devices "$spec"} "$src" >/dev/null 2>"$name.runerr" ;;
    place-*) "$TFG" place --explain --memory-limit 1G --color=never ${spec:+--devices "$spec"} "$src" >"$name.explain" ;;
    plan-*) "$TFG" plan --color=never ${spec:+--devices "$spec"} "$src" >"$name.plan" ;;
    *) "$TFG" check --color=never "$src" 2>"$name.err" ;;
  esac
done
