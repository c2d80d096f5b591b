# tests/reliability/placer.sh: the placer's memory split with the graph
# passes on (issue 15, item 15). A 24-layer MLP with biases and SGD
# (tests/golden/place-grad-split.tfg: 24 x 4 MiB weights, each with a
# 4 MiB gradient until its update) was refused on host*4:96M and even on
# host*8:96M ("no device has room for the 8.0 MiB ..."), and on
# host*4:200M the weight gradients were computed on gpu:1 and gpu:2 and
# sent to the updates on gpu:0. The placer counts a gradient on its
# param's device; computed elsewhere it was a second copy there, kept to
# the end of the step, which the fit loop took for activations and kept
# free of params until no device had room. Sourced by tests/run.sh
# ($TFG, $ROOT, $tmp, ok, ko, expect, contains).
suite=placer
pl_src="$ROOT/tests/golden/place-grad-split.tfg"

# pl_json_fits NAME: $tmp/out is `tfg place --json`; the params are split
# over more than one device and none holds more than its memory.
pl_json_fits() {
  if python3 - "$tmp/out" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
mem = {d["name"]: d["memory"] for d in doc["devices"]}
used = [t for t in doc["totals"] if t["param_bytes"] > 0]
sys.exit(0 if len(used) >= 2 and all(t["param_bytes"] <= mem[t["device"]] for t in doc["totals"]) else 1)
PY
  then ok; else ko "$suite $1: not split, or a device over its memory"; fi
}

# Fits with the passes on, as with them off (the placer never does worse
# with the passes), and runs: the plan's peaks within 96 MiB.
for pl_opt in 1 0; do
  for pl_spec in 'host*4:96M' 'host*8:96M' 'host*4:64M'; do
    expect "split-$pl_spec-opt$pl_opt" 0 env TFG_OPT=$pl_opt "$TFG" place --json --devices "$pl_spec" "$pl_src" &&
      pl_json_fits "split-$pl_spec-opt$pl_opt"
  done
  expect "run-host*4:96M-opt$pl_opt" 0 env TFG_OPT=$pl_opt "$TFG" run --devices 'host*4:96M' "$pl_src" &&
    contains "run-host*4:96M-opt$pl_opt" "$tmp/err" "trained 2 steps"
done

# Where every param fits on one device, no gradient crosses devices: no
# edge between two devices (red in --dot) ends at an optimizer update.
for pl_opt in 1 0; do
  expect "grads-host*4:200M-opt$pl_opt" 0 env TFG_OPT=$pl_opt "$TFG" place --dot --devices 'host*4:200M' "$pl_src" &&
    if python3 - "$tmp/out" <<'PY'
import re, sys
dot = open(sys.argv[1]).read()
ops = dict(re.findall(r'^\s*(n\d+) \[label="([^"]*)"\];', dot, re.M))
crossing = re.findall(r'^\s*(n\d+) -> (n\d+) \[color=red\];', dot, re.M)
updates = [ops[b] for a, b in crossing if ops[b] == "sgd_update"]
sys.exit(0 if ops and not updates else 1)
PY
    then ok; else ko "$suite grads-host*4:200M-opt$pl_opt: a gradient is sent to its update on another device"; fi
done
