#!/usr/bin/python3
"""tests/oracle/oracle.py TFG WORKDIR: tfg's training against PyTorch, on the CPU.

Run by tests/oracle.sh with /usr/bin/python3 (Debian's python3-torch is
importable only from there). Prints one line per check, "ok CHECK" or
"FAIL CHECK: why" (tests/lib.sh's convention), and exits 1 if any failed.

Every case trains the same tiny model in tfg and in PyTorch from the same
initial params on the same data, and compares step by step:

    h1 = x @ h1.w + h1.b          x: f64[8, 4], 24 rows of x.npy, no shuffle
    out = tanh(h1) @ out.w + out.b
    loss = mse(out, y)            y: f64[8, 3], 24 rows of y.npy

All params are f64 (but for precision = bf16's f32 model, in its own
section below). The initial params are written here (a safetensors
file of params only, no metadata) to the train's checkpoint path before
the run: tfg restores it at the start, with fresh optimizer state and step
0 (runtime/ckpt.c tfg_ckpt_match: no "step" metadata, no state tensors),
so the run's first step is step 1, as PyTorch's first optimizer.step().
The final checkpoint (params and optimizer state) is read back with
tests/ckpt_compare.py's reader.

What is compared, and how close it must be:
  * lr, per step: the CSV's `lr` column (log = "run.csv", log_every = 1)
    against the lr PyTorch's optimizer used at that step (its
    param_groups' lr before optimizer.step(), the scheduler stepped after
    it). The CSV prints it with %.9g, so the tolerance is relative 1e-8:
    9 significant digits are 5e-9 relative at worst.
  * loss, per step: the CSV's loss column against PyTorch's loss before
    that step's update; %.9g again, so relative 1e-8.
  * params and optimizer state (momentum_buffer, exp_avg, exp_avg_sq)
    after the last step: |tfg - torch| <= 1e-10 * (1 + |torch|). Both
    sides compute in f64 and the update is PyTorch's operation for
    operation (kernels/optim_math.h); what may differ is the order of the
    sums in matmul, the gradient norm and mse (a few ulp, 1e-16
    relative), which 10 to 16 steps of SGD with momentum or Adam carry to
    1e-14 or so. A wrong formula, a missed clip, decay on the wrong
    param or an lr off by one step is off by 1e-4 and more.
  * the schedules' spec formulas (LambdaLR's lambda here) against
    PyTorch's own schedulers where one computes the same thing: LinearLR
    (warm-up, linear decay and its floor), CosineAnnealingLR (cosine decay
    up to total), StepLR. Those schedulers compute their factor by a
    product over the steps, not the closed form, so they agree with the
    formula to a few ulp per step: relative 1e-12.
"""
import json
import math
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/: ckpt_compare's reader

from ckpt_compare import load as load_safetensors  # noqa: E402

try:
    import torch
except ImportError as e:  # tests/oracle.sh checks first; this is the backstop
    print("FAIL torch: %s cannot import torch (%s); `make deps` installs python3-torch" % (sys.executable, e))
    sys.exit(1)

torch.set_default_dtype(torch.float64)

BATCH, ROWS, NIN, NHID, NOUT = 8, 24, 4, 6, 3
PARAMS = ["h1.w", "h1.b", "out.w", "out.b"]  # tfg's names (LANGUAGE.md section 3)
LR_TOL = 1e-8  # the CSV's %.9g: 9 significant digits
LOSS_TOL = 1e-8  # the same
PARAM_TOL = 1e-10  # f64 on both sides, a few ulp of summation order per step
SCHED_TOL = 1e-12  # torch's schedulers multiply step by step, a few ulp apart

failures = 0


def ok(check, note=""):
    print("ok %s%s" % (check, "  (" + note + ")" if note else ""))


def fail(check, why):
    global failures
    failures += 1
    print("FAIL %s: %s" % (check, why))


# ---- files ------------------------------------------------------------------


def write_npy(path, t):
    """A 2-D f64 tensor as a NumPy .npy file (format 1.0), without NumPy."""
    rows, cols = t.shape
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, cols)
    pad = -(10 + len(header) + 1) % 64
    header = (header + " " * pad + "\n").encode("latin1")
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header)
        f.write(struct.pack("<%dd" % t.numel(), *t.flatten().tolist()))


