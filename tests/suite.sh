#!/bin/sh
# tests/suite.sh BUILD OUT JOB: one job of tests/run.sh against the
# binaries in BUILD, in a scratch folder of its own, so that several run
# at once. Writes what the job printed (its failures) and a last line
# "JOB: N passed, M failed (S s)" to OUT/JOB.out (a / in JOB becomes _),
# prints that file when the job ends, and exits 1 if M > 0. JOB is one of:
#
#   unit:NAME        the Check suite NAME of BUILD/unit (CK_RUN_SUITE)
#   golden:K/N       shard K of N of the golden files (tests/golden.sh)
#   conformance      tests/gpu/conformance against the host backend: every
#                    op of the registry must have cases, the references,
#                    tolerances and bad-data cases are exercised (on a GPU
#                    machine tests/gpu/run.sh runs them on cuda:0)
#   emu              the CUDA kernels of tests/emu, emulated on the CPU
#   cli strategies pipeline oracle repl mpi
#                    tests/NAME.sh (command line, several devices end to
#                    end, training against PyTorch, the REPL, mpirun)
#   interrupt        Ctrl-C during training (tests/interrupt.py)
#   progress         the progress bar on a pseudo-terminal (tests/progress_pty.py)
#   reliability/NAME tests/reliability/NAME.sh: bad input by area
#   fuzz             every file in tests/fuzz/regress is checked without a
#                    crash or hang (exit 0 or 1)
#   examples         each example runs (a smoke run: 2 steps where the
#                    program's steps are a let; make check)
set -u
CUDA_VISIBLE_DEVICES= # the CPU path's suite: see tests/run.sh
export CUDA_VISIBLE_DEVICES
BUILD=$1 SUITE_OUT=$2 SUITE_JOB=$3 # names the sourced suites do not use
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TFG="$ROOT/$BUILD/tfg"
[ -x "$TFG" ] || TFG="$BUILD/tfg"
. "$ROOT/tests/lib.sh" # pass, fail, $tmp, ok, ko, expect, contains, mlp_program
cd "$ROOT" || exit 1
SUITE_T0=$(date +%s)
SUITE_FILE="$SUITE_OUT/$(echo "$SUITE_JOB" | tr / _).out"

{
  case $SUITE_JOB in
  unit:*)
    unit="$ROOT/$BUILD/unit"
    [ -x "$unit" ] || unit="$BUILD/unit"
    CK_RUN_SUITE=${SUITE_JOB#unit:} "$unit" >"$tmp/unit.out" 2>&1
    # the failures and anything unexpected (not Check's list of suites, passes and total)
    grep -v -e '^Running suite' -e ':P:' -e '^ [A-Za-z0-9_]*$' -e '^[0-9]*%: Checks: ' "$tmp/unit.out"
    line=$(grep -E 'Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+' "$tmp/unit.out" | tail -1)
    if [ -z "$line" ]; then
      ko "unit suite ${SUITE_JOB#unit:} did not run to completion"
    else
      n=$(echo "$line" | sed -E 's/.*Checks: ([0-9]+).*/\1/')
      f=$(echo "$line" | sed -E 's/.*Failures: ([0-9]+).*/\1/')
      e=$(echo "$line" | sed -E 's/.*Errors: ([0-9]+).*/\1/')
      [ "$n" -gt 0 ] || ko "unit suite ${SUITE_JOB#unit:} has no checks (is it registered in tests/unit/main.c?)"
      pass=$((pass + n - f - e))
      fail=$((fail + f + e))
    fi
    ;;
  golden:*)
    golden_shard=${SUITE_JOB#golden:} golden_shards=${golden_shard#*/} golden_shard=${golden_shard%/*}
    . "$ROOT/tests/golden.sh"
    ;;
  conformance)
    conf="$ROOT/$BUILD/tests/gpu/conformance"
    [ -x "$conf" ] || conf="$BUILD/tests/gpu/conformance"
    if "$conf" --devices host -q >"$tmp/conf.out" 2>&1 && grep -q '(0 without a case): [0-9]* passed, 0 failed' "$tmp/conf.out"; then
      ok
    else
      ko "conformance --devices host: $(grep -v '^conformance: gpu:0 (host' "$tmp/conf.out" | tail -5)"
    fi
    ;;
  emu)
    emu_dir="$ROOT/$BUILD/tests/emu"
    [ -d "$emu_dir" ] || emu_dir="$BUILD/tests/emu"
    emu_ran=0
    for emu in "$emu_dir"/*; do
      [ -x "$emu" ] || continue
      emu_ran=$((emu_ran + 1))
      if timeout 300 "$emu" >"$tmp/emu.out" 2>&1; then ok; else ko "$(basename "$emu") (tests/emu): $(tail -5 "$tmp/emu.out")"; fi
    done
    [ "$emu_ran" -gt 0 ] || ko "no program of tests/emu was built in $emu_dir (make test builds them)"
    ;;
  cli | strategies | pipeline | oracle | repl | mpi) . "$ROOT/tests/$SUITE_JOB.sh" ;;
  interrupt) py_checks interrupt "$ROOT/tests/interrupt.py" "$TFG" ;;
  progress)
    mkdir -p "$tmp/progress"
    py_checks progress "$ROOT/tests/progress_pty.py" "$TFG" "$tmp/progress"
    ;;
  reliability/*)
    . "$ROOT/tests/$SUITE_JOB.sh"
    ;;
  fuzz)
    for f in "$ROOT"/tests/fuzz/regress/*; do
      [ -f "$f" ] || continue
      timeout 20 "$TFG" check --color=never "$f" >/dev/null 2>&1
      rc=$?
      if [ $rc -eq 0 ] || [ $rc -eq 1 ]; then ok; else ko "fuzz regression $(basename "$f"): exit $rc"; fi
    done
    ;;
  examples)
    # each example as written, but 2 steps where its length is a let
    # (gpt.tfg), its log and checkpoint files in $tmp
    for ex in "$ROOT"/examples/*.tfg; do
      name=$(basename "$ex" .tfg)
      set --
      grep -q '^let steps = ' "$ex" && set -- --set steps=2
      grep -q '^let log_file = ' "$ex" && set -- "$@" --set "log_file=\"$tmp/$name-run.csv\""
      expect "example-$name" 0 "$TFG" run --quiet "$@" "$ex"
    done
    ;;
  *) ko "tests/suite.sh: no job named $SUITE_JOB" ;;
  esac
  echo "$SUITE_JOB: $pass passed, $fail failed ($(($(date +%s) - SUITE_T0)) s)"
} >"$SUITE_FILE" 2>&1
# one job's output at a time on the shared stdout (flock: util-linux)
if command -v flock >/dev/null 2>&1; then flock "$SUITE_OUT/.print" cat "$SUITE_FILE"; else cat "$SUITE_FILE"; fi
[ "$fail" -eq 0 ]
