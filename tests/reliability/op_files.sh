# tests/reliability/op_files.sh: the files docs/architecture.md says a new
# op (or strategy) touches are the files an existing op of each kind (or
# the parameter server) is named in. The
# page shows, under "Where things go", a grep per kind of op ("$ grep ...
# | sort    # N files") with the files it prints; each is run from the
# checkout's root and must print exactly those files, N of them. An op
# whose name turns up in a new file (a list written out again instead of
# generated from ir/op_list.h) fails here. Sourced by tests/run.sh with
# $ROOT, $tmp and tests/lib.sh's helpers.

suite=op-files

# The blocks: "$ cmd    # N files" lines and the file lines after them,
# as "CMD<TAB>N" and "FILE" lines, each block ended by "END".
awk '/^## Where things go/ { on = 1; next } /^## / { on = 0 }
  on && /^ *\$ grep / { sub(/^ *\$ /, ""); n = $0; sub(/.*# */, "", n); sub(/ files$/, "", n);
                        c = $0; sub(/ *#.*$/, "", c); printf "CMD\t%s\t%s\n", c, n; inb = 1; next }
  on && inb && /^ *```/ { print "END"; inb = 0; next }
  on && inb { sub(/^ */, ""); print "FILE\t" $0 }' "$ROOT/docs/architecture.md" >"$tmp/opf.blocks"

of_n=0
while IFS="$(printf '\t')" read -r of_kind of_a of_b; do
  case "$of_kind" in
  CMD) of_cmd=$of_a of_want=$of_b; : >"$tmp/opf.want" ;;
  FILE) echo "$of_a" >>"$tmp/opf.want" ;;
  END)
    of_n=$((of_n + 1))
    (cd "$ROOT" && LC_ALL=C sh -c "$of_cmd") >"$tmp/opf.got" 2>&1
    if ! cmp -s "$tmp/opf.got" "$tmp/opf.want"; then
      ko "$suite: \`$of_cmd\` does not print what docs/architecture.md shows:"
      diff "$tmp/opf.want" "$tmp/opf.got" | sed 's/^/    /'
    elif [ "$(wc -l <"$tmp/opf.want" | tr -d ' ')" != "$of_want" ]; then
      ko "$suite: docs/architecture.md says $of_want files for \`$of_cmd\` and lists $(wc -l <"$tmp/opf.want" | tr -d ' ')"
    else ok; fi
    ;;
  esac
done <"$tmp/opf.blocks"
if [ "$of_n" -ge 3 ]; then ok; else ko "$suite: found $of_n greps under \"Where things go\" in docs/architecture.md, not 3 (two kinds of op, a strategy)"; fi
