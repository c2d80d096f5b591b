# tests/reliability/round2_load.sh: a `load` file's optimizer state is no
# param and never an error (docs/language.md "load"), whatever its PARAM:
# slots of a param in neither the file nor the program ("u.w:exp_avg", a
# file whose u.w was cut out and its state left) load strict, as a
# train's checkpoint does, while a tensor that is no param and no state
# is still refused under strict. The file comes from tests/ckpt_writer.py
# (the independent writer: h.w [[0,1,2],[3,4,5]], h.b [0.5,-1.5,2.25])
# with more tensors added. Sourced by tests/run.sh ($TFG, $ROOT, $tmp,
# expect, contains, ok, ko).
suite=load
rl="$tmp/round2-load"
mkdir -p "$rl"

# rl_file OUT NAME...: ckpt_writer.py's file plus an f32[2,3] tensor of
# nines for each NAME.
rl_file() {
  python3 - "$ROOT/tests" "$@" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import ckpt_writer
out, names = sys.argv[2], sys.argv[3:]
ckpt_writer.TENSORS.extend((name, "F32", [2, 3], [9.0] * 6) for name in names)
sys.argv = ["ckpt_writer.py", out]
sys.exit(ckpt_writer.main())
PY
}

# rl_program FILE SETTINGS: a program of h.w and h.b that loads
# orphan.safetensors with SETTINGS ("" or "{ strict = false }").
rl_program() {
  cat >"$1" <<TFG
load "orphan.safetensors" $2
scope h {
  param w: f32[2, 3]
  param b: f32[3]
}
print w, b
TFG
}

rl_file "$rl/orphan.safetensors" "h.w:exp_avg" "u.w:exp_avg" "u.w:exp_avg_sq"
rl_program "$rl/strict.tfg" ""
rl_program "$rl/lax.tfg" "{ strict = false }"
# strict: the params from the file, every slot skipped (the check reads
# the header, the run the whole file: both say so)
expect load-orphan-state-check 0 "$TFG" check "$rl/strict.tfg"
expect load-orphan-state-strict 0 "$TFG" run "$rl/strict.tfg" &&
  contains load-orphan-state-strict "$tmp/out" "[[0. 1. 2.]" && contains load-orphan-state-strict "$tmp/out" "[ 0.5  -1.5   2.25]"
# strict = false: the same (any key the program lacks is skipped)
expect load-orphan-state-lax 0 "$TFG" run "$rl/lax.tfg" && contains load-orphan-state-lax "$tmp/out" "[[0. 1. 2.]"

# strict still refuses a tensor that is no param and no state, the state
# beside it not counted: u.w alone is named
rl_file "$rl/orphan.safetensors" "u.w:exp_avg" "u.w"
expect load-orphan-param-strict 1 "$TFG" run --color=never "$rl/strict.tfg" &&
  contains load-orphan-param-strict "$tmp/err" "has tensor 'u.w', which is no param of this program" &&
  if grep -q "nor are" "$tmp/err"; then ko "$suite load-orphan-param-strict: the state was counted: $(head -1 "$tmp/err")"; else ok; fi
# a name with a ':' but no slot after it is no state: strict refuses it
rl_file "$rl/orphan.safetensors" "u.w:1"
expect load-colon-not-state 1 "$TFG" check --color=never "$rl/strict.tfg" &&
  contains load-colon-not-state "$tmp/err" "has tensor 'u.w:1', which is no param of this program"
