# tests/reliability/round2_mpi.sh: ranks of one mpirun job that run
# different programs are refused before anything runs (cli/job.c
# cli_same_job), not only ranks whose collectives differ: two programs alike
# but for an optimizer's lr, an op or an initializer would train two
# models into one log and one checkpoint. Every rank exits 2, the one
# that differs naming its first differing line; the same program on both
# ranks still runs. Sourced by tests/run.sh ($TFG, $ROOT, $tmp, expect,
# contains, ok, ko); as tests/mpi.sh, it fails where mpirun is missing.
suite=mpi-programs
if mpi_ready "$suite"; then
  rm2="$tmp/round2-mpi"
  mkdir -p "$rm2"
  cat >"$rm2/a.tfg" <<'TFG'
x = normal([4, 3], seed = 1)
param w: f32[3, 8] = glorot()
train mean(matmul(x, w) * matmul(x, w)) { optimizer = adamw(lr = 0.001); steps = 3; checkpoint = "w.safetensors" }
print w
TFG

  # rm2_pair NAME SED: runs a.tfg as rank 0 and a.tfg edited by SED as
  # rank 1, each rank's exit status into $rm2/NAME.rc0 and .rc1 (mpirun
  # reports only the first rank's), stderr in $tmp/err
  rm2_pair() {
    sed "$2" "$rm2/a.tfg" >"$rm2/$1.tfg"
    rm -f "$rm2/w.safetensors" "$rm2/$1.rc0" "$rm2/$1.rc1"
    rm2_rank='"$0" run --color=never "$1"; rc=$?; echo $rc >"$2"; exit $rc'
    expect "$1" 2 timeout 120 mpirun --oversubscribe \
      -np 1 sh -c "$rm2_rank" "$TFG" "$rm2/a.tfg" "$rm2/$1.rc0" : \
      -np 1 sh -c "$rm2_rank" "$TFG" "$rm2/$1.tfg" "$rm2/$1.rc1"
    # a rank's own status, where it wrote one: mpirun may end the other
    # rank's wrapper once the first rank exits, before it writes (each
    # rank's refusal on stderr is checked below)
    rc0=$(cat "$rm2/$1.rc0" 2>/dev/null) rc1=$(cat "$rm2/$1.rc1" 2>/dev/null)
    if { [ "$rc0" = 2 ] || [ "$rc1" = 2 ]; } && [ "${rc0:-2}" = 2 ] && [ "${rc1:-2}" = 2 ]; then ok
    else ko "$suite $1: rank exits '$rc0', '$rc1', expected 2 and 2"; fi
    contains "$1" "$tmp/err" "tfg run: rank 0: the ranks do not build the same collective schedule: rank 1 differs from rank 0"
    if [ -e "$rm2/w.safetensors" ]; then ko "$suite $1: a refused job wrote a checkpoint"; else ok; fi
  }

  # only the lr differs: the optimizer's line, with every hyperparameter
  rm2_pair mpi-lr 's/adamw(lr = 0.001)/adamw(lr = 0.002)/'
  contains mpi-lr "$tmp/err" "here, rank 1, line 4 of it is 'train at line 3: optimizer adamw lr 0.002 weight_decay 0.01 b1 0.9 b2 0.999 eps 1e-08' where rank 0 has 'train at line 3: optimizer adamw lr 0.001 weight_decay 0.01 b1 0.9 b2 0.999 eps 1e-08'"
  # another setting of the train: its own line
  rm2_pair mpi-clip 's/steps = 3;/steps = 3; clip_grad_norm = 1.0;/'
  contains mpi-clip "$tmp/err" "is 'train at line 3: clip_grad_norm 1, precision f32, accumulate 0, no_decay [], zero 0, recompute []'"
  # an op of the model: its node's line
  rm2_pair mpi-op 's/\* matmul(x, w))/+ matmul(x, w))/'
  contains mpi-op "$tmp/err" "is 'node 4 at line 3: add f32[4,8] of 2,3' where rank 0 has 'node 4 at line 3: mul f32[4,8] of 2,3'"
  # a param's initializer
  rm2_pair mpi-init 's/glorot()/he()/'
  contains mpi-init "$tmp/err" "is 'node 1 at line 2: param f32[3,8] name=w init=he' where rank 0 has 'node 1 at line 2: param f32[3,8] name=w init=glorot'"

  # the same program on both ranks runs as one job (rank 0 logs)
  rm -f "$rm2/w.safetensors"
  expect mpi-same-program 0 timeout 120 mpirun --oversubscribe -np 2 "$TFG" run "$rm2/a.tfg" &&
    if [ "$(grep -c '^trained' "$tmp/err")" = 1 ] && [ -s "$rm2/w.safetensors" ]; then ok
    else ko "$suite mpi-same-program: not one log and a checkpoint: $(tail -2 "$tmp/err")"; fi
fi
