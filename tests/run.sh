#!/bin/sh
# tests/run.sh BUILD [--quick]: every test of tfg against the binaries in
# BUILD (make test), or with --quick the inner loop's share (make check):
# the unit suites, the golden files and a smoke run of each example.
#
# The tests are jobs (tests/suite.sh says what each is): the Check unit
# suites one by one, the golden files in shards (tests/golden.sh), the
# backend conformance suite against the host backend, the CUDA kernels of
# tests/emu run on the CPU, the command line (tests/cli.sh), several
# devices end to end (tests/strategies.sh), training against PyTorch on
# the CPU (tests/oracle.sh), the REPL (tests/repl.sh), bad input by area
# (tests/reliability/*.sh), the fuzz regressions; then, one at a time
# because they time what they watch, Ctrl-C during training
# (tests/interrupt.py), the progress bar on a pseudo-terminal
# (tests/progress_pty.py) and tfg as the ranks of an mpirun job
# (tests/mpi.sh, tests/reliability/round2_mpi.sh).
#
# The first jobs run JOBS at a time (default: the number of cores), each
# in a scratch folder of its own; every assertion runs, only the order
# changes. A line per job as it finishes ("cli: N passed, M failed (S
# s)", its failures above it); then one line: "tests: N passed, M
# failed"; exits 1 if M > 0.
set -u
# This suite is the CPU path's, and its expected outputs (placements,
# `tfg devices`, notices) are those of a machine without a GPU: hide any
# GPU from the CUDA runtime so a build with CUDA on a GPU machine gives the
# same results. The GPU path has its own suite (tests/gpu).
CUDA_VISIBLE_DEVICES=
export CUDA_VISIBLE_DEVICES
BUILD=${1:-build}
QUICK=${2:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
t0=$(date +%s)

# The unit suites by name: every suite_create("NAME") of tests/unit, which
# must be as many as tests/unit/main.c registers (one made there, the
# rest added), so a suite written but not registered is found here.
units=$(sed -n 's/.*suite_create("\([a-z_0-9]*\)").*/\1/p' "$ROOT"/tests/unit/*.c)
registered=$(($(grep -c 'srunner_add_suite' "$ROOT/tests/unit/main.c") + 1))
nunits=$(echo "$units" | wc -w)
# the longest first, so that the pool ends together (later duplicates go)
parallel="unit:ckpt unit:parallel unit:collective golden:0/4 golden:1/4 golden:2/4 golden:3/4"
for u in $units; do parallel="$parallel unit:$u"; done
serial=
if [ "$QUICK" = --quick ]; then
  parallel="$parallel examples"
else
  parallel="emu conformance cli reliability/half $parallel strategies pipeline oracle repl fuzz"
  for f in "$ROOT"/tests/reliability/*.sh; do
    r="reliability/$(basename "$f" .sh)"
    case $r in reliability/half | reliability/round2_mpi) ;; *) parallel="$parallel $r" ;; esac
  done
  serial="interrupt progress mpi reliability/round2_mpi"
fi
parallel=$(echo "$parallel" | tr ' ' '\n' | awk 'NF && !seen[$0]++' | tr '\n' ' ')

echo "tests: $(echo $parallel | wc -w) jobs, $JOBS at a time, then ${serial:-nothing} one at a time (BUILD=$BUILD)"
printf '%s\n' $parallel | xargs -P "$JOBS" -n 1 sh "$ROOT/tests/suite.sh" "$BUILD" "$out"
for job in $serial; do sh "$ROOT/tests/suite.sh" "$BUILD" "$out" "$job"; done

# the counts: each job's last line
pass=0 fail=0 ran=0
for job in $parallel $serial; do
  f="$out/$(echo "$job" | tr / _).out"
  line=$(tail -1 "$f" 2>/dev/null)
  case $line in
  "$job: "*" passed, "*" failed"*)
    n=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed.*/\1/')
    m=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed.*/\2/')
    pass=$((pass + n)) fail=$((fail + m)) ran=$((ran + 1))
    ;;
  *)
    echo "FAIL: job $job ended without its counts"
    fail=$((fail + 1))
    ;;
  esac
done
if [ "$nunits" -ne "$registered" ]; then
  echo "FAIL: tests/unit has $nunits suites but main.c runs $registered"
  fail=$((fail + 1))
fi
echo "($ran jobs in $(($(date +%s) - t0)) s)"
echo "tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
