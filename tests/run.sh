#!/bin/sh
# tests/run.sh BUILD: every test of tfg against the binaries in BUILD.
#
#   1. the Check unit suites (BUILD/unit)
#   2. golden files (then the backend conformance suite against the host
#      backend, tests/gpu/conformance --devices host, and the CUDA kernels
#      of tests/emu run on the CPU): tests/golden/NAME.tfg with NAME.err (exact stderr of
#      `tfg check`, exit 1), NAME.ast (exact stdout of `tfg check --ast`,
#      exit 0), NAME.out (exact stdout of `tfg run`, exit 0) or NAME.explain
#      (exact stdout of `tfg place --explain --memory-limit 1G`, with the
#      devices of the file's "# devices: SPEC" line; the host CPU's own
#      line, which names the machine's cores, is left out of the compare)
#      or NAME.plan (exact stdout of `tfg plan`, with the devices of the
#      file's "# devices: SPEC" line)
#      or NAME.runerr (exact stderr of `tfg run`, for errors found only
#      when a program runs; the exit code is the file's "# exit: N" line,
#      default 1, and stdout must be empty unless the program prints)
#   3. command-line behaviour (tests/cli.sh), the multi-device
#      runtime end to end (tests/strategies.sh), training against
#      PyTorch on the CPU (tests/oracle.sh: lr schedules, clip_grad_norm,
#      no_decay, accumulate, precision = bf16, plain optimizers; needs
#      python3-torch), the REPL, scripted and on a pseudo-terminal
#      (tests/repl.sh), Ctrl-C during training (tests/interrupt.py) and
#      the progress bar on a pseudo-terminal (tests/progress_pty.py), and
#      tfg as the ranks of an mpirun job (tests/mpi.sh)
#   4. fuzz regressions: every file in tests/fuzz/regress must be checked
#      without a crash or hang (exit 0 or 1)
#
# Prints a line per suite as it finishes ("unit: N passed (S s)", "golden: ...",
# "cli: ...") and ends with one line: "tests: N passed, M failed"; exits 1
# if M > 0.
set -u
# This suite is the CPU path's, and its expected outputs (placements,
# `tfg devices`, notices) are those of a machine without a GPU: hide any
# GPU from the CUDA runtime so a build with CUDA on a GPU machine gives the
# same results. The GPU path has its own suite (tests/gpu).
CUDA_VISIBLE_DEVICES=
export CUDA_VISIBLE_DEVICES
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TFG="$ROOT/$BUILD/tfg"
[ -x "$TFG" ] || TFG="$BUILD/tfg"
. "$ROOT/tests/lib.sh" # pass, fail, $tmp, ok, ko, expect, contains, mlp_program

# progress NAME: "NAME: N passed[, M failed] (S s)", the counts since the
# previous call: a line per suite as it finishes, so the run is never silent
# for long (failures are printed as they happen, above their suite's line).
progress_pass=0
progress_fail=0
progress_t=$(date +%s)
progress() {
  progress_now=$(date +%s)
  progress_line="$1: $((pass - progress_pass)) passed"
  [ "$fail" -gt "$progress_fail" ] && progress_line="$progress_line, $((fail - progress_fail)) failed"
  echo "$progress_line ($((progress_now - progress_t)) s)"
  progress_pass=$pass
  progress_fail=$fail
  progress_t=$progress_now
}

# ---- 1. unit suites ---------------------------------------------------------
unit="$ROOT/$BUILD/unit"
[ -x "$unit" ] || unit="$BUILD/unit"
echo "tests: the unit suites ($unit), then the golden files, conformance (host self-test), cuda kernels emulated, cli, strategies, oracle, repl, interrupt, progress, mpi, reliability, fuzz regressions"
if "$unit" >"$tmp/unit.out" 2>&1; then :; fi
# the failures and anything unexpected (not Check's list of suites, passes and total)
grep -v -e '^Running suite' -e ':P:' -e '^ [A-Za-z0-9_]*$' -e '^[0-9]*%: Checks: ' "$tmp/unit.out" || true
line=$(grep -E 'Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+' "$tmp/unit.out" | tail -1)
if [ -z "$line" ]; then
  ko "unit suites did not run to completion"
else
  n=$(echo "$line" | sed -E 's/.*Checks: ([0-9]+).*/\1/')
  f=$(echo "$line" | sed -E 's/.*Failures: ([0-9]+).*/\1/')
  e=$(echo "$line" | sed -E 's/.*Errors: ([0-9]+).*/\1/')
  pass=$((pass + n - f - e))
  fail=$((fail + f + e))
fi
progress unit