def write_params(path, params):
    """A params-only safetensors file (F64, no metadata: step 0)."""
    header, data = {}, bytearray()
    for name in PARAMS:
        t = params[name].detach()
        raw = struct.pack("<%dd" % t.numel(), *t.flatten().tolist())
        header[name] = {"dtype": "F64", "shape": list(t.shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def read_csv(path):
    """The log's rows as dicts of floats (the header names the columns)."""
    lines = open(path).read().splitlines()
    names = lines[0].split(",")
    return [dict(zip(names, (float(v) if v else None for v in line.split(",")))) for line in lines[1:]]


# ---- the data and the initial params ----------------------------------------

gen = torch.Generator().manual_seed(20240607)
X = torch.randn(ROWS, NIN, generator=gen)
Y = torch.randn(ROWS, NOUT, generator=gen)
INIT = {
    "h1.w": torch.randn(NIN, NHID, generator=gen) * 0.7,
    "h1.b": torch.randn(NHID, generator=gen) * 0.3,
    "out.w": torch.randn(NHID, NOUT, generator=gen) * 0.7,
    "out.b": torch.randn(NOUT, generator=gen) * 0.3,
}


def batch(s):
    """Step s's (0-based) rows: consecutive batches, wrapping at the end of
    the data (LANGUAGE.md section 7; shuffle is off)."""
    first = (s % (ROWS // BATCH)) * BATCH
    return X[first:first + BATCH], Y[first:first + BATCH]


# ---- the spec's schedules (LANGUAGE.md section 6), as LambdaLR lambdas -------


def spec_lambda(kind, warmup=0, total=0, min=0.0, every=1, gamma=1.0):
    """factor(s), s the 0-based step, written as LANGUAGE.md section 6 says:
    s < warmup: (s + 1) / warmup; then cosine:
    min + (1 - min)(1 + cos(pi (s - warmup) / (total - warmup))) / 2,
    linear: min + (1 - min)(total - s) / (total - warmup); past total: min
    | step(every, gamma): gamma^floor(s / every) | constant()."""
    def factor(s):
        if kind == "constant":
            return 1.0
        if kind == "step":
            return gamma ** math.floor(s / every)
        if s < warmup:
            return (s + 1) / warmup
        if s > total:
            return min
        if kind == "linear":
            return min + (1 - min) * (total - s) / (total - warmup)
        return min + (1 - min) * (1 + math.cos(math.pi * (s - warmup) / (total - warmup))) / 2
    return factor


def torch_scheduler(opt, sched):
    """PyTorch's scheduler for a case's schedule: StepLR for step, LambdaLR
    with the spec's formula for linear and cosine, none for constant."""
    if sched is None or sched[0] == "constant":
        return None
    kind, args = sched
    if kind == "step":
        return torch.optim.lr_scheduler.StepLR(opt, step_size=args["every"], gamma=args["gamma"])
    return torch.optim.lr_scheduler.LambdaLR(opt, spec_lambda(kind, **args))


def sched_tfg(sched):
    if sched is None:
        return None
    kind, args = sched
    return "%s(%s)" % (kind, ", ".join("%s = %r" % kv for kv in args.items()))


def cross_check_schedules(lr, steps):
    """The spec lambdas against PyTorch's own schedulers, phase by phase."""
    def run(make, n):  # the lr each of n steps would use
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([p], lr=lr)
        sch = make(opt)
        out = []
        for _ in range(n):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            sch.step()
        return out

    S = torch.optim.lr_scheduler
    checks = []
    for warmup, total, mn in [(3, 12, 0.1), (4, 12, 0.05), (2, 9, 0.0)]:
        lin = spec_lambda("linear", warmup, total, mn)
        cos = spec_lambda("cosine", warmup, total, mn)
        # warm-up: (s + 1) / warmup is LinearLR from 1 / warmup to 1 over warmup - 1 steps
        want = run(lambda o: S.LinearLR(o, start_factor=1 / warmup, end_factor=1.0, total_iters=warmup - 1), warmup)
        for name, f in (("linear", lin), ("cosine", cos)):
            checks.append(("%s(%d, %d, %g) warm-up vs LinearLR" % (name, warmup, total, mn),
                           [lr * f(s) for s in range(warmup)], want))
        # linear decay and its floor: LinearLR from 1 to min over total - warmup steps, then min
        n = steps - warmup
        want = run(lambda o: S.LinearLR(o, start_factor=1.0, end_factor=mn, total_iters=total - warmup), n)
        checks.append(("linear(%d, %d, %g) decay and tail vs LinearLR" % (warmup, total, mn),
                       [lr * lin(warmup + j) for j in range(n)], want))
        # cosine decay up to total (CosineAnnealingLR rises again past T_max; the spec stays at min)
        n = total - warmup + 1
        want = run(lambda o: S.CosineAnnealingLR(o, T_max=total - warmup, eta_min=lr * mn), n)
        checks.append(("cosine(%d, %d, %g) decay vs CosineAnnealingLR" % (warmup, total, mn),
                       [lr * cos(warmup + j) for j in range(n)], want))
    for every, gamma in [(5, 0.5), (3, 0.9)]:
        want = run(lambda o: S.StepLR(o, step_size=every, gamma=gamma), steps)
        f = spec_lambda("step", every=every, gamma=gamma)
        checks.append(("step(%d, %g) vs StepLR" % (every, gamma), [lr * f(s) for s in range(steps)], want))
    for name, got, want in checks:
        bad = [(s, g, w) for s, (g, w) in enumerate(zip(got, want)) if not abs(g - w) <= SCHED_TOL * abs(w)]
        if len(got) != len(want) or bad:
            fail("schedule-formula " + name, "step %d: formula %r, torch %r" % bad[0] if bad else "lengths")
        else:
            ok("schedule-formula " + name)


# ---- one case: tfg and PyTorch ------------------------------------------------


def forward(p, x):
    return torch.tanh(x @ p["h1.w"] + p["h1.b"]) @ p["out.w"] + p["out.b"]


def torch_train(opt_kind, opt_args, steps, clip=None, sched=None, no_decay=False, accumulate=1):
    """PyTorch's run: params, losses, lrs, pre-clip gradient norms, state.
    accumulate = k: each step's batch as k micro-batches, each loss / k
    backward into the same .grad (the usual accumulation loop)."""
    p = {k: v.clone().requires_grad_(True) for k, v in INIT.items()}
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[opt_kind]
    if no_decay:  # no_decay = ["*.b"]: the biases in a group of their own without decay
        groups = [{"params": [p["h1.w"], p["out.w"]]}, {"params": [p["h1.b"], p["out.b"]], "weight_decay": 0.0}]
    else:
        groups = [p[k] for k in PARAMS]
    opt = cls(groups, **opt_args)
    sch = torch_scheduler(opt, sched)
    losses, lrs, norms = [], [], []
    for s in range(steps):
        x, y = batch(s)
        opt.zero_grad()
        loss, m = 0.0, BATCH // accumulate
        for k in range(accumulate):
            part = torch.nn.functional.mse_loss(forward(p, x[k * m:(k + 1) * m]), y[k * m:(k + 1) * m]) / accumulate
            part.backward()
            loss += float(part)
        if clip is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_([p[k] for k in PARAMS], clip)))
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        if sch:
            sch.step()
        losses.append(float(loss))
    state = {}
    for k in PARAMS:
        for slot, v in opt.state[p[k]].items():
            if slot != "step" and v is not None:  # SGD without momentum: a None buffer
                state["%s:%s" % (k, slot)] = v
    return {k: v.detach() for k, v in p.items()}, losses, lrs, norms, state


PROGRAM = """\
data d = npy(x = "{x}", y = "{y}")
input x: f64[{b}, {nin}] from d.x
input y: f64[{b}, {nout}] from d.y
fn dense(x, units) {{
  param w: f64[dim(x, -1), units] = zeros()
  param b: f64[units] = zeros()
  return matmul(x, w) + b
}}
h1 = dense(x, {nhid})
out = dense(tanh(h1), {nout})
train mse(out, y) {{
  optimizer = {opt}
  steps = {steps}
  checkpoint = "model.safetensors"
  log = "run.csv"
  log_every = 1
{extra}}}
"""


def tfg_opt(kind, args):
    names = {"lr": "lr", "momentum": "momentum", "nesterov": "nesterov", "weight_decay": "weight_decay"}
    parts = []
    for k, v in args.items():
        v = ("true" if v else "false") if isinstance(v, bool) else repr(v)
        parts.append("%s = %s" % (names[k], v))
    return "%s(%s)" % (kind, ", ".join(parts))


def worst_diff(got, want):
    """max |g - w| / (1 + |w|) over two equal-length sequences."""
    return max((abs(g - w) / (1 + abs(w)) for g, w in zip(got, want)), default=0.0)


def case(name, opt_kind, opt_args, steps=10, clip=None, sched=None, no_decay=False, accumulate=1):
    d = os.path.join(WORK, name)
    os.makedirs(d)
    extra = ""
    if accumulate > 1:  # micro-batches of BATCH / accumulate rows: a step sees the same rows
        extra += "  accumulate = %d\n" % accumulate
    if clip is not None:
        extra += "  clip_grad_norm = %r\n" % clip
    if sched is not None:
        extra += "  lr_schedule = %s\n" % sched_tfg(sched)
    if no_decay:
        extra += '  no_decay = ["*.b"]\n'
    prog = PROGRAM.format(x=XNPY, y=YNPY, b=BATCH // accumulate, nin=NIN, nhid=NHID, nout=NOUT,
                          opt=tfg_opt(opt_kind, opt_args), steps=steps, extra=extra)
    with open(os.path.join(d, "m.tfg"), "w") as f:
        f.write(prog)
    ckpt = os.path.join(d, "model.safetensors")
    write_params(ckpt, INIT)
    r = subprocess.run([TFG, "run", "--color=never", "m.tfg"], cwd=d, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail(name + " run", "tfg exit %d: %s" % (r.returncode, r.stderr.strip()[-400:]))
        return None
    stateful = not (opt_kind == "sgd" and not opt_args.get("momentum"))  # only plain SGD keeps none
    want_line = "restored model.safetensors: %d tensors%s, step 0" % (
        len(PARAMS), ", optimizer state fresh" if stateful else "")
    if want_line in r.stderr:
        ok(name + " restore")
    else:
        fail(name + " restore", "no '%s' in stderr: %s" % (want_line, r.stderr.strip()[:300]))
    params, losses, lrs, norms, state = torch_train(opt_kind, opt_args, steps, clip, sched, no_decay, accumulate)
    rows = read_csv(os.path.join(d, "run.csv"))
    if [int(row["step"]) for row in rows] != list(range(1, steps + 1)):
        fail(name + " log", "steps %s, want 1..%d" % ([row["step"] for row in rows], steps))
        return None
    # lr and loss per step (9 significant digits in the CSV)
    for what, col, want, tol in (("lr", "lr", lrs, LR_TOL), ("loss", "loss", losses, LOSS_TOL)):
        bad = [(s + 1, row[col], w) for s, (row, w) in enumerate(zip(rows, want))
               if not abs(row[col] - w) <= tol * abs(w)]
        if bad:
            fail("%s %s" % (name, what), "step %d: tfg %.9g, torch %.17g (tolerance: relative %g)" % (bad[0] + (tol,)))
        else:
            ok("%s %s" % (name, what))
    # params and optimizer state after the last step
    got = load_safetensors(ckpt)
    want = dict(params)
    want.update(state)
    if sorted(got) != sorted(want):
        fail(name + " tensors", "tfg has %s, torch %s" % (sorted(got), sorted(want)))
        return None
    for group, keys in (("params", PARAMS), ("state", sorted(state))):
        worst, first_bad = 0.0, None
        for k in keys:
            dtype, shape, vals = got[k]
            w = want[k].flatten().tolist()
            if dtype != "F64" or shape != list(want[k].shape):
                first_bad = first_bad or "%s is %s%s, torch F64%s" % (k, dtype, shape, list(want[k].shape))
                continue
            diff = worst_diff(vals, w)
            worst = max(worst, diff)
            if not diff <= PARAM_TOL and first_bad is None:
                i = max(range(len(w)), key=lambda i: abs(vals[i] - w[i]) / (1 + abs(w[i])))
                first_bad = "%s[%d]: tfg %.17g, torch %.17g" % (k, i, vals[i], w[i])
        if first_bad:
            fail("%s %s" % (name, group), "%s (tolerance %g)" % (first_bad, PARAM_TOL))
        else:
            ok("%s %s" % (name, group), "largest difference %.2g" % worst)
    return params, norms


# ---- precision = bf16 (compiler/autocast.h) ------------------------------------
#
# An f32 MLP without biases in the products (x @ w1 + b1, relu, @ w2, cross
# entropy), 10 SGD steps on one batch, its params given as tensor literals
# (9 significant digits: each f32 exactly). Two PyTorch references:
#   * the exact one: every product computed as tfg defines it, by explicit
#     casts: inputs rounded to bf16, multiplied in f32, the result rounded
#     to bf16, and through the same casts backward (the cast of a gradient
#     to bf16 where autocast casts it); everything else in f32. tfg's
#     products are OpenBLAS sgemm on the rounded values, PyTorch's its own
#     f32 mm: the f32 sums differ in order (1e-7 relative), which flips a
#     product's rounding to bf16 (one bf16 ulp, 2^-8 relative) only when it
#     falls within 1e-7 of a rounding boundary (none does here: the params
#     come out the same bits). Losses and params must agree within 5e-4
#     relative, room for a few such flips (each moves a loss by 1e-4 or
#     less), where the f32 run is off by 3e-3 (checked: the bf16 and f32
#     runs must differ by more than the tolerance).
#   * torch.autocast("cpu", dtype=torch.bfloat16) itself: PyTorch's CPU
#     bf16 matmul does not round the f32 sum once (here up to 1.5 bf16 ulps
#     from the exactly rounded product), so the runs drift apart by a few
#     percent over 10 steps: losses within 5% and every param within 5% of
#     the distance it moved.

AC_N, AC_D, AC_H, AC_C, AC_STEPS, AC_LR = 16, 8, 32, 4, 10, 0.5
AC_EXACT_TOL = 5e-4
AC_ADAM_LR = 1e-3
AC_F16_X = 8.0  # inputs this large overflow the first scaled gradients (4 skipped steps)
AC_F16_LR = 0.1  # SGD's lr there: the steps after the skips all good, so the scale grows at 2004


def autocast_data(x_scale=1.0):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(AC_N, AC_D, generator=g, dtype=torch.float32) * x_scale
    y = torch.randint(0, AC_C, (AC_N,), generator=g)
    p = {"w1": torch.randn(AC_D, AC_H, generator=g, dtype=torch.float32) * 0.5,
         "b1": torch.randn(AC_H, generator=g, dtype=torch.float32) * 0.1,
         "w2": torch.randn(AC_H, AC_C, generator=g, dtype=torch.float32) * 0.5}
    return x, y, p


def lit(t):
    """A tensor as a tfg list literal, each f32 to 9 significant digits (exact)."""
    if t.dim() == 1:
        return "[" + ", ".join("%.9g" % v for v in t.tolist()) + "]"
    return "[" + ", ".join(lit(r) for r in t) + "]"


def low_mm(a, b, low=torch.bfloat16):
    """tfg's product in dtype low: rounded inputs, an f32 product, rounded
    once (and through the same casts backward)."""
    return (a.to(low).float() @ b.to(low).float()).to(low).float()


class RefScaler:
    """torch.cuda.amp.GradScaler with its defaults, written out for the CPU
    (PyTorch 1.13 has it for CUDA only): its grad_scaler.py and the
    kernels _amp_foreach_non_finite_check_and_unscale_ and
    _amp_update_scale_. scale(loss) multiplies by the scale; step()
    multiplies every gradient by 1 / scale (formed in double, rounded to
    f32) and calls optimizer.step() only when all are finite; update()
    halves the scale after a skipped step and doubles it after 2000 good
    steps in a row."""

    def __init__(self):
        self.scale_ = torch.tensor(65536.0, dtype=torch.float32)
        self.tracker = 0
        self.skips = self.growths = 0

    def scale(self, loss):
        return loss * self.scale_

    def step(self, opt, params):
        inv = self.scale_.double().reciprocal().float()
        found = False
        for p in params:
            p.grad.mul_(inv)
            found |= not bool(torch.isfinite(p.grad).all())
        if not found:
            opt.step()
        return found

    def update(self, found):
        if found:
            self.scale_ = self.scale_ * 0.5
            self.tracker = 0
            self.skips += 1
        else:
            self.tracker += 1
            if self.tracker == 2000:
                grown = self.scale_ * 2.0
                if bool(torch.isfinite(grown)):
                    self.scale_ = grown
                    self.growths += 1
                self.tracker = 0


def torch_autocast_run(mode, steps=AC_STEPS, opt_kind="sgd", x_scale=1.0, lr=AC_LR):
    """Losses and params of PyTorch's run: mode "exact" (bf16 by explicit
    casts), "autocast" (torch.autocast), "f32", or "f16" (f16 by explicit
    casts, with RefScaler); also the scaler."""
    x, y, init = autocast_data(x_scale)
    p = {k: v.clone().requires_grad_(True) for k, v in init.items()}
    params = list(p.values())
    opt = torch.optim.SGD(params, lr=lr) if opt_kind == "sgd" else torch.optim.Adam(params, lr=AC_ADAM_LR)
    scaler = RefScaler() if mode == "f16" else None
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        if mode in ("exact", "f16"):
            low = torch.float16 if mode == "f16" else torch.bfloat16
            logits = low_mm(torch.relu(low_mm(x, p["w1"], low) + p["b1"]), p["w2"], low)
        else:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "autocast"):
                logits = torch.relu(x @ p["w1"] + p["b1"]) @ p["w2"]
        loss = torch.nn.functional.cross_entropy(logits.float(), y)
        if scaler:
            scaler.scale(loss).backward()
            scaler.update(scaler.step(opt, params))
        else:
            loss.backward()
            opt.step()
        losses.append(float(loss))
    return losses, {k: v.detach() for k, v in p.items()}, scaler


def tfg_autocast_run(precision, steps=AC_STEPS, opt_kind="sgd", x_scale=1.0, lr=AC_LR):
    x, y, init = autocast_data(x_scale)
    d = os.path.join(WORK, "autocast-%s-%d-%s" % (precision, steps, opt_kind))
    os.makedirs(d)
    prog = ("x = tensor(%s)\n" % lit(x) +
            "y = tensor([%s], dtype = i32)\n" % ", ".join(str(v) for v in y.tolist()) +
            "".join("param %s: f32[%s] = tensor(%s)\n" % (k, ", ".join(map(str, v.shape)), lit(v)) for k, v in init.items()) +
            "logits = matmul(relu(matmul(x, w1) + b1), w2)\n"
            "train cross_entropy(logits, y) { optimizer = %s; steps = %d; precision = %s; "
            "log = \"run.csv\"; log_every = 1; checkpoint = \"out.safetensors\" }\n" %
            ("sgd(lr = %r)" % lr if opt_kind == "sgd" else "adam(lr = %r)" % AC_ADAM_LR, steps, precision))
    with open(os.path.join(d, "m.tfg"), "w") as f:
        f.write(prog)
    r = subprocess.run([TFG, "run", "--threads", "1", "--color=never", "m.tfg"], cwd=d, capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        fail("autocast-%s run" % precision, "tfg exit %d: %s" % (r.returncode, r.stderr.strip()[-400:]))
        return None
    losses = [row["loss"] for row in read_csv(os.path.join(d, "run.csv"))]
    got = load_safetensors(os.path.join(d, "out.safetensors"))
    return losses, {k: torch.tensor(got[k][2], dtype=torch.float32).reshape(got[k][1]) for k in init}


def rel_loss_diff(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def autocast_cases():
    _, _, init = autocast_data()
    tfg_bf, tfg_f32 = tfg_autocast_run("bf16"), tfg_autocast_run("f32")
    if not tfg_bf or not tfg_f32:
        return
    exact, auto, f32 = torch_autocast_run("exact")[:2], torch_autocast_run("autocast")[:2], torch_autocast_run("f32")[:2]
    for name, (losses, params), ref, ltol, how in (
            ("autocast-bf16 exact", tfg_bf, exact, AC_EXACT_TOL, "rel"),
            ("autocast-f32", tfg_f32, f32, 1e-5, "rel"),
            ("autocast-bf16 torch.autocast", tfg_bf, auto, 5e-2, "moved")):
        ld = rel_loss_diff(losses, ref[0])
        if how == "rel":
            pd = max(float(((params[k] - ref[1][k]).abs() / (1 + ref[1][k].abs())).max()) for k in params)
        else:  # relative to how far each param moved in the reference run
            pd = max(float((params[k] - ref[1][k]).abs().max() / (ref[1][k] - init[k]).abs().max()) for k in params)
        if ld <= ltol and pd <= ltol:
            ok(name, "losses within %.2g, params within %.2g (tolerance %g)" % (ld, pd, ltol))
        else:
            fail(name, "losses differ by %.3g, params by %.3g (tolerance %g): tfg %s, torch %s" %
                 (ld, pd, ltol, ["%.5f" % v for v in losses], ["%.5f" % v for v in ref[0]]))
    # not vacuous: bf16 and f32 runs differ by more than the exact tolerance
    d = rel_loss_diff(tfg_bf[0], tfg_f32[0])
    if d > AC_EXACT_TOL:
        ok("autocast-bf16 differs from f32", "losses %.2g apart" % d)
    else:
        fail("autocast-bf16 differs from f32", "losses only %.2g apart: the products were not rounded" % d)


# precision = f16: the same model with f16 products and the grad scaler,
# against RefScaler over the same casts. At the first scale, 65536, the
# scaled gradients of the first steps overflow f16 (65504), so steps are
# skipped and the scale halves until they fit; after 2000 good steps in a
# row it doubles. SGD for 2010 steps (both moves of the scale; the
# reference asserts they happened) and Adam for 10 (its bias correction
# counts applied steps only, as PyTorch's optimizer.step() is not called
# for a skipped one). The losses per step (relative, at least to 0.01)
# and the params must agree within 5e-4, as the bf16 run: the same casts,
# f32 sums in another order.


def scaler_cases():
    for name, steps, kind in (("scaler-sgd", 2010, "sgd"), ("scaler-adam", 10, "adam")):
        got = tfg_autocast_run("f16", steps, kind, AC_F16_X, AC_F16_LR)
        if not got:
            continue
        losses, params, scaler = torch_autocast_run("f16", steps, kind, AC_F16_X, AC_F16_LR)
        if scaler.skips == 0 or (steps > 2000 and scaler.growths == 0):
            fail(name + " covers", "the reference skipped %d steps and grew the scale %d times" %
                 (scaler.skips, scaler.growths))
        else:
            ok(name + " covers", "%d skipped, %d growths, scale %g" % (scaler.skips, scaler.growths, scaler.scale_))
        # relative to the loss, but at least 0.01: late in the SGD run the
        # loss is 1e-4, where one f16 rounding of a logit moves it by more
        ld = max(abs(a - b) / max(abs(b), 0.01) for a, b in zip(got[0], losses))
        pd = max(float(((got[1][k] - params[k]).abs() / (1 + params[k].abs())).max()) for k in params)
        if ld <= AC_EXACT_TOL and pd <= AC_EXACT_TOL:
            ok(name, "losses within %.2g, params within %.2g (tolerance %g)" % (ld, pd, AC_EXACT_TOL))
        else:
            fail(name, "losses differ by %.3g, params by %.3g (tolerance %g)" % (ld, pd, AC_EXACT_TOL))


def pick_clip(opt_kind, opt_args, steps):
    """A clip_grad_norm that cuts some steps and not others: the median of
    the gradient norms of the unclipped run, to 3 digits."""
    norms = torch_train(opt_kind, opt_args, steps, clip=float("inf"))[3]
    return float("%.3g" % sorted(norms)[len(norms) // 2])


def main():
    global TFG, WORK, XNPY, YNPY
    TFG, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    os.makedirs(WORK, exist_ok=True)
    XNPY, YNPY = os.path.join(WORK, "x.npy"), os.path.join(WORK, "y.npy")
    write_npy(XNPY, X)
    write_npy(YNPY, Y)

    # 4. the baseline: plain optimizers, no schedule, clip or no_decay
    case("baseline-sgd", "sgd", {"lr": 0.1})
    case("baseline-sgd-momentum", "sgd", {"lr": 0.1, "momentum": 0.9})
    case("baseline-sgd-nesterov", "sgd", {"lr": 0.1, "momentum": 0.9, "nesterov": True})
    case("baseline-adam", "adam", {"lr": 0.01})
    case("baseline-adamw", "adamw", {"lr": 0.01, "weight_decay": 0.01})

    # 1. every lr_schedule, 16 steps: past total (12) to reach the min tail
    cross_check_schedules(0.1, 16)
    scheds = [
        ("constant", {}),
        ("linear", {"warmup": 3, "total": 12, "min": 0.1}),
        ("cosine", {"warmup": 4, "total": 12, "min": 0.05}),
        ("step", {"every": 5, "gamma": 0.5}),
    ]
    for sched in scheds:
        case("schedule-%s-sgd" % sched[0], "sgd", {"lr": 0.1, "momentum": 0.9}, steps=16, sched=sched)
    case("schedule-cosine-adamw", "adamw", {"lr": 0.01, "weight_decay": 0.1}, steps=16, sched=scheds[2])
    case("schedule-linear-adam", "adam", {"lr": 0.01}, steps=16, sched=scheds[1])
    for kind, args in scheds[1:]:  # not vacuous: the lr moves, and the tail is reached
        f = spec_lambda(kind, **args)
        lrs = [f(s) for s in range(16)]
        tail = kind == "step" or (16 > args["total"] + 1 and lrs[-1] == args["min"])
        if len(set(lrs)) > 2 and tail:
            ok("schedule-%s covers" % kind)
        else:
            fail("schedule-%s covers" % kind, "factors %s" % lrs)

    # 2. clip_grad_norm: clipped on some steps, not on others (checked)
    for tag, kind, args in (("sgd", "sgd", {"lr": 0.1, "momentum": 0.9}),
                            ("adamw", "adamw", {"lr": 0.01, "weight_decay": 0.01})):
        clip = pick_clip(kind, args, 10)
        res = case("clip-" + tag, kind, args, clip=clip)
        if res:
            norms = res[1]
            cut = sum(n > clip for n in norms)
            if 0 < cut < len(norms):
                ok("clip-%s mixed" % tag, "clip %g cuts %d of %d steps" % (clip, cut, len(norms)))
            else:
                fail("clip-%s mixed" % tag, "clip %g cuts %d of %d steps (norms %s)" % (clip, cut, len(norms), norms))

    # 3. no_decay = ["*.b"]: PyTorch's two param groups, weight_decay 0 on the biases
    for tag, kind, args in (("adamw", "adamw", {"lr": 0.01, "weight_decay": 0.1}),
                            ("sgd", "sgd", {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.1}),
                            ("adam", "adam", {"lr": 0.01, "weight_decay": 0.1})):
        res = case("no-decay-" + tag, kind, args, no_decay=True)
        if res:  # not vacuous: decaying the biases too gives other biases
            alld = torch_train(kind, args, 10)[0]
            d = max(worst_diff(res[0][k].flatten().tolist(), alld[k].flatten().tolist()) for k in ("h1.b", "out.b"))
            if d > 1000 * PARAM_TOL:
                ok("no-decay-%s matters" % tag, "biases move %.2g with decay" % d)
            else:
                fail("no-decay-%s matters" % tag, "the biases barely change with decay (%.2g)" % d)

    # 5. accumulate = k: k micro-batches of 8 / k rows per step, as PyTorch's
    # loop that calls backward on each micro-batch's loss / k; with clipping
    # (of the accumulated gradient) and Adam's state too
    case("accumulate-2-sgd", "sgd", {"lr": 0.1, "momentum": 0.9}, accumulate=2)
    case("accumulate-4-adamw", "adamw", {"lr": 0.01, "weight_decay": 0.01}, accumulate=4)
    clip = pick_clip("sgd", {"lr": 0.1, "momentum": 0.9}, 10)
    case("accumulate-2-clip-sgd", "sgd", {"lr": 0.1, "momentum": 0.9}, clip=clip, accumulate=2)

    # 6. precision = bf16 against autocast; f16 with its grad scaler
    autocast_cases()
    scaler_cases()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
