# tests/reliability/build.sh: the build and the fuzz driver (issue 13,
# "found by a newcomer's first hour" and "done when"): make runs one job
# per core unless told otherwise and says what it builds; one Bison run
# makes both parser files, also in a parallel make; tests/fuzz/mutate.py
# reports each kind of finding, saves and minimizes it, and keeps mutants
# inside its scratch copy. The driver runs here against stand-in tfg
# scripts, so these checks take a second or two.
# Sourced by tests/run.sh ($TFG, $ROOT, $tmp, expect, contains, ok, ko).
suite=build
bd=$(mktemp -d) # not in $tmp: run as root, the driver runs its tfg as nobody
chmod 755 "$bd"

# A make of its own: not the sub-make of `make test` that may run us.
top_make() { env -u MAKELEVEL -u MAKEFLAGS -u MFLAGS make --no-print-directory -C "$ROOT" "$@"; }

# Parallel by default, and the first line says what is built and why.
top_make -n BUILD="$bd/b" CUDA=0 all >"$tmp/out" 2>"$tmp/err"
contains make-says-why "$tmp/out" "tfg: CUDA=0, so the build has the CPU backend only"
jobs=$(nproc 2>/dev/null || echo 2)
echo 'show-flags: ; @echo flags: $(firstword $(filter -j%,$(MAKEFLAGS)))' >"$bd/show.mk"
top_make -s -f Makefile -f "$bd/show.mk" BUILD="$bd/b" CUDA=0 show-flags >"$tmp/out" 2>&1
contains make-parallel "$tmp/out" "flags: -j$jobs"
top_make -s -j1 -f Makefile -f "$bd/show.mk" BUILD="$bd/b" CUDA=0 show-flags >"$tmp/out" 2>&1
contains make-j1-wins "$tmp/out" "flags: -j1"

# Both parser files from one Bison run (two runs at once raced on them).
top_make -n -j2 BUILD="$bd/b" CUDA=0 "$bd/b/gen/parser.tab.c" "$bd/b/gen/parser.tab.h" >"$tmp/out" 2>&1
n=$(grep -c 'bison -Wall' "$tmp/out")
if [ "$n" -eq 1 ]; then ok; else ko "build bison-once: $n Bison runs for the two parser files"; fi

# ---- tests/fuzz/mutate.py against stand-ins for tfg ------------------------------
# fake NAME BODY: $bd/NAME, a shell script standing in for tfg.
fake() {
  printf '#!/bin/sh\n%s\n' "$2" >"$bd/$1"
  chmod 755 "$bd/$1"
}
# fuzz NAME ARGS...: runs the driver on 3 mutants of two examples with the
# stand-in NAME; its output in $tmp/out, findings in $bd/f-NAME.
fuzz() {
  name=$1
  shift
  python3 "$ROOT/tests/fuzz/mutate.py" --tfg "$bd/$name" --count 3 --jobs 1 --timeout 1 \
    --findings "$bd/f-$name" "$@" "$ROOT/examples/hello.tfg" "$ROOT/examples/xor.tfg" >"$tmp/out" 2>&1
}

fake ok 'exit 0'
fuzz ok
rc=$?
if [ $rc -eq 0 ]; then ok; else ko "build fuzz-clean: exit $rc"; tail -3 "$tmp/out"; fi
contains fuzz-clean "$tmp/out" "fuzz: 0 distinct findings"

fake located 'echo "x.tfg:1:2: error: bad" >&2; exit 1'
fuzz located
if [ $? -eq 0 ]; then ok; else ko "build fuzz-located: a located error is no finding"; tail -3 "$tmp/out"; fi

fake unlocated 'echo "tfg: error: bad" >&2; exit 1'
fuzz unlocated --no-minimize
contains fuzz-unlocated "$tmp/out" "unlocated: exit 1: tfg: error: bad"

# A crash: found, saved with its command, and minimized to one line.
fake segv 'kill -SEGV $$'
fuzz segv
rc=$?
if [ $rc -eq 1 ]; then ok; else ko "build fuzz-signal: exit $rc, expected 1"; fi
contains fuzz-signal "$tmp/out" "signal"
d=$(ls -d "$bd"/f-segv/signal-* 2>/dev/null | head -1)
if [ -n "$d" ] && [ -s "$d/mutant.tfg" ] && [ -s "$d/cmd.json" ] && [ "$(wc -l <"$d/min.tfg")" -eq 0 ]; then ok
else ko "build fuzz-saved: no mutant.tfg, cmd.json and one-line min.tfg in '$d'"; fi
# the same finding replayed from what was saved
python3 "$ROOT/tests/fuzz/mutate.py" --tfg "$bd/segv" --timeout 1 --replay "$d" >"$tmp/out" 2>&1
contains fuzz-replay "$tmp/out" "still found"

# A process that sleeps past the timeout is a hang, named by where it waits.
fake hang 'case "$*" in *fuzz-mutant.tfg) exec sleep 30 ;; esac'
fuzz hang --count 1
contains fuzz-hang "$tmp/out" "hang: blocked in"

# Mutants cannot write outside the scratch copy: their strings that leave it
# are rewritten, and run as root they run as nobody (the checkout is not theirs).
(cd "$ROOT/tests/fuzz" && python3 -B -c 'import mutate
src = b"checkpoint = \"/tmp/x\" + \"..\" + \"a/../b\"; import \"~/y\""
out = mutate.confine(src)
assert b"\"/" not in out and b".." not in out and b"\"~" not in out, out
print("confined")') >"$tmp/out" 2>&1
contains fuzz-confine-paths "$tmp/out" "confined"
if [ "$(id -u)" -eq 0 ]; then
  fake writer "touch '$ROOT/tests/golden/fuzz-escape' 2>/dev/null; touch out.tfg; exit 0"
  fuzz writer
  if [ ! -e "$ROOT/tests/golden/fuzz-escape" ]; then ok
  else ko "build fuzz-confined: a mutant wrote into the checkout"; rm -f "$ROOT/tests/golden/fuzz-escape"; fi
fi
rm -rf "$bd"
