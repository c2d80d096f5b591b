# tests/lib.sh: what the shell test suites share, sourced by tests/run.sh
# (and so by the files it sources: tests/cli.sh, tests/strategies.sh, ...)
# and by tests/gpu/run.sh, after they set ROOT (the checkout) and TFG:
#
#   . "$ROOT/tests/lib.sh"
#   suite=gpu                   # the word failures name (default: cli)
#   expect help 0 "$TFG" --help && contains help "$tmp/out" "usage: tfg"
#   mlp_program "$tmp/one" "adam(lr = 1e-2)" ""   # $tmp/one.tfg
#   echo "tests: $pass passed, $fail failed"
#
# It starts the counts (pass, fail) and a scratch directory ($tmp, removed
# on exit). The helpers set globals (name, want, got): loops around them
# use other names.

pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { pass=$((pass + 1)); }
ko() { fail=$((fail + 1)); echo "FAIL: $*"; }

# py_checks NAME SCRIPT ARGS...: runs a Python test script that prints one
# line per check, "ok CHECK" or "FAIL CHECK: why", and counts them (with
# a 120 s limit; a script that prints no "ok" at all is a failure)
py_checks() {
  name=$1
  shift
  if ! command -v python3 >/dev/null 2>&1; then ko "$name: python3 is missing (make deps installs it)"; return; fi
  timeout 120 python3 "$@" >"$tmp/py.out" 2>&1
  while read -r word rest; do
    case "$word" in
      ok) ok ;;
      FAIL) ko "$name $rest" ;;
    esac
  done <"$tmp/py.out"
  grep -q '^ok ' "$tmp/py.out" || { ko "$name: $1 did not run"; tail -5 "$tmp/py.out"; }
}

# expect NAME WANT_RC CMD...: runs CMD, checks its exit code; output in
# $tmp/out and $tmp/err for further checks (the end of stderr is shown
# on a failure).
expect() {
  name=$1 want=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  got=$?
  if [ "$got" -eq "$want" ]; then ok; return 0; fi
  ko "${suite:-cli} $name: exit $got, expected $want"; tail -5 "$tmp/err"
  return 1
}

# contains NAME FILE TEXT: FILE has the line fragment TEXT.
contains() {
  if grep -qF -- "$3" "$2"; then ok; else ko "${suite:-cli} $1: '$3' not in output"; head -5 "$2"; fi
}

# mlp_program FILE OPTIMIZER STRATEGY [SHAPE]: FILE.tfg, a 64-48-10 MLP
# on the digits (batch 16) trained for 20 steps with OPTIMIZER (and
# STRATEGY, unless empty), its checkpoint FILE.safetensors. SHAPE:
# "dropout" puts dropout(0.3) after the hidden layer; "pinned" splits the
# model over gpu:0 and gpu:1 by `with` blocks on the lets d0 and d1
# (--set them).
digits="$ROOT/examples/data/digits.csv.gz"
mlp_program() {
  {
    echo "import nn"
    if [ "${4:-}" = pinned ]; then
      echo "let d0 = gpu:0"
      echo "let d1 = gpu:1"
    fi
    echo "data digits = csv(\"$digits\", label = -1, test = 0.2, shuffle = true, seed = 7)"
    echo "input x: f32[16, 64] from digits.x"
    echo "input y: i32[16] from digits.y"
    case "${4:-}" in
    pinned)
      echo "with d0 { h = nn.dense(x / 16.0, 48) }"
      echo "with d1 { logits = nn.dense(h, 10, act = nn.identity) }"
      ;;
    dropout) echo "logits = nn.dense(dropout(nn.dense(x / 16.0, 48), 0.3), 10, act = nn.identity)" ;;
    *) echo "logits = nn.mlp(x / 16.0, [48, 10])" ;;
    esac
    echo "train cross_entropy(logits, y) {"
    echo "  optimizer = $2"
    echo "  steps = 20"
    [ -n "${3:-}" ] && echo "  strategy = $3"
    echo "  checkpoint = \"$1.safetensors\""
    echo "  log_every = 20"
    echo "}"
  } >"$1.tfg"
}

# zero_program FILE STRATEGY ZERO SETTINGS: the digits MLP of 2 layers
# under STRATEGY at zero = ZERO, 10 steps of AdamW, checkpointed to
# FILE.safetensors, SETTINGS (one line) in its train block (ZeRO's tests
# in strategies.sh and mpi.sh).
zero_program() {
  {
    echo "import nn"
    echo "data digits = csv(\"$digits\", label = -1, test = 0.2, shuffle = true, seed = 7)"
    echo "input x: f32[16, 64] from digits.x"
    echo "input y: i32[16] from digits.y"
    echo "logits = nn.mlp(x / 16.0, [48, 10])"
    echo "train cross_entropy(logits, y) {"
    echo "  optimizer = adamw(lr = 1e-2)"
    echo "  steps = 10"
    echo "  strategy = $2"
    echo "  zero = $3"
    echo "  checkpoint = \"$1.safetensors\""
    echo "  log_every = 10"
    echo "  $4"
    echo "}"
  } >"$1.tfg"
}
# mpi_ready SUITE: true when the tests of an mpirun job can run: mpirun is
# there (make deps installs it; its absence is a failure, not a skip) and
# $TFG was built with MPI. A build without it (make asan, MPI=0) is checked
# to say so under mpirun and exit 3, and the job's tests are left out.
# mpirun refuses root unless told (CI runs as root): exported here.
mpi_ready() {
  if ! command -v mpirun >/dev/null 2>&1; then
    ko "$1: no mpirun (run \`make deps\`: it installs openmpi-bin)"
    return 1
  fi
  OMPI_ALLOW_RUN_AS_ROOT=1
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
  "$TFG" version 2>/dev/null | grep -q '^mpi: off' || return 0
  timeout 120 mpirun --oversubscribe -np 1 "$TFG" version >"$tmp/out" 2>"$tmp/err"
  mpi_off_rc=$?
  if [ $mpi_off_rc -eq 3 ] && grep -q "this build has no MPI" "$tmp/err"; then ok
  else ko "$1 mpi-off: a tfg without MPI under mpirun: exit $mpi_off_rc"; tail -3 "$tmp/err"; fi
  return 1
}
