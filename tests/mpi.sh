# tests/mpi.sh: tfg as the ranks of an mpirun job (runtime/mpi.h; CLI.md
# "Many processes and machines"), sourced by tests/run.sh ($TFG, $ROOT,
# $tmp, expect, contains, ok, ko). Open MPI comes from `make deps`; the
# suite fails, it does not skip, where mpirun is missing. mpirun refuses
# root unless told (CI runs as root); --oversubscribe lets 4 ranks share 2
# cores.
suite=mpi
if mpi_ready "$suite"; then
  mpi_run() { timeout 120 mpirun --oversubscribe "$@"; }

  # every rank joins the job and knows its place in it
  expect mpi-version 0 mpi_run -np 2 "$TFG" version &&
    contains mpi-version "$tmp/out" "rank 0 of 2" && contains mpi-version "$tmp/out" "rank 1 of 2"
  expect mpi-version-alone 0 "$TFG" version && contains mpi-version-alone "$tmp/out" "not started by mpirun"

  # the job's collectives one by one (tests/unit/test_mpi.c): the
  # broadcast that carries NCCL's unique id for CUDA devices across
  # processes (the NCCL side needs a GPU per rank: not run here), the
  # schedule check, the mean of logged values, the all-reduce's overlap,
  # the reduce-scatter and all-gather across processes
  unit_bin="$ROOT/$BUILD/unit"
  [ -x "$unit_bin" ] || unit_bin="$BUILD/unit"
  expect mpi-unit 0 mpi_run -x CK_FORK=no -x CK_RUN_SUITE=mpi -np 2 "$unit_bin" &&
    if [ "$(grep -c '100%: Checks: 4, Failures: 0, Errors: 0' "$tmp/out")" = 2 ]; then ok
    else ko "$suite mpi-unit: $(grep -E 'Checks|:F:|:E:' "$tmp/out" | head -4)"; fi

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

  # mirrored under mpirun spans the ranks: R replicas on each of N ranks
  # train as one process mirrored over N x R replicas (the digits MLP of
  # mlp_program, 20 steps of Adam), within strategies.sh's 2e-5 (the
  # all-reduce sums in another order), its loss and evaluation logged once
  # for the job as the one process logs them
  mlp_program "$tmp/mpi/one2" "adam(lr = 1e-2)" "mirrored([gpu:0, gpu:1])"
  mlp_program "$tmp/mpi/one4" "adam(lr = 1e-2)" "mirrored([gpu:0, gpu:1, gpu:2, gpu:3])"
  mlp_program "$tmp/mpi/job1" "adam(lr = 1e-2)" "mirrored([gpu:0])"
  mlp_program "$tmp/mpi/job2" "adam(lr = 1e-2)" "mirrored([gpu:0, gpu:1])"
  expect mpi-one2 0 "$TFG" run --devices host*2 "$tmp/mpi/one2.tfg" &&
    grep -E '^(step|eval)' "$tmp/err" | sed 's/  [0-9.]* steps\/s//' >"$tmp/mpi/one2.log"
  expect mpi-one4 0 "$TFG" run --devices host*4 "$tmp/mpi/one4.tfg"
  for n in 2 4; do
    sed "s|job1.safetensors|np$n.safetensors|" "$tmp/mpi/job1.tfg" >"$tmp/mpi/np$n.tfg"
    expect "mpi-np$n" 0 mpi_run -np $n "$TFG" run --devices host "$tmp/mpi/np$n.tfg" &&
      if python3 "$ROOT/tests/ckpt_compare.py" "$tmp/mpi/np$n.safetensors" "$tmp/mpi/one$n.safetensors" 2e-5 \
        >"$tmp/cmp" 2>&1; then ok; else ko "$suite mpi-np$n: $(cat "$tmp/cmp")"; fi
  done
  expect mpi-np2-log 0 mpi_run -np 2 "$TFG" run --devices host "$tmp/mpi/job1.tfg" &&
    grep -E '^(step|eval)' "$tmp/err" | sed 's/  [0-9.]* steps\/s//' >"$tmp/mpi/np2.log" &&
    if [ -s "$tmp/mpi/one2.log" ] && cmp -s "$tmp/mpi/np2.log" "$tmp/mpi/one2.log"; then ok
    else ko "$suite mpi-np2-log: the job logged $(cat "$tmp/mpi/np2.log"), one process $(cat "$tmp/mpi/one2.log")"; fi
  sed "s|job1.safetensors|tagged.safetensors|" "$tmp/mpi/job1.tfg" >"$tmp/mpi/tagged.tfg"
  expect mpi-log-all-ranks 0 mpi_run -np 2 "$TFG" run --log-all-ranks --devices host "$tmp/mpi/tagged.tfg" &&
    if [ "$(grep -c '^\[rank 0\] trained 20 steps' "$tmp/err")" = 1 ] &&
      [ "$(grep -c '^\[rank 1\] trained 20 steps' "$tmp/err")" = 1 ] && ! grep -q '^trained' "$tmp/err"; then ok
    else ko "$suite mpi-log-all-ranks: not one tagged line per rank: $(grep trained "$tmp/err")"; fi
  expect mpi-np2x2 0 mpi_run -np 2 "$TFG" run --devices host*2 "$tmp/mpi/job2.tfg" &&
    if python3 "$ROOT/tests/ckpt_compare.py" "$tmp/mpi/job2.safetensors" "$tmp/mpi/one4.safetensors" 2e-5 \
      >"$tmp/cmp" 2>&1; then ok; else ko "$suite mpi-np2x2: $(cat "$tmp/cmp")"; fi
  # mirrored() with no --devices under mpirun: each rank takes its share
  # of the machine's GPUs, here none, so one host device each; 2 ranks
  # train as one process of 2 replicas
  mlp_program "$tmp/mpi/all" "adam(lr = 1e-2)" "mirrored()"
  expect mpi-mirrored-all 0 mpi_run -np 2 "$TFG" run "$tmp/mpi/all.tfg" &&
    if python3 "$ROOT/tests/ckpt_compare.py" "$tmp/mpi/all.safetensors" "$tmp/mpi/one2.safetensors" 2e-5 \
      >"$tmp/cmp" 2>&1; then ok; else ko "$suite mpi-mirrored-all: $(cat "$tmp/cmp")"; fi
  # the batch must split over every rank's replicas: 16 rows over 3 x 2
  mlp_program "$tmp/mpi/odd" "adam(lr = 1e-2)" "mirrored([gpu:0, gpu:1])"
  expect mpi-uneven 1 mpi_run -np 3 "$TFG" run --color=never --devices host*2 "$tmp/mpi/odd.tfg" &&
    contains mpi-uneven "$tmp/err" "mirrored makes 2 replicas here on each of 3 ranks: 6 in all"

  # a pipeline across the ranks (compiler/ranks.h): every rank builds the
  # whole step, runs its own stages and sends the others what they read.
  # The job runs the one process's ops in its order, on the same bytes (a
  # send copies them), so the params after 10 AdamW steps are bit for bit
  # the one process's (tolerance 0) and so is the log: each schedule, with
  # clipping (its global norm reads every stage's gradients) and bf16; 4
  # stages over 2 ranks of 2 devices; 2 data replicas of whole pipelines
  # on 2 ranks (an all-reduce across them); and a resume under mpirun.
  pipe_program() { # FILE STRATEGY SETTINGS: the digits MLP of 4 layers
    cat >"$1.tfg" <<TFG
import nn
data digits = csv("$digits", label = -1, test = 0.2, shuffle = true, seed = 7)
input x: f32[16, 64] from digits.x
input y: i32[16] from digits.y
logits = nn.mlp(x / 16.0, [48, 32, 24, 10])
train cross_entropy(logits, y) {
  optimizer = adamw(lr = 1e-2)
  steps = 10
  strategy = $2
  checkpoint = "$1.safetensors"
  log_every = 5
  metrics = [accuracy(logits, y)]
  $3
}
TFG
  }
  pipe_same() { # NAME ONE-PROCESS-DEVICES RANKS RANK-DEVICES STRATEGY SETTINGS
    pipe_program "$tmp/mpi/$1-one" "$5" "$6"
    pipe_program "$tmp/mpi/$1-job" "$5" "$6"
    expect "mpi-$1-one" 0 "$TFG" run --devices "$2" "$tmp/mpi/$1-one.tfg" &&
      grep -E '^(step|eval)' "$tmp/err" | sed 's/  [0-9.]* steps\/s//' >"$tmp/mpi/$1-one.log"
    expect "mpi-$1" 0 mpi_run -np "$3" "$TFG" run --devices "$4" "$tmp/mpi/$1-job.tfg" &&
      grep -E '^(step|eval)' "$tmp/err" | sed 's/  [0-9.]* steps\/s//' >"$tmp/mpi/$1-job.log" &&
      if ! python3 "$ROOT/tests/ckpt_compare.py" "$tmp/mpi/$1-job.safetensors" "$tmp/mpi/$1-one.safetensors" 0 \
        >"$tmp/cmp" 2>&1; then ko "$suite mpi-$1: $(cat "$tmp/cmp")"
      elif ! [ -s "$tmp/mpi/$1-one.log" ] || ! cmp -s "$tmp/mpi/$1-job.log" "$tmp/mpi/$1-one.log"; then
        ko "$suite mpi-$1: the job logged $(cat "$tmp/mpi/$1-job.log"), one process $(cat "$tmp/mpi/$1-one.log")"
      else ok; fi
  }
  pipe_same pipe-1f1b host*2 2 host "parallel(pipeline = 2)" "micro_batches = 4; clip_grad_norm = 0.5"
  pipe_same pipe-gpipe host*2 2 host "parallel(pipeline = 2)" "micro_batches = 4; schedule = gpipe"
  pipe_same pipe-interleaved host*2 2 host "parallel(pipeline = 2)" "micro_batches = 4; schedule = interleaved(chunks = 2); precision = bf16"
  pipe_same pipe-4x2 host*4 2 host*2 "parallel(pipeline = 4)" "micro_batches = 4"
  pipe_same pipe-data host*4 2 host*2 "parallel(data = 2, pipeline = 2)" "micro_batches = 2"
  # the grad scaler's update and an accumulation's runs are fetched too
  pipe_same pipe-f16 host*2 2 host "parallel(pipeline = 2)" "micro_batches = 4; precision = f16"
  pipe_same pipe-accumulate host*2 2 host "parallel(pipeline = 2)" "micro_batches = 2; accumulate = 2"
  # resumed: 5 steps, then 5 more from the checkpoint rank 0 wrote, as 10
  pipe_program "$tmp/mpi/pipe-resume" "parallel(pipeline = 2)" "micro_batches = 4; clip_grad_norm = 0.5"
  sed 's/steps = 10/steps = 5/' "$tmp/mpi/pipe-resume.tfg" >"$tmp/mpi/pipe-resume5.tfg"
  expect mpi-pipe-resume5 0 mpi_run -np 2 "$TFG" run --devices host "$tmp/mpi/pipe-resume5.tfg"
  expect mpi-pipe-resume 0 mpi_run -np 2 "$TFG" run --devices host "$tmp/mpi/pipe-resume.tfg" &&
    contains mpi-pipe-resume "$tmp/err" "restored $tmp/mpi/pipe-resume.safetensors: 24 tensors, step 5" &&
    if python3 "$ROOT/tests/ckpt_compare.py" "$tmp/mpi/pipe-resume.safetensors" "$tmp/mpi/pipe-1f1b-one.safetensors" 0 \
      >"$tmp/cmp" 2>&1; then ok; else ko "$suite mpi-pipe-resume: $(cat "$tmp/cmp")"; fi
  # what a pipeline across ranks cannot do is said where it is asked for:
  # a print reading two ranks' stages; data replicas of a pipeline that
  # spans ranks; recompute = "auto" (no rank can plan the whole job); a
  # prediction (each rank plans its own stages only)
  pipe_program "$tmp/mpi/pipe-print" "parallel(pipeline = 2)" "micro_batches = 4"
  echo 'print sum(logits)' >>"$tmp/mpi/pipe-print.tfg"
  expect mpi-pipe-print 1 mpi_run -np 2 "$TFG" run --color=never --devices host "$tmp/mpi/pipe-print.tfg" &&
    contains mpi-pipe-print "$tmp/err" "error: matmul reads a value that rank 0 computes and one that rank 1 does" &&
    contains mpi-pipe-print "$tmp/err" "pipe-print.tfg:15:7: note: a value shown here needs it"
  pipe_program "$tmp/mpi/pipe-dp4" "parallel(data = 2, pipeline = 2)" "micro_batches = 2"
  expect mpi-pipe-dp4 1 mpi_run -np 4 "$TFG" run --color=never --devices host "$tmp/mpi/pipe-dp4.tfg" &&
    contains mpi-pipe-dp4 "$tmp/err" "parallel(data = 2, pipeline = 2) over 4 ranks of 1 GPU: a pipeline of 2 stages spans ranks"
  pipe_program "$tmp/mpi/pipe-auto" "parallel(pipeline = 2)" 'micro_batches = 4; recompute = "auto"'
  expect mpi-pipe-auto 1 mpi_run -np 2 "$TFG" run --color=never --devices host "$tmp/mpi/pipe-auto.tfg" &&
    contains mpi-pipe-auto "$tmp/err" 'recompute = "auto" with a pipeline across the 2 ranks of a job is not in this version'
  expect mpi-pipe-predict 0 mpi_run -np 2 "$TFG" plan --predict --devices host "$tmp/mpi/pipe-1f1b-job.tfg" &&
    contains mpi-pipe-predict "$tmp/out" "not predicted: the pipeline spans the job's 2 ranks"

  # ZeRO across the ranks (compiler/strategy/replicate.c): 2 ranks of 2
  # replicas each reduce-scatter the gradients and all-gather the params
  # over all 4 (piece 2 P + r), the optimizer state's pieces gathered from
  # both ranks into rank 0's checkpoint: one process's zero 2 over host*4,
  # within strategies.sh's 2e-5 (the hierarchical sums run in another
  # order), the state whole in the file
  for zn in one job; do zero_program "$tmp/mpi/zero-$zn" "mirrored()" 2 "clip_grad_norm = 0.5"; done
  expect mpi-zero-one 0 "$TFG" run --devices host*4 "$tmp/mpi/zero-one.tfg"
  expect mpi-zero 0 mpi_run -np 2 "$TFG" run --devices host*2 "$tmp/mpi/zero-job.tfg" &&
    if python3 "$ROOT/tests/ckpt_compare.py" "$tmp/mpi/zero-job.safetensors" "$tmp/mpi/zero-one.safetensors" 2e-5 \
      >"$tmp/cmp" 2>&1; then ok; else ko "$suite mpi-zero: $(cat "$tmp/cmp")"; fi

  # every rank writes its own trace (rank 1's as .rank1.json); in rank
  # 0's, with small buckets posted while the backward pass still runs, the
  # leader's compute stream launches ops while its collective stream
  # waits after a bucket's post (that the worker is free meanwhile, not
  # held by MPI, is test_mpi.c's job_allreduce_overlaps, run above)
  sed 's/job1.safetensors/overlap.safetensors/' "$tmp/mpi/job1.tfg" >"$tmp/mpi/overlap.tfg"
  expect mpi-overlap 0 mpi_run -np 2 "$TFG" run --devices host --bucket-size 2K --trace "$tmp/mpi/t.json" "$tmp/mpi/overlap.tfg" &&
    if [ -s "$tmp/mpi/t.json" ] && [ -s "$tmp/mpi/t.rank1.json" ] && python3 - "$tmp/mpi/t.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
