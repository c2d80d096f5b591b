# bench/lib.sh: what the benchmark scripts share (sourced from the
# repository's root).
#
#   . bench/lib.sh
#   set -- $(tfg_trained build/tfg run --threads 2 bench/mlp_digits.tfg)   # $1 steps, $2 seconds

# tfg_trained CMD...: runs a `tfg run` command line once untimed (warm-up:
# the page cache, OpenBLAS's threads, cuBLAS's heuristics, CUDA contexts),
# then again, and prints "N T" from its "trained N steps in T s" line:
# the whole train loop (each step's batch fed from the host, forward,
# backward, update) over the steps. Nothing when the run printed none.
tfg_trained() {
  "$@" --quiet >/dev/null 2>&1
  "$@" 2>&1 >/dev/null | awk '/^trained/ { print $2, $5; exit }'
}

# Debian's python3 (where python3-torch installs), else the first on PATH.
bench_python() {
  if [ -x /usr/bin/python3 ]; then echo /usr/bin/python3; else echo python3; fi
}

# bench_torch PY: 1 when PY imports torch, else 0 after saying so on
# stderr (the script then runs tfg's side only).
bench_torch() {
  if "$1" -c 'import torch' 2>/dev/null; then echo 1; else
    echo "pytorch: not installed (apt-get install python3-torch); tfg's side only" >&2
    echo 0
  fi
}
