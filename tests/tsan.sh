#!/bin/sh
# tests/tsan.sh BUILD: the threaded parts of tfg under ThreadSanitizer,
# against a build made with SAN=thread (make tsan builds BUILD/tsan and runs
# this). A data race, a lock-order inversion or a deadlock TSan sees fails
# the check that ran it (halt_on_error, exit 66), and every run is timed
# out, so a hang fails too.
#
#   1. the unit suites of the thread pool (millions of tiny jobs), the
#      executor, the backends' streams and events, the collectives and the
#      strategies
#   2. every example at --threads 4, so that each device's worker runs
#      beside a pool of kernel threads (at the default thread count on 2
#      cores no pool worker runs per device, and the pool's races never
#      showed); the GPT also mirrored over host*4 at --threads 8, the
#      shape that once ran a stale job's body on a dead frame
#   3. the REPL on a terminal, Ctrl-C included (the SIGINT handler runs on
#      whichever thread the kernel picks)
#   4. a 2-rank mpirun job (the MPI progress thread, the non-blocking
#      all-reduce), where Open MPI's own reports are suppressed
#      (tests/tsan.supp says why)
#
# Ends with "tsan: N passed, M failed"; exits 1 if M > 0.
set -u
CUDA_VISIBLE_DEVICES=
export CUDA_VISIBLE_DEVICES
BUILD=${1:-build/tsan}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TFG="$ROOT/$BUILD/tfg"
[ -x "$TFG" ] || TFG="$BUILD/tfg"
unit="$ROOT/$BUILD/unit"
[ -x "$unit" ] || unit="$BUILD/unit"
. "$ROOT/tests/lib.sh"
suite=tsan
TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=$ROOT/tests/tsan.supp"
export TSAN_OPTIONS

# ---- 1. unit suites ---------------------------------------------------------------
for s in parallel exec backend collective collective_groups strategy; do
  CK_RUN_SUITE=$s CK_DEFAULT_TIMEOUT=600 timeout 900 "$unit" >"$tmp/unit.out" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && grep -q '100%: Checks:' "$tmp/unit.out"; then ok
  else ko "tsan unit suite $s: exit $rc"; grep -v ':P:' "$tmp/unit.out" | head -30; fi
done

# ---- 2. the examples ---------------------------------------------------------------
# tsan_run NAME ARGS...: tfg run ARGS under TSan (exit 0 wanted; the first
# report is shown on a failure)
tsan_run() {
  name=$1
  shift
  (cd "$ROOT/examples" && timeout 600 "$TFG" run --quiet "$@") >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -eq 0 ]; then ok; else ko "tsan $name: exit $rc"; grep -A30 -m1 'WARNING: ThreadSanitizer' "$tmp/err" || tail -5 "$tmp/err"; fi
}
for ex in hello xor forward_mlp digits data_parallel model_parallel async_ps ensemble; do
  tsan_run "$ex" --threads 4 "$ex.tfg"
done
tsan_run gpt --threads 4 --set steps=20 --set log_file="\"$tmp/gpt.csv\"" gpt.tfg
sed 's/^  steps = steps$/  steps = steps; strategy = mirrored()/' "$ROOT/examples/gpt.tfg" >"$tmp/gpt-mirrored.tfg"
tsan_run gpt-mirrored --threads 8 --devices 'host*4' --set steps=10 --set batch=8 \
  --set windows="\"$ROOT/examples/data/constitution.npy\"" --set log_file="\"$tmp/gpt.csv\"" "$tmp/gpt-mirrored.tfg"

# ---- 3. the REPL on a terminal ---------------------------------------------------------
py_checks "tsan repl terminal" "$ROOT/tests/repl_pty.py" "$TFG"
grep -A30 -m1 'WARNING: ThreadSanitizer' "$tmp/py.out"

# ---- 4. mpirun --------------------------------------------------------------------
if mpi_ready tsan; then
  mlp_program "$tmp/mpi" "adam(lr = 1e-2)" "mirrored()"
  timeout 300 mpirun --oversubscribe -np 2 -x TSAN_OPTIONS -x CUDA_VISIBLE_DEVICES \
    "$TFG" run --quiet --threads 2 --devices 'host*2' "$tmp/mpi.tfg" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -eq 0 ]; then ok; else ko "tsan mpirun -np 2: exit $rc"; grep -A30 -m1 'WARNING: ThreadSanitizer' "$tmp/err" || tail -5 "$tmp/err"; fi
fi

echo "tsan: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
