# tests/mpi.sh: tfg as the ranks of an mpirun job (runtime/mpi.h; CLI.md
# "Many processes and machines"), sourced by tests/run.sh ($TFG, $ROOT,
# $tmp, expect, contains, ok, ko). Open MPI comes from `make deps`; the
# suite fails, it does not skip, where mpirun is missing. mpirun refuses
# root unless told (CI runs as root); --oversubscribe lets 4 ranks share 2
# cores.
suite=mpi
if ! command -v mpirun >/dev/null 2>&1; then
  ko "$suite: no mpirun (run \`make deps\`: it installs openmpi-bin)"
else
  OMPI_ALLOW_RUN_AS_ROOT=1
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
  mpi_run() { timeout 120 mpirun --oversubscribe "$@"; }

  # every rank joins the job and knows its place in it
  expect mpi-version 0 mpi_run -np 2 "$TFG" version &&
    contains mpi-version "$tmp/out" "rank 0 of 2" && contains mpi-version "$tmp/out" "rank 1 of 2"
  expect mpi-version-alone 0 "$TFG" version && contains mpi-version-alone "$tmp/out" "not started by mpirun"

  # ranks that would not build the same collectives are refused before
  # anything runs, each saying so, the one that differs where
  mkdir -p "$tmp/mpi"
  cat >"$tmp/mpi/w.tfg" <<'TFG'
let width = 8
x = normal([4, 3], seed = 1)
param w: f32[3, width] = glorot()
train mean(matmul(x, w) * matmul(x, w)) { optimizer = sgd(lr = 0.1); steps = 3; checkpoint = "w.safetensors" }
print w
TFG
  expect mpi-different 2 mpi_run -np 1 "$TFG" run --set width=8 "$tmp/mpi/w.tfg" : -np 1 "$TFG" run --set width=9 "$tmp/mpi/w.tfg" &&
    contains mpi-different "$tmp/err" "rank 1: the ranks do not build the same collective schedule: rank 1 differs from rank 0" &&
    contains mpi-different "$tmp/err" "line 1 of it is '--set width=9' where rank 0 has '--set width=8'"
  if [ -e "$tmp/mpi/w.safetensors" ]; then ko "$suite mpi-different: a refused job wrote a checkpoint"; else ok; fi

  # the same job on 2 ranks: rank 0 prints, logs and writes the checkpoint
  # for the job; the others are quiet; the result is one process's
  expect mpi-alone 0 "$TFG" run "$tmp/mpi/w.tfg" && cp "$tmp/out" "$tmp/mpi/alone.out" &&
    mv "$tmp/mpi/w.safetensors" "$tmp/mpi/alone.safetensors"
  expect mpi-job 0 mpi_run -np 2 "$TFG" run "$tmp/mpi/w.tfg" &&
    if cmp -s "$tmp/out" "$tmp/mpi/alone.out" && [ "$(grep -c '^trained' "$tmp/err")" = 1 ] &&
      cmp -s "$tmp/mpi/w.safetensors" "$tmp/mpi/alone.safetensors"; then ok
    else ko "$suite mpi-job: not one print, one log and the checkpoint of one process"; fi
fi