name = {e["pid"]: e["args"]["name"] for e in d["traceEvents"] if e.get("ph") == "M" and e.get("name") == "process_name"}
ev = [e for e in d["traceEvents"] if e.get("ph") == "X" and name.get(e["pid"]) == "gpu:0"]
coll = sorted((e for e in ev if e["tid"] == 2), key=lambda e: e["ts"])
waits = [(w["ts"], w["ts"] + w["dur"]) for e, w in zip(coll, coll[1:]) if e["name"] == "allreduce" and w["cat"] == "wait"]
ops = [e for e in ev if e["tid"] == 0 and e["cat"] == "op"]
sys.exit(0 if waits and any(a < o["ts"] < b for o in ops for a, b in waits) else 1)
PY
    then ok; else ko "$suite mpi-overlap: no op ran while the all-reduce across the ranks was in flight"; fi

  # tfg devices, place and plan show the whole job: rank 0 prints once,
  # every rank's devices gathered; --predict counts the ranks
  expect mpi-devices 0 mpi_run -np 2 "$TFG" devices --devices host*2 &&
    if [ "$(grep -c '^job: 2 ranks (mpirun)' "$tmp/out")" = 1 ] && grep -q '^rank 0 (' "$tmp/out" &&
      grep -q '^rank 1 (' "$tmp/out" && [ "$(grep -c '^gpu:1 ' "$tmp/out")" = 2 ]; then ok
    else ko "$suite mpi-devices: not one job with both ranks' devices: $(head -5 "$tmp/out")"; fi
  expect mpi-plan 0 mpi_run -np 2 "$TFG" plan --devices host*2 "$ROOT/examples/data_parallel.tfg" &&
    if [ "$(grep -c '^job: 2 ranks (mpirun)' "$tmp/out")" = 1 ] && [ "$(grep -c '^plan: ' "$tmp/out")" = 1 ] &&
      grep -q '^rank 1 (.*):$' "$tmp/out" && grep -q '^  gpu:0 host device 0, gpu:1 host device 1$' "$tmp/out"; then ok
    else ko "$suite mpi-plan: not the job and one plan: $(head -6 "$tmp/out")"; fi
  expect mpi-predict 0 mpi_run -np 2 "$TFG" plan --predict --devices host*2 "$ROOT/examples/data_parallel.tfg" &&
    if [ "$(grep -c '^predicted step: .*, each of 2 ranks$' "$tmp/out")" = 1 ]; then ok
    else ko "$suite mpi-predict: not one prediction for 2 ranks: $(head -3 "$tmp/out")"; fi

  # a rank that fails alone (a device fault at its step 30, rank 1 only)
  # ends the job at once, never leaving rank 0 waiting in a collective:
  # it says so, MPI_Abort names it, the survivor stops with exit 3, and so
  # does mpirun
  sed 's/steps = 20/steps = 200/; s/job1.safetensors/fail.safetensors/' "$tmp/mpi/job1.tfg" >"$tmp/mpi/fail.tfg"
  start=$(date +%s)
  expect mpi-fail 3 mpi_run -np 1 "$TFG" run --devices host "$tmp/mpi/fail.tfg" : \
    -np 1 env TFG_FAULT_DEVICE=1 TFG_FAULT_STEP=30 "$TFG" run --devices host "$tmp/mpi/fail.tfg" &&
    if [ $(($(date +%s) - start)) -le 30 ] && grep -q 'tfg: rank 1: failed (exit 3): ending the job' "$tmp/err" &&
      grep -q 'injected fault' "$tmp/err" && grep -q 'tfg: rank 0: stopped: the job is ending' "$tmp/err"; then ok
    else ko "$suite mpi-fail: $(grep -E 'rank|fault' "$tmp/err" | head -4)"; fi

  # a rank killed mid-run: mpirun ends the others at once (never a hang)
  # and names the rank, the survivor says why it stops (and exits 3), and
  # the last checkpoint still loads
  sed 's/steps = 20/steps = 1000000/; s/log_every = 20/log_every = 1000000; checkpoint_every = 200/; s/job1.safetensors/kill.safetensors/' \
    "$tmp/mpi/job1.tfg" >"$tmp/mpi/kill.tfg"
  start=$(date +%s)
  mpi_run -np 2 "$TFG" run --devices host "$tmp/mpi/kill.tfg" >"$tmp/mpi/kill.out" 2>"$tmp/mpi/kill.err" &
  mpi_pid=$!
  for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
    [ -e "$tmp/mpi/kill.safetensors" ] && break
    sleep 0.5
  done
  victim=$(pgrep -f "tfg run --devices host $tmp/mpi/kill.tfg" | tail -1)
  [ -n "$victim" ] && kill -9 "$victim"
  wait "$mpi_pid"
  mpi_rc=$?
  took=$(($(date +%s) - start))
  if [ -n "$victim" ] && [ "$mpi_rc" -ne 0 ] && [ "$took" -le 40 ] && grep -q 'rank 1' "$tmp/mpi/kill.err" &&
    grep -q 'tfg: rank 0: stopped: the job is ending' "$tmp/mpi/kill.err" &&
    python3 "$ROOT/tests/ckpt_compare.py" "$tmp/mpi/kill.safetensors" "$tmp/mpi/kill.safetensors" 0 >/dev/null 2>&1
  then ok; else ko "$suite mpi-kill: victim '$victim', exit $mpi_rc after $took s: $(tail -3 "$tmp/mpi/kill.err")"; fi
fi
