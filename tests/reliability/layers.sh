# tests/reliability/layers.sh: the floors of ARCHITECTURE.md hold
# (tests/layers.py): no #include goes up a floor or sideways, and no two
# modules include each other; outside runtime/backend*, no file reads the
# backend's table of entries (a NULL test of one guesses a capability the
# backend declares) nor includes runtime/backend_impl.h; nothing below
# cli/ reads the environment but the variables tests/layers.py's
# ENV_ALLOWED lists. It also shows the checker can fail: copies of the
# tree with one forbidden include, one cycle, one NULL test of a table
# entry, one include of the table and ones with a getenv below cli/ must
# each be refused, naming the file and line (and a getenv in a comment
# must not). Sourced by tests/run.sh with $ROOT, $tmp and tests/lib.sh's
# helpers.

suite=layers

if python3 "$ROOT/tests/layers.py" "$ROOT" >"$tmp/layers.out" 2>&1; then ok
else ko "$suite: the tree breaks the floor table:"; sed 's/^/    /' "$tmp/layers.out"; fi

# lay_copy DIR: the product folders of the tree, copied to DIR
lay_copy() {
  rm -rf "$1" && mkdir -p "$1"
  for lay_d in base ir lang io kernels compiler runtime cli; do
    [ -d "$ROOT/$lay_d" ] && cp -R "$ROOT/$lay_d" "$1/"
  done
}

# lay_refused NAME DIR WANT: layers.py must fail on DIR and print WANT
lay_refused() {
  if python3 "$ROOT/tests/layers.py" "$2" >"$tmp/layers.out" 2>&1; then
    ko "$suite $1: a tree with the broken rule passed"
  elif grep -qF "$3" "$tmp/layers.out"; then ok
  else ko "$suite $1: expected \"$3\" in:"; sed 's/^/    /' "$tmp/layers.out"; fi
}

# up a floor: the graph (ir/, floor 2) reaching for the placer (floor 4)
lay_copy "$tmp/lay-up"
printf '#include "compiler/place.h"\n' >>"$tmp/lay-up/ir/graph.c"
lay_refused up "$tmp/lay-up" \
  "ir/graph.c:$(wc -l <"$tmp/lay-up/ir/graph.c" | tr -d ' '): includes compiler/place.h: up from ir/ (floor 2) to compiler/ (floor 4)"

# sideways: kernels/ and io/ share floor 3
lay_copy "$tmp/lay-side"
printf '#include "lang/ast.h"\n' >>"$tmp/lay-side/kernels/kernel.c"
lay_refused sideways "$tmp/lay-side" "includes lang/ast.h: sideways from kernels/ (floor 3) to lang/ (floor 3)"

# a cycle inside one floor: the op registry including the graph is fine,
# the graph including the registry back is not
lay_copy "$tmp/lay-cycle"
printf '#include "ir/ops.h"\n' >>"$tmp/lay-cycle/ir/graph.c"
lay_refused cycle "$tmp/lay-cycle" \
  "ir/graph.c:$(wc -l <"$tmp/lay-cycle/ir/graph.c" | tr -d ' '): includes ir/ops.h: a cycle between modules"

# a capability guessed from the backend's table: the executor testing an
# entry for NULL (what tfg_backend_is_host answers)
lay_copy "$tmp/lay-vtable"
printf 'static bool lay_host(tfg_backend *b) { return b->i.read_now == NULL; }\n' >>"$tmp/lay-vtable/runtime/exec.c"
lay_refused vtable "$tmp/lay-vtable" \
  "runtime/exec.c:$(wc -l <"$tmp/lay-vtable/runtime/exec.c" | tr -d ' '): tests the backend table's read_now"

# the table itself reached from outside the backends
lay_copy "$tmp/lay-impl"
printf '#include "runtime/backend_impl.h"\n' >>"$tmp/lay-impl/runtime/exec.c"
lay_impl_line=$(wc -l <"$tmp/lay-impl/runtime/exec.c" | tr -d ' ')
lay_refused impl "$tmp/lay-impl" \
  "runtime/exec.c:$lay_impl_line: includes runtime/backend_impl.h: the backend table is the backends' own"

# the environment read below cli/: an A/B switch read in the placer
# instead of arriving in tfg_switches from cli/switches.c
lay_copy "$tmp/lay-env"
printf 'static const char *tfg_leak(void) { return getenv("TFG_LEAK"); }\n' >>"$tmp/lay-env/compiler/place.c"
lay_refused getenv "$tmp/lay-env" \
  "compiler/place.c:$(wc -l <"$tmp/lay-env/compiler/place.c" | tr -d ' '): getenv(\"TFG_LEAK\") below cli/"

# an allowed variable is allowed in its one file only (kernels/nvrtc.c)
lay_copy "$tmp/lay-env2"
printf 'static const char *tfg_home(void) { return getenv("CUDA_HOME"); }\n' >>"$tmp/lay-env2/kernels/kernel.c"
lay_refused getenv-elsewhere "$tmp/lay-env2" \
  "kernels/kernel.c:$(wc -l <"$tmp/lay-env2/kernels/kernel.c" | tr -d ' '): getenv(\"CUDA_HOME\") below cli/"

# a getenv a comment or a string names is no read: the copy passes
lay_copy "$tmp/lay-env3"
printf '/* not a read: getenv("TFG_OPT") */\nstatic const char tfg_said[] = "getenv(\\"TFG_OPT\\")";\n' \
  >>"$tmp/lay-env3/compiler/place.c"
if python3 "$ROOT/tests/layers.py" "$tmp/lay-env3" >"$tmp/layers.out" 2>&1; then ok
else ko "$suite getenv-in-comment: refused:"; sed 's/^/    /' "$tmp/layers.out"; fi
