# tests/reliability/docs.sh: the project's own reference stays true.
# Every option a command accepts appears in its --help; every `tfg` example
# in docs/language.md runs; the README links the docs in docs/ (a clone
# has no ../shared) and its layout table names exactly the top-level
# folders of the tree. Sourced by tests/run.sh from the checkout's root
# with $TFG, $ROOT, $tmp and tests/lib.sh's helpers.

suite=docs

# ---- every accepted option is in the command's --help -------------------------------
# The options are read from parse_opts' table in cli/main.c. An option is
# accepted when giving it (with a dummy value where it takes one) before
# --help is not refused as unknown: a bad value is still an accepted option.
dc_opts=$(sed -n 's/^ *{"\([a-z0-9-]*\)", \(no\|required\)_argument, NULL, OPT_[A-Z0-9_]*},$/\1:\2/p' "$ROOT/cli/main.c")
if [ "$(echo "$dc_opts" | wc -w)" -ge 10 ]; then ok; else ko "$suite options: cannot read the option table of cli/main.c"; fi
for dc_cmd in run check place plan devices repl version; do
  "$TFG" "$dc_cmd" --help >"$tmp/help" 2>&1
  for dc_o in $dc_opts; do
    dc_name=${dc_o%%:*}
    if [ "${dc_o#*:}" = required ]; then
      "$TFG" "$dc_cmd" "--$dc_name" 1 --help >"$tmp/out" 2>"$tmp/err"
    else
      "$TFG" "$dc_cmd" "--$dc_name" --help >"$tmp/out" 2>"$tmp/err"
    fi
    if grep -q "unknown option\|unexpected argument" "$tmp/err"; then ok
    elif grep -qE -- "--$dc_name([^a-z-]|\$)" "$tmp/help"; then ok
    else ko "$suite help-$dc_cmd: tfg $dc_cmd accepts --$dc_name but its --help does not list it"; fi
  done
done

# ---- every example of docs/language.md runs ----------------------------------------
# Each ```tfg block is a program saved at the checkout's root (its data
# paths start with examples/), so it runs from a folder where examples/
# is the checkout's.
mkdir -p "$tmp/docs"
ln -s "$ROOT/examples" "$tmp/docs/examples"
awk -v dir="$tmp/docs" '/^```tfg$/ { n++; f = sprintf("%s/ex-%02d.tfg", dir, n); inb = 1; next }
  /^```$/ { inb = 0; next } inb { print > f }' "$ROOT/docs/language.md"
dc_n=0
for dc_f in "$tmp"/docs/ex-*.tfg; do
  [ -f "$dc_f" ] || continue
  dc_n=$((dc_n + 1))
  expect "language-example-$(basename "$dc_f" .tfg)" 0 "$TFG" run --quiet --color=never "$dc_f"
done
if [ "$dc_n" -ge 10 ]; then ok; else ko "$suite language-examples: only $dc_n tfg examples found in docs/language.md"; fi

# ---- README: links and layout ------------------------------------------------------
if grep -q '\.\./shared' "$ROOT/README.md" "$ROOT/docs/language.md" "$ROOT/docs/cli.md"; then
  ko "$suite readme-links: README.md or docs/ links into ../shared, which a clone does not have"
else ok; fi
for dc_doc in docs/language.md docs/cli.md; do
  if [ -f "$ROOT/$dc_doc" ] && grep -qF "($dc_doc)" "$ROOT/README.md"; then ok; else ko "$suite readme-links: README.md does not link $dc_doc"; fi
done
# The folders of the table under "## Layout" (first column, `name/`)
# against the tree's top-level folders (build folders and what git
# ignores are not the tree).
sed -n '/^## Layout/,/^## /s/^| `\([a-z_]*\)\/` |.*/\1/p' "$ROOT/README.md" | sort >"$tmp/layout.readme"
(cd "$ROOT" && for dc_d in */; do
  case "$dc_d" in build*) continue ;; esac
  git check-ignore -q "$dc_d" 2>/dev/null || echo "${dc_d%/}"
done) | sort >"$tmp/layout.tree"
if [ -s "$tmp/layout.readme" ] && cmp -s "$tmp/layout.readme" "$tmp/layout.tree"; then ok
else ko "$suite readme-layout: README's layout table and the tree differ (< README, > tree):"; diff "$tmp/layout.readme" "$tmp/layout.tree"; fi
