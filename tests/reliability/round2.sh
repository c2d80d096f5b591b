# tests/reliability/round2.sh: warnings before the training they are
# about, and every example trained under mirrored(). Sourced
# by tests/run.sh ($TFG, $ROOT, $tmp, expect, contains, ok, ko,
# mlp_program).
suite=round2
r2="$tmp/round2"
mkdir -p "$r2"

# first_line_of FILE TEXT: the number of FILE's first line holding TEXT (0: none)
first_line_of() { grep -nF -- "$2" "$1" | head -1 | cut -d: -f1 | grep . || echo 0; }

# ---- a warning about what a checkpoint restored comes before the first step --------
# (it came after the training, which had overwritten the checkpoint by then)
mlp_program "$r2/m" "adam(lr = 1e-2)" ""
sed -i 's/^  log_every = 20$/  log_every = 1/' "$r2/m.tfg"
expect warn-first-adam 0 "$TFG" run --quiet "$r2/m.tfg"
sed 's/adam(lr = 1e-2)/sgd(lr = 1e-2)/' "$r2/m.tfg" >"$r2/m-sgd.tfg"
expect warn-before-steps 0 "$TFG" run --color=never "$r2/m-sgd.tfg"
w=$(first_line_of "$tmp/err" "warning: checkpoint") s=$(first_line_of "$tmp/err" "step 1/")
if [ "$w" -gt 0 ] && [ "$s" -gt "$w" ]; then ok; else ko "$suite warn-before-steps: the warning at line $w, step 1 at line $s"; head -5 "$tmp/err"; fi

# ---- the REPL: a no_decay pattern that matches nothing is said before the train ---------
cat >"$r2/nd.in" <<TFG
x = tensor([[1.0, 2.0]])
param w: f32[2, 1] = ones()
train sum(matmul(x, w)) { optimizer = adamw(lr = 0.1); steps = 3; log_every = 1; no_decay = ["nothing.*"] }
TFG
(cd "$r2" && "$TFG" repl --color=never <nd.in) >"$tmp/out" 2>"$tmp/err"
w=$(first_line_of "$tmp/err" "matches no param") s=$(first_line_of "$tmp/err" "step 1/")
if [ "$w" -gt 0 ] && [ "$s" -gt "$w" ]; then ok; else ko "$suite repl-warn-before-steps: the warning at line $w, step 1 at line $s"; head -5 "$tmp/err"; fi

# ---- every example trains under mirrored() ---------------------------------------------
# (examples/gpt.tfg reshaped its loss with [batch * T, 256], which a
# replica holding half the batch cannot build: -1 is the batch as each
# replica has it). The strategy goes into each train block that has the
# default one: mirrored() on host*2; an example that pins ops to gpu:0
# and gpu:1 (model parallel, an ensemble) needs a group of two devices per
# replica: mirrored([[gpu:0, gpu:1], [gpu:2, gpu:3]]) on host*4. 2 steps
# each, logs and checkpoints in $r2.
for ex in "$ROOT"/examples/*.tfg; do
  name=$(basename "$ex" .tfg)
  grep -q '^train ' "$ex" || continue
  grep -q 'strategy *=' "$ex" && continue # its own strategy: run as written elsewhere
  strategy='mirrored()' devices='host*2'
  if grep -q 'gpu:1' "$ex"; then strategy='mirrored([[gpu:0, gpu:1], [gpu:2, gpu:3]])' devices='host*4'; fi
  sed -e 's|^\(train [^{]*{\)|\1 strategy = '"$strategy"';|' \
      -e 's|"data/|"'"$ROOT"'/examples/data/|g' -e 's|^\( *\)epochs = [0-9]*|\1steps = 2|' \
      -e 's|^let steps = .*|let steps = 2|' -e 's|^let log_file = .*|let log_file = "'"$r2/$name"'-run.csv"|' \
      "$ex" >"$r2/$name.tfg"
  grep -qF "strategy = $strategy" "$r2/$name.tfg" || { ko "$suite mirrored-$name: no train block took the strategy"; continue; }
  expect "mirrored-$name" 0 "$TFG" run --quiet --devices "$devices" "$r2/$name.tfg"
done

# ---- metrics are named by their source text, in the log, the progress and the plot ------
# (two accuracies were both "accuracy": the header "accuracy","accuracy")
mlp_program "$r2/mt" "adam(lr = 1e-2)" ""
sed -i -e 's/^  log_every = 20$/  log_every = 10\n  log = "mt.csv"\n  metrics = [accuracy(logits, y), accuracy(logits * 2.0, y)]/' \
  -e 's/^  checkpoint = .*$//' "$r2/mt.tfg"
expect metric-names 0 "$TFG" run --color=never "$r2/mt.tfg" &&
  contains metric-names "$r2/mt.csv" 'step,loss,"accuracy(logits, y)","accuracy(logits * 2.0, y)",lr,rows_per_s,seconds'
contains metric-names-progress "$tmp/err" "accuracy(logits, y) 0."
contains metric-names-progress "$tmp/err" "accuracy(logits * 2.0, y) 0."
expect metric-names-plot 0 "$TFG" plot "$r2/mt.csv" -o "$r2/mt.svg" &&
  contains metric-names-plot "$r2/mt.svg" ">accuracy(logits * 2.0, y)</text>"
