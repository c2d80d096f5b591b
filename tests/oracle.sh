# tests/oracle.sh: tfg's training against PyTorch on the CPU, sourced by
# tests/run.sh (it uses ok and ko, tests/lib.sh, and $TFG, $ROOT, $tmp).
#
# tests/oracle/oracle.py trains a tiny f64 MLP from the same initial params
# (written to the train's checkpoint path, so tfg restores them at step 0)
# in tfg and in PyTorch and compares each step's lr and loss (the log CSV,
# relative 1e-8: its %.9g) and the params and optimizer state after the
# last step (1e-10 relative, f64 on both sides): every lr_schedule (and its
# formula against PyTorch's own schedulers), clip_grad_norm with SGD and
# AdamW, no_decay as PyTorch's two param groups, accumulate as PyTorch's
# micro-batch loop, and plain SGD/Adam/AdamW as a baseline; and precision =
# bf16 on an f32 MLP against PyTorch with the same casts written out and
# against torch.autocast, and precision = f16 with GradScaler's algorithm
# written out (PyTorch 1.13 has it for CUDA only). Its docstring says why
# each tolerance is what it is.
#
# PyTorch is Debian's python3-torch (in the Makefile's DEB_PKGS), importable
# only from /usr/bin/python3: without it the suite fails, it does not skip.
oracle_py=/usr/bin/python3
if ! "$oracle_py" -c "import torch" >"$tmp/oracle.out" 2>&1; then
  ko "oracle: $oracle_py cannot import torch (run \`make deps\`: it installs python3-torch)"
  tail -3 "$tmp/oracle.out"
else
  timeout 300 "$oracle_py" "$ROOT/tests/oracle/oracle.py" "$TFG" "$tmp/oracle" >"$tmp/oracle.out" 2>&1
  oracle_rc=$?
  while read -r oracle_word oracle_rest; do
    case "$oracle_word" in
      ok) ok ;;
      FAIL) ko "oracle $oracle_rest" ;;
    esac
  done <"$tmp/oracle.out"
  if ! grep -q '^ok ' "$tmp/oracle.out"; then
    ko "oracle: tests/oracle/oracle.py did not run (exit $oracle_rc)"
    tail -5 "$tmp/oracle.out"
  elif [ "$oracle_rc" -ne 0 ] && ! grep -q '^FAIL ' "$tmp/oracle.out"; then
    ko "oracle: tests/oracle/oracle.py exited $oracle_rc without naming a failure"
    tail -5 "$tmp/oracle.out"
  fi
fi
