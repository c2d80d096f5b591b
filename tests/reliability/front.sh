# tests/reliability/front.sh: the front end's part of issue 13 (imports,
# empty tensors, build budgets, long names), sourced by tests/run.sh from
# the checkout's root with $TFG, $tmp and tests/lib.sh's helpers. The
# messages themselves are golden files (tests/golden/*-front-*); these are
# the checks a golden file cannot make: hangs, memory, and --set.
suite=front

# peak_kb CMD...: runs CMD (stdout in $tmp/out, stderr in $tmp/err) and
# prints its peak resident memory in KiB, then its exit code.
peak_kb() {
  python3 -c '
import resource, subprocess, sys
with open(sys.argv[1], "w") as o, open(sys.argv[2], "w") as e:
    rc = subprocess.run(sys.argv[3:], stdout=o, stderr=e).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)
' "$tmp/out" "$tmp/err" "$@"
}

# The peak of `tfg check` on a one-line program: what the binary and the
# libraries it loads take before evaluating anything (a build with CUDA
# maps the CUDA runtime, cuBLAS and cuDNN: about 200 MB more than one
# without).
printf 'let a = 0\n' >"$tmp/base.tfg"
base_kb=$(peak_kb "$TFG" check "$tmp/base.tfg" | cut -d' ' -f1)

# under NAME MAX_MB WANT_RC CMD...: CMD exits WANT_RC with a peak resident
# memory at most MAX_MB above that baseline.
under() {
  name=$1 max=$2 want=$3
  shift 3
  set -- $(peak_kb "$@")
  if [ "$2" != "$want" ]; then ko "$suite $name: exit $2, expected $want"; tail -5 "$tmp/err"
  elif [ "$1" -gt $((base_kb + max * 1024)) ]; then
    ko "$suite $name: peak memory $(($1 / 1024)) MB, expected under $(((base_kb / 1024) + max)) MB"
  else ok; fi
}

# A FIFO as an import: refused at once, located (it used to block forever),
# by path and when found by a module name.
mkfifo "$tmp/pipe.tfg"
printf 'import "pipe.tfg"\n' >"$tmp/fifo-path.tfg"
expect import-fifo 1 timeout 10 "$TFG" check --color=never "$tmp/fifo-path.tfg" &&
  contains import-fifo "$tmp/err" "fifo-path.tfg:1:1: error: cannot open '$tmp/pipe.tfg': it is a FIFO (named pipe), not a regular file"
printf 'import pipe\n' >"$tmp/fifo-name.tfg"
expect import-fifo-name 1 timeout 10 "$TFG" check --color=never "$tmp/fifo-name.tfg" &&
  contains import-fifo-name "$tmp/err" "it is a FIFO (named pipe), not a regular file"
rm -f "$tmp/pipe.tfg"

# A zero-size hidden layer from --set: refused at the param's dimension,
# with the calls that led there (it was an internal error at run time).
expect zero-hidden 1 "$TFG" run --color=never --set hidden=0 examples/digits.tfg &&
  contains zero-hidden "$tmp/err" "error: a dimension must be at least 1, got 0" &&
  contains zero-hidden "$tmp/err" "examples/digits.tfg:13:10: note: in this call of mlp"

# Build-time evaluation in bounded memory: a loop rebinding names, and an
# exponential call tree under a long fn name (each call used to leave its
# param path behind).
printf 'let a = 0\nfor i in 0..3000000 { a = i }\n' >"$tmp/loop.tfg"
under loop-memory 100 0 "$TFG" check "$tmp/loop.tfg"
f=layer_block_function_with_a_long_name_xyz
printf 'fn %s(n) {\n  if n > 0 {\n    %s(n - 1)\n    %s(n - 1)\n  }\n}\n%s(18)\n' $f $f $f $f >"$tmp/calls.tfg"
under calls-memory 100 0 "$TFG" check "$tmp/calls.tfg"

# The node budget: a loop adding a node per iteration stops at 10^6 nodes,
# naming the loop.
printf 'x = ones([1])\nfor i in 0..2000000 {\n  x = x + 1\n}\n' >"$tmp/nodes.tfg"
expect node-budget 1 "$TFG" check --color=never "$tmp/nodes.tfg" &&
  contains node-budget "$tmp/err" "nodes.tfg:3:7: error: the graph already has 1000000 nodes, the most a program may build" &&
  contains node-budget "$tmp/err" "nodes.tfg:2:1: note: in this loop"

# A 10 MB identifier: the message cuts it (it was echoed whole).
awk 'BEGIN { printf "let y = "; for (i = 0; i < 10000000; i++) printf "a"; printf "\n" }' >"$tmp/longname.tfg"
# (The size first: a failure shows the start of the messages.)
if expect long-name 1 "$TFG" check --color=never "$tmp/longname.tfg"; then
  if [ "$(wc -c <"$tmp/err")" -lt 2000 ]; then
    contains long-name "$tmp/err" "error: unknown name 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...'"
  else
    ko "$suite long-name: $(wc -c <"$tmp/err") bytes of messages"
  fi
fi
rm -f "$tmp/longname.tfg"
