# tests/repl.sh: `tfg repl` (CLI.md), sourced by tests/run.sh (which
# provides $TFG and $ROOT, and through tests/lib.sh $tmp, ok, ko and
# contains).
#
#   1. scripted sessions: each tests/repl/NAME.in is piped into
#      `tfg repl --quiet --color=never [ARGS]` run in tests/repl; stdout
#      must equal NAME.out and stderr NAME.err exactly, and the exit code
#      the "# exit: N" line of NAME.in (0 without one); ARGS come from its
#      "# args: ..." line
#   2. behaviour around the sessions: FILE, options, exit codes, :place
#      --explain, :plan, :devices, continuation at the end of the input
#   3. hostile input (NUL bytes, a 1 MB line, deep nesting, random bytes,
#      a huge unfinished block): exit 0 or 1, never a crash or a hang
#   4. the terminal: tests/repl_pty.py drives `tfg repl` in a
#      pseudo-terminal (prompts, continuation, history, completion, Ctrl-C)

suite=repl # the word contains names failures with

# ---- 1. scripted sessions ------------------------------------------------------
for in_file in "$ROOT"/tests/repl/*.in; do
  session=$(basename "$in_file" .in)
  want_rc=$(sed -n 's/^# exit: //p' "$in_file" | head -1)
  [ -n "$want_rc" ] || want_rc=0
  args=$(sed -n 's/^# args: //p' "$in_file" | head -1)
  set -f # ARGS such as --devices host*2 are words, not patterns
  (cd "$ROOT/tests/repl" && "$TFG" repl --quiet --color=never $args <"$session.in" >"$tmp/out" 2>"$tmp/err")
  rc=$?
  set +f
  if [ $rc -ne "$want_rc" ]; then ko "repl $session: exit $rc, expected $want_rc"; head -5 "$tmp/err"
  elif ! cmp -s "$tmp/out" "$ROOT/tests/repl/$session.out"; then
    ko "repl $session: stdout differs from $session.out"; diff "$ROOT/tests/repl/$session.out" "$tmp/out" | head -20
  elif ! cmp -s "$tmp/err" "$ROOT/tests/repl/$session.err"; then
    ko "repl $session: stderr differs from $session.err"; diff "$ROOT/tests/repl/$session.err" "$tmp/err" | head -20
  else ok; fi
done

# ---- 2. around the sessions ------------------------------------------------------
# repl_in NAME WANT_RC TEXT [ARGS...]: pipes TEXT (a printf format) into
# `tfg repl --color=never ARGS`; output in $tmp/out and $tmp/err.
repl_in() {
  name=$1 want=$2 text=$3
  shift 3
  printf "$text" >"$tmp/repl.in"
  "$TFG" repl --color=never "$@" <"$tmp/repl.in" >"$tmp/out" 2>"$tmp/err"
  got=$?
  if [ "$got" -eq "$want" ]; then ok; return 0; fi
  ko "repl $name: exit $got, expected $want"; head -5 "$tmp/err"
  return 1
}

repl_in clean 0 'x = 1\nx + 1\n' && contains clean "$tmp/out" "2"
if [ -s "$tmp/err" ]; then ko "repl clean: wrote to stderr"; else ok; fi
repl_in empty 0 ''
repl_in blank-and-comments 0 '\n   \n# nothing\n\t\n'
if [ -s "$tmp/out" ]; then ko "repl blank-and-comments: printed something"; else ok; fi
repl_in one-failure 1 '1 +\n2\n' && contains one-failure "$tmp/out" "2" &&
  contains one-failure "$tmp/err" "<stdin>:1:4: error: expected an expression after '+', found end of line"
repl_in quit-stops 0 ':q\nnope\n'
repl_in prefix-commands 0 ':he\n:gr\n:dev\n:qu\n' && contains prefix-commands "$tmp/out" ":place [--explain|--json|--dot]" &&
  contains prefix-commands "$tmp/out" "(the graph is empty)" && contains prefix-commands "$tmp/out" "cpu:0"
# Continuation is decided by the parser: an unclosed ( or { reads on.
repl_in continue-paren 0 'x = (1 +\n\n  2\n)\nx * 2\n' && contains continue-paren "$tmp/out" "6"
repl_in continue-block 0 'fn f(a) {\n  b = a * 3\n\n  return b\n}\nf(5)\n' && contains continue-block "$tmp/out" "15"
repl_in continue-list 0 'xs = [1,\n 2,\n 3]\nxs[2]\n' && contains continue-list "$tmp/out" "3"
repl_in continue-train 0 'param w: f32[] = full(2.0)\ntrain w * w {\n  optimizer = sgd(lr = 0.25)\n  steps = 1\n}\nw\n' --quiet &&
  contains continue-train "$tmp/out" "w: f32[] @cpu:0" && contains continue-train "$tmp/out" "1."
# A brace inside a string or a comment is not an opener: the parser knows.
repl_in brace-in-string 0 's = "{("\n# {\ns\n' && contains brace-in-string "$tmp/out" '"{("'
# An input still unfinished at the end of the input: reported, exit 1.
repl_in unfinished-at-eof 1 'fn f(a) {\n  return a\n' &&
  contains unfinished-at-eof "$tmp/err" "<stdin>:2:11: error: expected '}' to close '{' at 1:9, found end of file"
# :type computes nothing and keeps nothing; :time prints a time.
if repl_in type-keeps-nothing 0 'x = ones([2, 3])\n:type matmul(x, transpose(x))\n:graph\n'; then
  contains type-keeps-nothing "$tmp/out" "matmul(x, transpose(x)): f32[2,2]"
  [ "$(grep -c '^%' "$tmp/out")" -eq 1 ] && ok || ko "repl type-keeps-nothing: :type left nodes in the graph"
fi
repl_in time 0 ':time sum(ones([4, 4]))\n' && contains time "$tmp/out" "sum(ones([4, 4])): f32[] @cpu:0" &&
  contains time "$tmp/out" "time: "
# :place --explain, :plan, :devices show what tfg place / plan / devices show.
repl_in place-explain 0 'param w: f32[4, 4] = ones()\ny = matmul(w, w)\n:place --explain\n:plan\n:place --json\n' &&
  contains place-explain "$tmp/out" "pass " && contains place-explain "$tmp/out" "param w" &&
  contains place-explain "$tmp/out" "plan: 1 device" && contains place-explain "$tmp/out" '"ops": ['
repl_in place-bad-flag 1 ':place --frob\n' && contains place-bad-flag "$tmp/err" ":place takes --explain, --json or --dot"
# FILE is loaded first; its errors are located in it, and the session goes on.
if repl_in file-first 0 'y\n' examples/hello.tfg; then
  contains file-first "$tmp/out" "sum(y, axis = 1): f32[2] @cpu:0"
  [ "$(grep -c '^y: f32\[2,3\] @cpu:0' "$tmp/out")" -eq 2 ] && ok || ko "repl file-first: y not shown twice"
fi
printf 'a = 1\nb = nope\n' >"$tmp/bad.tfg"
repl_in file-error 1 'a\n1 + 1\n' "$tmp/bad.tfg" && contains file-error "$tmp/err" "bad.tfg:2:5: error: unknown name 'nope'" &&
  contains file-error "$tmp/err" "<stdin>:1:1: error: unknown name 'a'" && contains file-error "$tmp/out" "2"
repl_in load-error 1 ":load $tmp/bad.tfg\na\n" && contains load-error "$tmp/err" "bad.tfg:2:5: error: unknown name 'nope'"
repl_in file-missing 2 '' "$tmp/missing.tfg" && contains file-missing "$tmp/err" "cannot open"
repl_in two-files 2 '' a.tfg b.tfg && contains two-files "$tmp/err" "unexpected argument 'b.tfg'"
repl_in no-trace 2 '' --trace "$tmp/t.json" && contains no-trace "$tmp/err" "unknown option '--trace'"
repl_in bad-devices 2 '' --devices 'warp*3'
# --seed and --set reach the session.
repl_in set 0 'let n = 2\nn * 10\n' --set n=4 && contains set "$tmp/out" "40"
# Params keep trained values across inputs; a fresh init is the same init.
if repl_in params-persist 0 'param p: f32[2] = normal(seed = 3)\np\np\n'; then
  [ "$(sed -n 2p "$tmp/out")" = "$(sed -n 4p "$tmp/out")" ] && ok || ko "repl params-persist: a param's value changed between inputs"
fi
# No prompts and no colour when stdin is not a terminal, even with a terminal-ish TERM.
if repl_in no-prompt 1 'nope\n1\n'; then
  if grep -q 'tfg> ' "$tmp/out" || grep -q "$(printf '\033')" "$tmp/err"; then
    ko "repl no-prompt: a prompt or colour on a pipe"
  else ok; fi
fi

# ---- 3. hostile input ------------------------------------------------------------
# hostile NAME FILE: tfg repl reads FILE; exit 0 or 1 within 60 s, and the
# session still answers the line after it.
hostile() {
  printf '\n6 * 7\n' >>"$2"
  timeout 60 "$TFG" repl --color=never <"$2" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 1 ]; then ko "repl hostile $1: exit $rc"; tail -3 "$tmp/err"
  elif ! grep -q '^42$' "$tmp/out"; then ko "repl hostile $1: the session did not go on"; tail -3 "$tmp/err"
  else ok; fi
}
printf 'x = 1\000\000 + 2\n\000\n:gr\000aph\n"\000"\n' >"$tmp/nul.in"
hostile nul-bytes "$tmp/nul.in"
awk 'BEGIN { for (i = 0; i < 100000; i++) printf "let a = 1; "; printf "\n" }' >"$tmp/line.in"
hostile long-line "$tmp/line.in"
awk 'BEGIN { printf "x = "; for (i = 0; i < 1000000; i++) printf "("; printf "\n" }' >"$tmp/parens.in"
hostile deep-parens "$tmp/parens.in"
awk 'BEGIN { printf "x = "; for (i = 0; i < 300000; i++) printf "1+"; printf "1\n" }' >"$tmp/sum.in"
hostile long-sum "$tmp/sum.in"
head -c 300000 /dev/urandom | tr '\n' ' ' | fold -w 1000 >"$tmp/random.in"
printf '\n}}})))]]]\n' >>"$tmp/random.in"
hostile random-bytes "$tmp/random.in"
awk 'BEGIN { printf "fn f() {\n"; for (i = 0; i < 200000; i++) printf "  x = 1\n"; printf "}\n" }' >"$tmp/block.in"
hostile huge-block "$tmp/block.in"
printf ':load /dev/null\n:load %s\n:type\n:time\n::\n:\n' "$tmp" >"$tmp/meta.in"
hostile meta-args "$tmp/meta.in"

# ---- 4. the terminal -------------------------------------------------------------
py_checks "repl terminal" "$ROOT/tests/repl_pty.py" "$TFG"
suite=