# ---- 2. golden files --------------------------------------------------------
cd "$ROOT/tests/golden" || exit 1
for src in *.tfg; do
  name=${src%.tfg}
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
    spec=$(sed -n 's/^# devices: //p' "$src" | head -1)
    "$TFG" place --explain --memory-limit 1G --color=never ${spec:+--devices "$spec"} "$src" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    grep -v '^  cpu:0 ' "$tmp/out" >"$tmp/out2"
    grep -v '^  cpu:0 ' "$name.explain" >"$tmp/want"
    if [ $rc -ne 0 ]; then ko "golden $src: exit $rc, expected 0"; head -5 "$tmp/err"
    elif ! cmp -s "$tmp/out2" "$tmp/want"; then
      ko "golden $src: explain differs from $name.explain"; diff "$tmp/want" "$tmp/out2" | head -20
    else ok; fi
  elif [ -f "$name.plan" ]; then
    spec=$(sed -n 's/^# devices: //p' "$src" | head -1)
    "$TFG" plan --color=never ${spec:+--devices "$spec"} "$src" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 0 ]; then ko "golden $src: exit $rc, expected 0"; head -5 "$tmp/err"
    elif ! cmp -s "$tmp/out" "$name.plan"; then
      ko "golden $src: plan differs from $name.plan"; diff "$name.plan" "$tmp/out" | head -20
    else ok; fi
  elif [ -f "$name.runerr" ]; then
    want_rc=$(sed -n 's/^# exit: //p' "$src" | head -1)
    "$TFG" run --color=never "$src" >"$tmp/out" 2>"$tmp/err"
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
progress golden

# ---- the backend conformance suite, against the host backend ---------------------
# tests/gpu/conformance on a host device: every op of the registry must
# have cases (a new op without them fails here, not first on a GPU), and
# the suite's references, tolerances and bad-data cases are exercised;
# on a GPU machine tests/gpu/run.sh runs the same cases on cuda:0.
conf="$ROOT/$BUILD/tests/gpu/conformance"
[ -x "$conf" ] || conf="$BUILD/tests/gpu/conformance"
if "$conf" --devices host -q >"$tmp/conf.out" 2>&1 && grep -q '(0 without a case): [0-9]* passed, 0 failed' "$tmp/conf.out"; then
  ok
else
  ko "conformance --devices host: $(grep -v '^conformance: gpu:0 (host' "$tmp/conf.out" | tail -5)"
fi
progress "conformance (host self-test)"

# CUDA device code on the CPU (tests/emu: blocks emulated with threads),
# each program ending with its summary line, nonzero on a failure
emu_dir="$ROOT/$BUILD/tests/emu"
[ -d "$emu_dir" ] || emu_dir="$BUILD/tests/emu"
emu_ran=0
for emu in "$emu_dir"/*; do
  [ -x "$emu" ] || continue
  emu_ran=$((emu_ran + 1))
  if timeout 300 "$emu" >"$tmp/emu.out" 2>&1; then ok; else ko "$(basename "$emu") (tests/emu): $(tail -5 "$tmp/emu.out")"; fi
done
[ "$emu_ran" -gt 0 ] || ko "no program of tests/emu was built in $emu_dir (make test builds them)"
progress "cuda kernels, emulated"

# ---- 3. command line ----------------------------------------------------------
. "$ROOT/tests/cli.sh"
progress cli
. "$ROOT/tests/strategies.sh"
progress strategies
. "$ROOT/tests/oracle.sh"
progress oracle
. "$ROOT/tests/repl.sh"
progress repl
py_checks interrupt "$ROOT/tests/interrupt.py" "$TFG" # Ctrl-C during training (tests/interrupt.py)
progress interrupt
mkdir -p "$tmp/progress"
py_checks progress "$ROOT/tests/progress_pty.py" "$TFG" "$tmp/progress" # the progress bar on a terminal
progress progress
. "$ROOT/tests/mpi.sh" # tfg under mpirun
progress mpi
# bad input by area (tests/reliability/*.sh): each a regression test per
# problem found by trying tfg as a careless or hostile user would
for f in "$ROOT"/tests/reliability/*.sh; do
  [ -f "$f" ] || continue
  progress_name="reliability/$(basename "$f" .sh)" # before: the file may use f itself
  . "$f"
  progress "$progress_name"
done

# ---- 4. fuzz regressions ------------------------------------------------------
for f in "$ROOT"/tests/fuzz/regress/*; do
  [ -f "$f" ] || continue
  timeout 20 "$TFG" check --color=never "$f" >/dev/null 2>&1
  rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 1 ]; then ok; else ko "fuzz regression $(basename "$f"): exit $rc"; fi
done
progress "fuzz regressions"

echo "tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
