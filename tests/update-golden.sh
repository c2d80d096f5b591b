#!/bin/sh
# tests/update-golden.sh [BUILD]: rewrite the expected output of every golden
# file from the current build. Read the diff before committing it: the
# golden files are the specification of tfg's messages.
BUILD=${1:-build}
TFG="$(cd "$(dirname "$0")/.." && pwd)/$BUILD/tfg"
cd "$(dirname "$0")/golden" || exit 1
for src in *.tfg; do
  name=${src%.tfg}
  if [ -f "$name.ast" ] || { [ ! -f "$name.err" ] && case $name in ok-*) true;; *) false;; esac; }; then
    "$TFG" check --ast --color=never "$src" >"$name.ast"
  else
    "$TFG" check --color=never "$src" 2>"$name.err"
  fi
done
