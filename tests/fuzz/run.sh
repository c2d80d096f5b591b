#!/bin/sh
# tests/fuzz/run.sh FUZZER SECONDS: fuzz the front end.
#
# The corpus (tests/fuzz/corpus) starts from every golden program and
# example and keeps what the fuzzer finds. A crash, leak or hang leaves
# its input in tests/fuzz/regress, which `make test` runs on every build.
set -u
FUZZER=$1
SECONDS_TO_RUN=${2:-600}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CORPUS="$ROOT/tests/fuzz/corpus"
REGRESS="$ROOT/tests/fuzz/regress"
mkdir -p "$CORPUS" "$REGRESS"
seed=$(mktemp -d)
trap 'rm -rf "$seed"' EXIT
cp "$ROOT"/tests/golden/*.tfg "$ROOT"/examples/*.tfg "$seed"/ 2>/dev/null
"$FUZZER" -max_total_time="$SECONDS_TO_RUN" -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
  -dict="$ROOT/tests/fuzz/tfg.dict" -artifact_prefix="$REGRESS/" -print_final_stats=1 \
  "$CORPUS" "$seed"
rc=$?
# Keep the corpus small enough to commit: merge it down to what adds coverage.
min=$(mktemp -d)
"$FUZZER" -merge=1 "$min" "$CORPUS" >/dev/null 2>&1 && rm -rf "$CORPUS" && mv "$min" "$CORPUS"
echo "fuzz: $(ls "$CORPUS" | wc -l) corpus files; $(ls "$REGRESS" | wc -l) regression inputs"
exit $rc
