#!/usr/bin/env python3
"""tests/fuzz/mutate.py: a mutation fuzzer for the whole tfg pipeline.

The libFuzzer target (fuzz_parse.c) covers the lexer and parser only. This
driver covers everything behind them: it takes the golden programs and the
examples, mutates them (token-level: numbers, strings, op names, dtypes,
devices, train settings, lists, operators; line-level: delete, duplicate,
swap, splice from another program; byte-level: flips, inserts, truncation)
and runs `tfg run` (or check, place, plan) on each mutant, normally under the
ASan+UBSan build. A finding is:

  - a sanitizer report (ASan, LeakSanitizer, UBSan), or ASan's RSS limit
  - "internal error" on stderr (a failed TFG_ASSERT, an invalid plan)
  - death by a signal, or an exit code other than 0, 1, 2, 3 or 130
  - a hang: past the timeout (FUZZ_TIMEOUT) with every thread asleep (named by
    where they wait: fifo_open, futex_wait_queue, ...), or busy in check,
    place, plan or in the build of a run; a run busy past it whose build
    alone is quick (a huge step count or tensor) is "slow", not a finding
  - exit 1, 2 or 3 with no error message, or with errors none of which has a
    file:line:col location

Each distinct finding (by kind and signature) is saved once in the findings
directory: the mutant, a line-minimized copy when that is cheap (not for
hangs), the command (cmd.json, README), and the first lines of stderr. A
line a minute shows progress; a summary ends the run; the exit status is 1
when anything was found. `--replay DIR...` runs saved findings again.

Mutant N of seed S is always the same program and command, whatever the
timing, so `--only N --seed S` reproduces one. `--seconds` bounds the run
(mutants 0, 1, 2, ... until the time is up, over FUZZ_JOBS jobs); `--count`
runs exactly that many. Mutants run in a scratch copy of the folders that
hold the programs (one per job), with the working directory inside it, so
their relative data paths work and whatever they write (checkpoints, logs)
lands there; the copy is put back as it was after every mutant, so no
mutant sees another's files. Strings that would leave the copy (absolute
paths, `..`) are rewritten before a mutant runs, and when the driver runs
as root the mutants run as nobody, who cannot write the checkout. Limits:
the timeout, no core files, 256 MiB per written file, and under ASan
hard_rss_limit_mb=3072 with allocator_may_return_null (RLIMIT_AS, which
ASan's shadow memory rules out, only for a build without ASan).

usage: tests/fuzz/mutate.py --tfg BUILD/tfg [--seconds N | --count N | --only N...]
         [--jobs N] [--seed S] [--timeout T] [--findings DIR] [--no-minimize] [PROGRAM...]
       tests/fuzz/mutate.py --tfg BUILD/tfg --replay FINDING_DIR...
Environment defaults: FUZZ_SECONDS (600), FUZZ_JOBS (2), FUZZ_SEED (1),
FUZZ_TIMEOUT (10 s per command), FUZZ_FINDINGS.
"""

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# ---- what mutations draw from ------------------------------------------------

NUMBERS = ["0", "1", "-1", "2", "3", "7", "0.0", "-0.0", "0.5", "1.5", "1e-30", "1e30", "1e308",
           "1e400", "65536", "2147483647", "2147483648", "-2147483648", "4294967296",
           "9223372036854775807", "9223372036854775808", "-9223372036854775808",
           "6148914691236517206", "(0.0 / 0.0)", "(1e308 * 10.0)", "(-1e308 * 10.0)",
           "(1 / 0)", "(5 % 0)", '"x"', "true", "false", "none", "[]", "[1, 2]", "cpu", "gpu:0"]
STRINGS = ['""', '"x"', '"data"', '"data/fifo"', '"data/digits.csv.gz"', '"data/run-csv.csv"',
           '"missing.csv"', '"fuzz-mutant.tfg"', '"out/m.safetensors"', '"ck.safetensors"',
           '"data/pre.safetensors"', '"data/trunc.safetensors"', '"data/digits.csv.gz/x"',
           '"' + "a" * 5000 + '"', '"\\n"', '"same"', '"valid"', '"\u00e9\u6f22"', '"x\\ty"']
OPS = ["neg", "exp", "log", "sqrt", "rsqrt", "abs", "relu", "gelu", "tanh", "sigmoid", "pow",
       "maximum", "minimum", "where", "cast", "equal", "greater", "matmul", "sum", "mean", "max",
       "argmax", "reshape", "transpose", "concat", "slice", "flatten", "broadcast", "dim",
       "shape", "dtype", "softmax", "log_softmax", "cross_entropy", "mse", "conv2d", "max_pool",
       "avg_pool", "layer_norm", "dropout", "embedding", "one_hot", "accuracy", "attention",
       "zeros", "ones", "full", "normal", "uniform", "glorot", "he", "tensor", "arange", "csv",
       "npy", "idx", "sgd", "adam", "adamw", "mirrored", "parameter_server", "single", "cosine",
       "linear", "step", "constant"]
DTYPES = ["f32", "f64", "f16", "bf16", "i32", "i64", "bool"]
KEYWORDS = ["import", "as", "let", "fn", "return", "param", "input", "from", "data", "with",
            "scope", "for", "in", "if", "else", "train", "print", "true", "false", "none", "cpu",
            "gpu", "load"]
DEVICES = ["gpu:0", "gpu:1", "gpu:2", "gpu:7", "gpu:*", "cpu", "cpu:0", "cpu:1", "gpu:(1 + 1)",
           "gpu:(-1)", "gpu:99999999999", "gpu:(0.5)"]
BIN_OPS = ["+", "-", "*", "/", "%", "==", "!=", "<", ">=", "&&", "||", ".."]
SETTINGS = {
    "steps": ["0", "-1", "1", "3", "9223372036854775807", '"x"', "1.5", "(0.0 / 0.0)"],
    "epochs": ["0", "-1", "1", "6148914691236517206", "1e30", "true"],
    "log_every": ["0", "-1", "1", "9223372036854775807", '"x"'],
    "checkpoint_every": ["0", "-1", "1", "9223372036854775807"],
    "accumulate": ["0", "-1", "2", "1000000", "2147483648"],
    "seed": ["-1", "9223372036854775807", '"x"', "1.5"],
    "precision": ["f16", "bf16", "f64", "i32", '"bf16"', "fp8"],
    "optimizer": ['sgd(lr = "x")', "adam(lr = (0.0 / 0.0))", "adamw(lr = 1e308)",
                  "sgd(lr = 1, momentum = 2, nesterov = true)", 'adam(lr = 0.1, b1 = "q")',
                  '"sgd"', "sgd()", "sgd(lr = [0.1])", "adam(lr = -1)", "adam(lr = true)",
                  "adamw(lr = 0.1, b1 = 1, b2 = 1, eps = 0)", "foo(lr = 1)",
                  "sgd(lr = 0.1, weight_decay = -1)", "sgd(lr = 0.1, momentum = 0.9)"],
    "strategy": ["single", "single()", "mirrored([cpu, gpu:0])", "mirrored([gpu:0, gpu:0])",
                 "mirrored([])", "mirrored(gpu:*)", "mirrored()",
                 "mirrored([[gpu:0], [gpu:1, gpu:2]])", "mirrored([gpu:0, gpu:1, gpu:2])",
                 "parameter_server(ps = cpu, workers = [])",
                 "parameter_server(ps = gpu:0, workers = [gpu:0])",
                 "parameter_server(ps = cpu, workers = [gpu:0, gpu:1])",
                 "mirrored([[gpu:0, gpu:1], [gpu:2, gpu:3]])", "mirrored([gpu:0, cpu])"],
    "checkpoint": ['"ck.safetensors"', '""', '"data"', '"data/fifo"', '"out/a/b/c.safetensors"',
                   '"data/pre.safetensors"', '"data/trunc.safetensors"', "1"],
    "lr_schedule": ["cosine(warmup = 0, total = 0)", "linear(warmup = 5, total = 5)",
                    "step(every = 0, gamma = 0.5)", "constant()", "cosine(warmup = 10, total = 5, min = 2)",
                    "step(every = 1, gamma = 1e308)", '"cosine"'],
    "clip_grad_norm": ["0", "-1", "(0.0 / 0.0)", "1e-30", '"x"', "(1e308 * 10)"],
    "no_decay": ['["*"]', "[1]", '"x"', "[]"],
    "metrics": ["[]", "[1]", "[loss]", '["x"]', "none"],
    "log": ['"log.csv"', '""', '"data"', '"data/fifo"', '"ck.safetensors"', '"fuzz-mutant.tfg"',
            '"data/digits.csv.gz"', '"data/null"', '"data/link.csv"'],
    "eval_every": ["0", "-1", "1", "9223372036854775807", "5"],
    "bogus": ["1"],
}
SNIPPETS = [
    "fn r(n) { return r(n + 1) }\nzz = r(0)",
    "for i in 0..100000000 { }",
    "for i in 0..20 { for j in 0..20 { q = zeros([2]) } }",
    'import "fuzz-mutant.tfg"', 'import "data"', 'import "data/fifo"', "import nn", "import missing",
    'load "data/pre.safetensors"', 'load "data/trunc.safetensors" { strict = false }',
    'load "data/digits.csv.gz"',
    "param zz: f32[0] = zeros()", "param zz: f32[] = 1.5", "input zz: f32[]",
    "print zeros([0, 3])", "print tensor([])", "print arange(0, 0)",
    "print zeros([100000, 100000])", "print matmul(ones([2, 0]), ones([0, 2]))",
    "data zz = csv(\"data/fifo\")", "data zz = npy(x = \"data/run-csv.csv\")",
    "data zz = idx(images = \"data/digits.csv.gz\", labels = \"data/digits.csv.gz\")",
    "@gpu:1 zz = 1", "with cpu { zz = zeros([2]) }", "scope s { zz = 2 }",
    "zz = attention(ones([1, 2, 4]), ones([1, 2, 4]), ones([1, 2, 4]), scale = (0.0 / 0.0))",
    "import nn\nzz = nn.dense(ones([2, 3]), 4, act = none)",
    'load "data/pre.safetensors" { zz = 1 }', "zz = 9223372036854775807 + 1", "zz = 7 / 0",
]


class Program:
    """One source program: its text and where it lives (relative to ROOT)."""

    def __init__(self, rel):
        self.rel = rel
        with open(os.path.join(ROOT, rel), "rb") as f:
            self.data = f.read()
        # Programs that build (not the golden syntax and build errors, which the parser
        # fuzzer covers) are drawn five times as often: their mutants reach further.
        self.weight = 1 if os.path.exists(os.path.join(ROOT, rel[:-4] + ".err")) else 5


TOKEN_RE = re.compile(rb'(#[^\n]*)|("(?:[^"\\\n]|\\.)*")|(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)'
                      rb'|([A-Za-z_]\w*)|(\n)|([ \t\r]+)'
                      rb'|(\.\.|==|!=|<=|>=|&&|\|\||[-+*/%<>=!.,:@()\[\]{};])|(.)', re.S)
KINDS = ["comment", "string", "number", "ident", "newline", "space", "op", "byte"]


def tokens(data):
    """The tokens of data as (kind, start, end), approximately as tfg's lexer sees them."""
    out = []
    for m in TOKEN_RE.finditer(data):
        out.append((KINDS[m.lastindex - 1], m.start(), m.end()))
    return out


def replace_token(data, rng, pred, choices):
    """data with one token that pred accepts replaced by a choice, or None if none matches."""
    toks = [t for t in tokens(data) if pred(t, data[t[1]:t[2]])]
    if not toks:
        return None
    _, s, e = rng.choice(toks)
    new = rng.choice(choices)
    if callable(new):
        new = new(data[s:e])
    return data[:s] + new.encode() + data[e:]


def lines_of(data):
    return data.split(b"\n")


# Each mutator takes (data, rng, programs) and returns new bytes, or None
# where it does not apply (then another is drawn).

def m_number(data, rng, programs):
    return replace_token(data, rng, lambda t, s: t[0] == "number", NUMBERS)


def m_string(data, rng, programs):
    own = [data[s:e].decode("utf-8", "replace") for k, s, e in tokens(data) if k == "string"]
    return replace_token(data, rng, lambda t, s: t[0] == "string", STRINGS + own)


def m_op_name(data, rng, programs):
    names = set(OPS)
    return replace_token(data, rng, lambda t, s: t[0] == "ident" and s.decode() in names, OPS)


def m_dtype(data, rng, programs):
    names = set(DTYPES)
    return replace_token(data, rng, lambda t, s: t[0] == "ident" and s.decode() in names, DTYPES)


def m_ident(data, rng, programs):
    own = sorted({data[s:e].decode() for k, s, e in tokens(data) if k == "ident"})
    return replace_token(data, rng, lambda t, s: t[0] == "ident", own + KEYWORDS)


def m_device(data, rng, programs):
    spans = [m.span() for m in re.finditer(rb"\bgpu:(?:\d+|\*|\([^)\n]*\))|\bcpu(?::\d+)?\b", data)]
    if not spans:
        return None
    s, e = rng.choice(spans)
    return data[:s] + rng.choice(DEVICES).encode() + data[e:]


def m_setting(data, rng, programs):
    """Insert a train setting with an odd value, or change an existing one's value."""
    ls = lines_of(data)
    heads = [i for i, l in enumerate(ls) if re.match(rb"\s*train\b.*\{\s*(#.*)?$", l)]
    name = rng.choice(sorted(SETTINGS))
    value = rng.choice(SETTINGS[name])
    existing = [i for i, l in enumerate(ls) if re.match(rb"\s+(%s)\s*=" % name.encode(), l)]
    if existing and rng.random() < 0.5:
        i = rng.choice(existing)
        ls[i] = re.sub(rb"=.*", b"= " + value.encode(), ls[i], count=1)
    elif heads:
        ls.insert(rng.choice(heads) + 1, ("  %s = %s" % (name, value)).encode())
    else:
        return None
    return b"\n".join(ls)


def m_list(data, rng, programs):
    """Drop, duplicate or empty an element of a [...] without nested brackets."""
    spans = [m.span() for m in re.finditer(rb"\[[^\[\]\n]*\]", data)]
    if not spans:
        return None
    s, e = rng.choice(spans)
    items = [x.strip() for x in data[s + 1:e - 1].split(b",")]
    how = rng.randrange(4)
    if how == 0 and items:
        del items[rng.randrange(len(items))]
    elif how == 1 and items:
        items.insert(rng.randrange(len(items) + 1), rng.choice(items))
    elif how == 2:
        items = []
    else:
        items.append(rng.choice(NUMBERS).encode())
    return data[:s] + b"[" + b", ".join(items) + b"]" + data[e:]


def m_binop(data, rng, programs):
    allowed = set(BIN_OPS)
    return replace_token(data, rng, lambda t, s: t[0] == "op" and s.decode() in allowed, BIN_OPS)


def m_line_delete(data, rng, programs):
    ls = lines_of(data)
    if len(ls) < 2:
        return None
    del ls[rng.randrange(len(ls))]
    return b"\n".join(ls)


def m_line_dup(data, rng, programs):
    ls = lines_of(data)
    i = rng.randrange(len(ls))
    ls.insert(rng.randrange(len(ls) + 1), ls[i])
    return b"\n".join(ls)


def m_line_swap(data, rng, programs):
    ls = lines_of(data)
    if len(ls) < 2:
        return None
    i, j = rng.randrange(len(ls)), rng.randrange(len(ls))
    ls[i], ls[j] = ls[j], ls[i]
    return b"\n".join(ls)


def m_splice(data, rng, programs):
    """Insert a few lines of another program (or a snippet) at a random line."""
    ls = lines_of(data)
    if rng.random() < 0.4:
        new = rng.choice(SNIPPETS).encode().split(b"\n")
    else:
        other = lines_of(rng.choice(programs).data)
        i = rng.randrange(len(other))
        new = other[i:i + rng.randint(1, 4)]
    at = rng.randrange(len(ls) + 1)
    return b"\n".join(ls[:at] + new + ls[at:])


def m_wrap(data, rng, programs):
    """Put a line inside a block: a loop, a device, a scope, an if, a fn."""
    ls = lines_of(data)
    i = rng.randrange(len(ls))
    head = rng.choice([b"for i in 0..3 {", b"with gpu:1 {", b"with cpu {", b"scope s {", b"if true {",
                       b"fn f() {", b"if 1 > 2 { } else {", b"@gpu:0 {"])
    ls[i] = head + b" " + ls[i] + b" }"
    return b"\n".join(ls)


def m_bytes(data, rng, programs):
    """Byte-level: flip a bit, set, insert or delete a byte, truncate, duplicate a chunk."""
    if not data:
        return bytes([rng.randrange(256)])
    i = rng.randrange(len(data))
    how = rng.randrange(6)
    if how == 0:
        return data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1:]
    if how == 1:
        b = rng.choice([0, 0xff, 0x80, ord("{"), ord('"'), ord("\n"), ord("["), ord("("), ord(":"),
                        rng.randrange(256)])
        return data[:i] + bytes([b]) + data[i + 1:]
    if how == 2:
        return data[:i] + bytes([rng.randrange(256)]) + data[i:]
    if how == 3:
        return data[:i] + data[i + 1:]
    if how == 4:
        return data[:i]
    j = min(len(data), i + rng.randint(1, 64))
    return data[:j] + data[i:j] + data[j:]


MUTATORS = [(m_number, 6), (m_string, 3), (m_op_name, 4), (m_dtype, 3), (m_ident, 3),
            (m_device, 3), (m_setting, 6), (m_list, 4), (m_binop, 2), (m_line_delete, 3),
            (m_line_dup, 2), (m_line_swap, 1), (m_splice, 4), (m_wrap, 2), (m_bytes, 3)]


def confine(data):
    """Rewrites what could name a file outside the scratch copy: a string that starts with
    '/' or '~', any '..' in a string (strings can be joined with +), any '..' path
    component. (Run as root, the mutants also run as nobody, who cannot write the checkout.)"""
    data = re.sub(rb'"(?:[^"\\\n]|\\.)*"', lambda m: m.group(0).replace(b"..", b"__"), data)
    data = re.sub(rb'"([/~])', b'"_', data)
    return re.sub(rb"\.\.(?=[/\\])|(?<=[/\\])\.\.", b"__", data)


def make_mutant(seed, index, programs):
    """Mutant `index` of `seed`: (program, mutated bytes, argv after `tfg`, names of the
    mutations). A pure function of its arguments."""
    rng = random.Random("%s/%d" % (seed, index))
    prog = rng.choices(programs, [p.weight for p in programs])[0]
    data = prog.data
    names = []
    n = 1
    while n < 6 and rng.random() < 0.5:
        n += 1
    funcs = [f for f, _ in MUTATORS]
    weights = [w for _, w in MUTATORS]
    tries = 0
    while len(names) < n and tries < 50:
        tries += 1
        f = rng.choices(funcs, weights)[0]
        new = f(data, rng, programs)
        if new is not None and new != data:
            data = new
            names.append(f.__name__[2:])
    data = confine(data)
    cmd = rng.choices(["run", "check", "place", "plan"], [6, 1, 1, 2])[0]
    argv = [cmd, "--color=never"]
    if cmd == "place":
        argv += rng.choice([[], ["--explain"], ["--json"], ["--dot"]])
    elif cmd == "run":
        argv += rng.choice([[], [], [], ["--quiet"], ["--check-numerics"], ["--seed", "3"],
                            ["--memory", "preallocate"]])
    if cmd != "check" and rng.random() < 0.3:
        choices = ["host*2", "host*3:64M", "host*1:1M", "host*2:4K"]
        if cmd in ("place", "plan"):
            choices += ["sim:h100*8"]
        argv += ["--devices", rng.choice(choices)]
    if cmd != "check" and rng.random() < 0.1:
        argv += ["--memory-limit", rng.choice(["1", "1K", "1M", "64M"])]
    lets = sorted(set(re.findall(rb"^let (\w+)", data, re.M)))
    if lets and rng.random() < 0.15:
        argv += ["--set", "%s=%s" % (rng.choice(lets).decode(), rng.choice(["0", "-1", "1", "1e9", "x", "2.5"]))]
    return prog, data, argv, names


# ---- running one mutant ----------------------------------------------------------

MUTANT = "fuzz-mutant.tfg"
OK_EXITS = {0, 1, 2, 3, 130}
PROJECT_RE = re.compile(r"(\./)?(base|ir|lang|io|kernels|compiler|runtime|cli|build[^/]*/gen)/")
LOCATED_RE = re.compile(r"^\S[^:\n]*:\d+:\d+: (error|warning|note|help)")


class Sandbox:
    """A scratch copy of the folders that hold the programs (tests/golden, examples) for one
    job. restore() puts it back as it was (new files removed, changed ones copied again) so
    mutants never see each other's output."""

    def __init__(self, base, tfg, env, folders):
        self.base = base
        self.dirs = {}
        self.env = dict(env, TMPDIR=os.path.join(base, "tmp"), HOME=os.path.join(base, "tmp"))
        for rel in folders:
            dst = os.path.join(base, rel)
            copy_tree(os.path.join(ROOT, rel), dst)
            data = os.path.join(dst, "data")
            os.makedirs(data, exist_ok=True)
            for name in os.listdir(os.path.join(ROOT, "examples/data")):  # runnable goldens
                if not os.path.exists(os.path.join(data, name)):
                    shutil.copy(os.path.join(ROOT, "examples/data", name), data)
            self.dirs[rel] = dst
        os.makedirs(os.path.join(base, "tmp"), exist_ok=True)
        self._own_all()
        self._make_checkpoints(tfg, self.env)
        for d in self.dirs.values():
            os.mkfifo(os.path.join(d, "data", "fifo"))  # a data file or import that never ends
            os.symlink("run-csv.csv", os.path.join(d, "data", "link.csv"))  # an output written through
            try:  # an output that is a device (never to be replaced); mknod needs root
                os.mknod(os.path.join(d, "data", "null"), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            except OSError:
                pass
        self._own_all()
        self.saved = base + ".orig"
        copy_tree(base, self.saved)
        self.pristine = self._snapshot()

    def _own_all(self):
        for dirpath, _, filenames in os.walk(self.base):
            own(dirpath)
            for n in filenames:
                own(os.path.join(dirpath, n))

    def _make_checkpoints(self, tfg, env):
        """data/pre.safetensors (a small trained MLP's checkpoint) and a truncated copy, for
        mutants that load or resume from them."""
        d = os.path.join(self.base, "ckpt")
        os.makedirs(os.path.join(d, "data"))
        own(d)
        own(os.path.join(d, "data"))
        src = ("param w: f32[4, 3] = glorot()\nparam b: f32[3] = zeros()\n"
               "x = ones([2, 4])\nloss = mean(matmul(x, w) + b)\n"
               'train loss { optimizer = adam(lr = 0.1); steps = 2; checkpoint = "data/pre.safetensors" }\n')
        with open(os.path.join(d, "mk-ckpt.tfg"), "w") as f:
            f.write(src)
        subprocess.run([tfg, "run", "--quiet", "mk-ckpt.tfg"], cwd=d, env=env, preexec_fn=child_limits,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        os.remove(os.path.join(d, "mk-ckpt.tfg"))
        pre = os.path.join(d, "data", "pre.safetensors")
        if os.path.exists(pre):
            blob = open(pre, "rb").read()
            with open(os.path.join(d, "data", "trunc.safetensors"), "wb") as f:
                f.write(blob[:len(blob) * 2 // 3])
        for name in ("pre.safetensors", "trunc.safetensors"):
            p = os.path.join(d, "data", name)
            if os.path.exists(p):
                for folder in self.dirs.values():
                    shutil.copy(p, os.path.join(folder, "data", name))
        shutil.rmtree(d)

    def _snapshot(self):
        """{path: (mode, size, mtime)} of everything in the copy (folders: mode only, as
        their times change whenever a file in them comes or goes)."""
        snap = {}
        for dirpath, dirnames, filenames in os.walk(self.base):
            for n in dirnames + filenames:
                p = os.path.join(dirpath, n)
                st = os.lstat(p)
                snap[p] = (st.st_mode, 0, 0) if stat.S_ISDIR(st.st_mode) else \
                    (st.st_mode, st.st_size, st.st_mtime_ns)
        return snap

    def restore(self):
        now = self._snapshot()
        for p in sorted(now, key=len, reverse=True):  # children before their folders
            if p not in self.pristine:
                if stat.S_ISDIR(now[p][0]):
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    os.remove(p)
        for p, st in self.pristine.items():
            if now.get(p) != st and not stat.S_ISDIR(st[0]) and os.path.isdir(os.path.dirname(p)):
                if os.path.lexists(p):
                    os.remove(p)
                copy_entry(os.path.join(self.saved, os.path.relpath(p, self.base)), p)
        if self._snapshot() != self.pristine:  # a folder removed or changed: copy it all again
            shutil.rmtree(self.base, ignore_errors=True)
            copy_tree(self.saved, self.base)
            self.pristine = self._snapshot()


# Run as root, the mutants run as nobody: then they cannot write anywhere in the checkout
# whatever path they name, and the scratch copy is theirs.
RUN_AS = (65534, 65534) if os.geteuid() == 0 else None


def own(path):
    """Makes path (a file or folder of the scratch copy) the mutants' own."""
    if RUN_AS:
        os.lchown(path, *RUN_AS)


def copy_entry(src, dst):
    """Copies one file, times included; a FIFO is made anew (copying would read it)."""
    if stat.S_ISFIFO(os.lstat(src).st_mode):
        os.mkfifo(dst)
    else:
        shutil.copy2(src, dst)
    own(dst)
    return dst


def copy_tree(src, dst):
    shutil.copytree(src, dst, symlinks=True, copy_function=copy_entry)
    for dirpath, dirnames, _ in os.walk(dst):
        own(dirpath)


def child_limits():
    """In the child before exec: no core files, a file-size cap (writes past it fail with
    EFBIG instead of killing), and its own process group (so a timeout kills every thread
    and child)."""
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 20, 256 << 20))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if RUN_AS:
        os.setgroups([])
        os.setgid(RUN_AS[1])
        os.setuid(RUN_AS[0])


def child_limits_plain():
    """child_limits for a build without ASan: also an address-space cap (ASan reserves
    terabytes of shadow memory, so RLIMIT_AS cannot be used under it)."""
    import resource
    child_limits()
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def blocked(pid):
    """True when every thread of process pid sleeps (none is running or runnable) in each
    of 5 looks 0.1 s apart: a hang waiting for something that never comes, not work (a
    busy process may get little CPU on a loaded machine, so CPU time cannot tell)."""
    for _ in range(5):
        try:
            for tid in os.listdir("/proc/%d/task" % pid):
                with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "R":
                        return False
        except (OSError, IndexError):
            return False
        time.sleep(0.1)
    return True


def waits(pid):
    """Where process pid's threads sleep in the kernel (their wchan names, e.g. fifo_open,
    pipe_read, futex_wait_queue), which tells one kind of hang from another."""
    names = set()
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/wchan" % (pid, tid)) as f:
                    w = f.read().strip()
                if w and w != "0":
                    names.add(w)
            except OSError:
                pass
    except OSError:
        pass
    if len(names) > 1:
        names.discard("hrtimer_nanosleep")  # ASan's RSS-limit thread
    return ",".join(sorted(names)) or "?"


class Result:
    def __init__(self, rc, out, err, timed_out, wall, blocked, wait):
        self.rc, self.out, self.err = rc, out, err
        self.timed_out, self.wall, self.blocked, self.wait = timed_out, wall, blocked, wait


def run_tfg(cfg, sandbox, cwd, argv, timeout):
    """Runs tfg argv on the mutant in cwd, a folder of sandbox, then puts the sandbox back;
    a Result (stdout/stderr decoded, their ends kept)."""
    t0 = time.monotonic()
    p = subprocess.Popen([cfg.tfg] + argv + [MUTANT], cwd=cwd, env=sandbox.env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                         preexec_fn=cfg.preexec)
    timed_out = False
    stuck = False
    wait = ""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        stuck = blocked(p.pid)
        wait = waits(p.pid)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = p.communicate()
    wall = time.monotonic() - t0
    sandbox.restore()
    dec = lambda b: b[-65536:].decode("utf-8", "replace")
    return Result(p.returncode, dec(out), dec(err), timed_out, wall, stuck, wait)


def mask(text):
    """A message with its numbers and quoted parts masked, for grouping findings."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"|`[^`]*`", "Q", text)
    text = re.sub(r"0x[0-9a-fA-F]+", "N", text)
    return re.sub(r"\d+(\.\d+)?", "N", text).strip()[:200]


def sanitizer_signature(err):
    """(kind, signature) for a sanitizer report in err, or None. The signature is the
    report's kind and the first frames in tfg's own code."""
    frames = re.findall(r"#\d+ 0x[0-9a-f]+ in (\S+) (\S+)", err)
    frames = [(fn, re.sub(r"(:\d+):\d+$", r"\1", loc.replace(ROOT + "/", ""))) for fn, loc in frames]
    frames = [(fn, loc) for fn, loc in frames if PROJECT_RE.match(loc)]

    def where(n):
        out = []
        for fn, loc in frames:
            if fn.startswith("tfg_xmalloc") or fn in ("tfg_arena_alloc",):
                continue
            out.append("%s %s" % (fn, loc))
            if len(out) == n:
                break
        return " <- ".join(out)
    m = re.search(r"ERROR: LeakSanitizer: (.*)", err)
    if m:
        return "leak", "leak at " + where(2)
    m = re.search(r"AddressSanitizer: hard rss limit exhausted", err)
    if m:
        return "memory", "RSS limit exceeded"
    m = re.search(r"ERROR: AddressSanitizer: ([\w-]+)", err)
    if m:
        return "asan", "%s at %s" % (m.group(1), where(1))
    m = re.search(r"^(\S+?):(\d+):\d+: runtime error: (.*)$", err, re.M)
    if m:
        return "ubsan", "%s:%s: %s" % (os.path.relpath(m.group(1), ROOT) if m.group(1).startswith("/")
                                       else m.group(1), m.group(2), mask(m.group(3)))
    if "ERROR: UndefinedBehaviorSanitizer" in err or "ERROR: AddressSanitizer" in err:
        return "asan", mask(err.strip().splitlines()[-1])
    return None


def classify(res, argv):
    """(kind, signature) when res is a finding, else None. A run past the timeout is
    ("timeout", ...): the caller tells a hang from slow work."""
    san = sanitizer_signature(res.err)
    if san:
        return san
    m = re.search(r"internal error: (.*)", res.err)
    if m:
        return "internal", mask(m.group(1)) if "assertion" not in m.group(1) else m.group(1)[:200]
    if res.timed_out:
        return "timeout", "%s past the timeout" % argv[0]
    if res.rc < 0:
        last = res.err.strip().splitlines()[-1] if res.err.strip() else ""
        return "signal", "%s %s" % (signal.Signals(-res.rc).name, mask(last))
    if res.rc not in OK_EXITS:
        return "exit", "exit %d %s" % (res.rc, mask(res.err.strip().splitlines()[-1] if res.err.strip() else ""))
    if res.rc in (1, 2, 3):
        # (errors in a command-line option, "error: --set x: ...", are the command's, not the program's)
        errs = [l for l in res.err.splitlines() if re.search(r"\berror\b(?!: --)", l)]
        located = [l for l in errs if LOCATED_RE.match(l)]
        if errs and not located:
            return "unlocated", "exit %d: %s" % (res.rc, mask(errs[0]))
        if not errs:
            return "unlocated", "exit %d without an error message" % res.rc
    return None


# ---- the driver -------------------------------------------------------------------

class Findings:
    """The distinct findings so far (shared by the jobs), each saved once."""

    def __init__(self, folder):
        self.folder = folder
        self.lock = threading.Lock()
        self.seen = {}  # (kind, sig) -> [count, dir]
        self.slow = []  # the mutants that were slow (past the timeout, busy, quick to build)
        self.count = 0
        self.exits = {}

    def clear(self):
        """Removes an earlier run's findings (its summary and KIND-HASH folders) from the folder."""
        if not os.path.isdir(self.folder):
            return
        for n in os.listdir(self.folder):
            p = os.path.join(self.folder, n)
            if n == "summary.txt" or (re.match(r"^[a-z]+-[0-9a-f]{8}$", n) and os.path.isdir(p)):
                shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)

    def note(self, key):
        """Counts key; True the first time (the caller then saves it)."""
        with self.lock:
            if key in self.seen:
                self.seen[key][0] += 1
                return False
            d = os.path.join(self.folder, "%s-%s" % (key[0], hashlib.sha1(repr(key).encode()).hexdigest()[:8]))
            self.seen[key] = [1, d]
            return True


def minimize(cfg, box_dir, sandbox, data, argv, key, deadline):
    """Removes lines (halves, then quarters, ... then single lines) while the mutant
    still gives the same finding; at most 60 runs or until the deadline."""
    ls = lines_of(data)
    runs = 0
    chunk = max(1, len(ls) // 2)
    while chunk >= 1 and runs < 60 and time.monotonic() < deadline:
        i = 0
        while i < len(ls) and runs < 60 and time.monotonic() < deadline:
            cand = ls[:i] + ls[i + chunk:]
            if not cand:
                i += chunk
                continue
            with open(os.path.join(box_dir, MUTANT), "wb") as f:
                f.write(b"\n".join(cand))
            res = run_tfg(cfg, sandbox, box_dir, argv, cfg.timeout)
            runs += 1
            if classify(res, argv) == key:
                ls = cand
            else:
                i += chunk
        chunk //= 2
    return b"\n".join(ls)


def save_finding(cfg, fnd, key, index, prog, data, argv, res, minimized):
    d = fnd.seen[key][1]
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "mutant.tfg"), "wb") as f:
        f.write(data)
    if minimized is not None:
        with open(os.path.join(d, "min.tfg"), "wb") as f:
            f.write(minimized)
    origin = os.path.dirname(prog.rel)
    with open(os.path.join(d, "cmd.json"), "w") as f:
        json.dump({"origin": origin, "argv": argv, "kind": key[0], "signature": key[1]}, f)
        f.write("\n")
    with open(os.path.join(d, "README"), "w") as f:
        f.write("finding: %s: %s\n" % key)
        f.write("mutant %d of seed %s, from %s; command: tfg %s %s (in a copy of %s/)\n"
                % (index, cfg.seed, prog.rel, " ".join(argv), MUTANT, origin))
        f.write("exit %s%s after %.1f s\n" % (res.rc, " (timed out)" if res.timed_out else "", res.wall))
        f.write("reproduce: tests/fuzz/mutate.py --tfg BUILD/tfg --replay %s\n" % d)
        f.write("       or: tests/fuzz/mutate.py --tfg BUILD/tfg --seed %s --only %d\n" % (cfg.seed, index))
    with open(os.path.join(d, "stderr.txt"), "w") as f:
        f.write("\n".join(res.err.splitlines()[:80]) + "\n")


def check_mutant(cfg, sandbox, index, programs):
    """Runs mutant index in sandbox; (key or None, prog, data, argv, res)."""
    prog, data, argv, names = make_mutant(cfg.seed, index, programs)
    box_dir = os.path.join(sandbox.base, os.path.dirname(prog.rel))
    with open(os.path.join(box_dir, MUTANT), "wb") as f:
        f.write(data)
    res = run_tfg(cfg, sandbox, box_dir, argv, cfg.timeout)
    key = classify(res, argv)
    if key and key[0] == "timeout":
        # Past the timeout: a blocked process is a hang; a busy run is a hang only when
        # building alone (tfg check) is also past it, else it is slow work (a huge step
        # count or tensor) and not a finding.
        if res.blocked:
            key = ("hang", "blocked in %s" % res.wait)
        elif argv[0] == "run":
            with open(os.path.join(box_dir, MUTANT), "wb") as f:
                f.write(data)
            chk = run_tfg(cfg, sandbox, box_dir, ["check", "--color=never"], cfg.timeout)
            if chk.timed_out:
                key = ("hang", "build past the timeout (busy)")
            else:
                key = ("slow", "")
        else:
            key = ("hang", "%s past the timeout (busy)" % argv[0])
    return key, prog, data, argv, res, names


def worker(cfg, fnd, programs, sandbox, next_index, deadline):
    while True:
        with fnd.lock:
            index = next_index[0]
            if cfg.only is not None:
                if index >= len(cfg.only):
                    return
                index = cfg.only[index]
            elif (cfg.count is not None and index >= cfg.count) or \
                    (cfg.count is None and time.monotonic() >= deadline):
                return
            next_index[0] += 1
        key, prog, data, argv, res, names = check_mutant(cfg, sandbox, index, programs)
        with fnd.lock:
            fnd.count += 1
            fnd.exits[res.rc] = fnd.exits.get(res.rc, 0) + 1
        if cfg.only is not None:
            sys.stdout.write("mutant %d: %s (%s), tfg %s: exit %s, %.1f s\n%s\n--- stderr\n%s\n" % (
                index, prog.rel, ", ".join(names), " ".join(argv), res.rc, res.wall,
                data.decode("utf-8", "replace"), res.err))
        if key is None:
            continue
        if key[0] == "slow":
            with fnd.lock:
                fnd.slow.append(index)
            continue
        if not fnd.note(key):
            continue
        print("fuzz: mutant %d (%s): %s: %s" % (index, prog.rel, key[0], key[1]), flush=True)
        minimized = None
        if key[0] not in ("hang", "memory") and cfg.minimize:
            box_dir = os.path.join(sandbox.base, os.path.dirname(prog.rel))
            until = time.monotonic() + 120
            if cfg.count is None and cfg.only is None:
                until = min(until, deadline)
            minimized = minimize(cfg, box_dir, sandbox, data, argv, key, until)
        save_finding(cfg, fnd, key, index, prog, data, argv, res, minimized)


def replay(cfg, scratch):
    """Runs each saved finding's program as it was run (same folder, same command); prints
    its output and whether it still gives the same finding. Exit 1 if any does."""
    left = 0
    try:
        infos = []
        for d in cfg.replay:
            with open(os.path.join(d, "cmd.json")) as f:
                infos.append(json.load(f))
        box = Sandbox(os.path.join(scratch, "job0"), cfg.tfg, cfg.env, sorted({i["origin"] for i in infos}))
        for d, info in zip(cfg.replay, infos):
            name = "min.tfg" if os.path.exists(os.path.join(d, "min.tfg")) else "mutant.tfg"
            with open(os.path.join(d, name), "rb") as f:
                data = f.read()
            box_dir = os.path.join(box.base, info["origin"])
            with open(os.path.join(box_dir, MUTANT), "wb") as f:
                f.write(data)
            res = run_tfg(cfg, box, box_dir, info["argv"], cfg.timeout)
            key = classify(res, info["argv"])
            same = key is not None and key[0] in (info["kind"], "timeout")
            left += same
            print("== %s: %s (cd %s && tfg %s %s): exit %s%s\n%s" % (
                d, "still found" if same else "gone", info["origin"], " ".join(info["argv"]), name, res.rc,
                " (timed out)" if res.timed_out else "", "\n".join(res.err.splitlines()[:20])))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 1 if left else 0


def main():
    ap = argparse.ArgumentParser(description="mutation fuzzer over tfg programs (see the file's comment)")
    ap.add_argument("--tfg", required=True, help="the tfg binary (an ASan+UBSan build: make asan)")
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("FUZZ_SECONDS", 600)))
    ap.add_argument("--count", type=int, help="run exactly mutants 0..COUNT-1 (no time bound)")
    ap.add_argument("--only", type=int, nargs="+", help="run these mutants and show each")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("FUZZ_JOBS", 2)))
    ap.add_argument("--seed", default=os.environ.get("FUZZ_SEED", "1"))
    ap.add_argument("--timeout", type=float, default=float(os.environ.get("FUZZ_TIMEOUT", 10)))
    ap.add_argument("--findings", default=os.environ.get("FUZZ_FINDINGS", "fuzz-findings"))
    ap.add_argument("--no-minimize", dest="minimize", action="store_false")
    ap.add_argument("--replay", nargs="+", metavar="DIR",
                    help="run saved findings again (their min.tfg, else mutant.tfg) and say which remain")
    ap.add_argument("programs", nargs="*", help="programs to mutate (default: tests/golden/*.tfg, examples/*.tfg)")
    cfg = ap.parse_args()
    cfg.tfg = os.path.abspath(cfg.tfg)
    if not os.access(cfg.tfg, os.X_OK):
        sys.exit("fuzz: %s is not an executable (make asan builds build/asan/tfg)" % cfg.tfg)
    global RUN_AS
    if RUN_AS:
        try:
            subprocess.run([cfg.tfg, "version"], preexec_fn=child_limits, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=60)
        except (OSError, subprocess.SubprocessError):
            print("fuzz: user nobody cannot run %s (a folder on its path is closed to it): the "
                  "mutants run as root, their paths still confined" % cfg.tfg)
            RUN_AS = None
    with open(cfg.tfg, "rb") as f:
        asan = b"__asan_init" in f.read()
    cfg.preexec = child_limits if asan else child_limits_plain
    scratch = tempfile.mkdtemp(prefix="tfg-fuzz-")
    os.chmod(scratch, 0o755)  # for the mutants' user (RUN_AS)
    cfg.env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C",
        "CUDA_VISIBLE_DEVICES": "", "OPENBLAS_NUM_THREADS": "1",
        "ASAN_OPTIONS": "detect_leaks=1:allocator_may_return_null=1:hard_rss_limit_mb=3072:"
                        "malloc_limit_mb=3072:exitcode=86:abort_on_error=0:symbolize=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=87",
        "LSAN_OPTIONS": "exitcode=88",
    }
    paths = [os.path.abspath(p) for p in cfg.programs] or sorted(
        os.path.join(ROOT, folder, n) for folder in ("tests/golden", "examples")
        for n in os.listdir(os.path.join(ROOT, folder)) if n.endswith(".tfg"))
    programs = [Program(os.path.relpath(p, ROOT)) for p in paths]
    for p in programs:
        if os.path.dirname(p.rel) not in ("tests/golden", "examples"):
            sys.exit("fuzz: %s: only programs in tests/golden and examples can be mutated" % p.rel)
    if cfg.replay:
        return replay(cfg, scratch)
    fnd = Findings(os.path.abspath(cfg.findings))
    fnd.clear()
    jobs = 1 if cfg.only else max(1, cfg.jobs)
    bound = ("mutants %s" % cfg.only if cfg.only else "%d mutants" % cfg.count if cfg.count is not None
             else "%.0f s" % cfg.seconds)
    print("fuzz: mutating %d programs, seed %s, %s, %d jobs, %.0f s timeout, %s build; findings in %s"
          % (len(programs), cfg.seed, bound, jobs, cfg.timeout, "ASan+UBSan" if asan else "plain",
             os.path.relpath(fnd.folder)), flush=True)
    t0 = time.monotonic()
    deadline = t0 + cfg.seconds
    try:
        folders = sorted({os.path.dirname(p.rel) for p in programs})
        boxes = [Sandbox(os.path.join(scratch, "job%d" % j), cfg.tfg, cfg.env, folders) for j in range(jobs)]
        next_index = [0]
        threads = [threading.Thread(target=worker, args=(cfg, fnd, programs, b, next_index, deadline))
                   for b in boxes]
        for t in threads:
            t.start()
        said = time.monotonic()
        for t in threads:  # a line a minute meanwhile: never silent for long
            while t.is_alive():
                t.join(5)
                if time.monotonic() - said >= 60 and cfg.only is None:
                    said = time.monotonic()
                    print("fuzz: %d mutants, %d distinct findings, %.0f s" % (
                        fnd.count, len(fnd.seen), said - t0), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    wall = time.monotonic() - t0
    exits = ", ".join("%s: %d" % (k, v) for k, v in sorted(fnd.exits.items()))
    slow = sorted(fnd.slow)
    lines = ["fuzz: %d mutants in %.0f s (exit codes %s; %d slow runs past the timeout, not findings%s)"
             % (fnd.count, wall, exits, len(slow),
                ": mutants " + " ".join(map(str, slow[:20])) + (" ..." if len(slow) > 20 else "") if slow else "")]
    for (kind, sig), (n, d) in sorted(fnd.seen.items()):
        lines.append("  %-9s %4dx  %s\n             %s" % (kind, n, sig, os.path.relpath(d)))
    lines.append("fuzz: %d distinct findings" % len(fnd.seen))
    print("\n".join(lines))
    if fnd.seen:
        os.makedirs(fnd.folder, exist_ok=True)
        with open(os.path.join(fnd.folder, "summary.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
    return 1 if fnd.seen else 0


if __name__ == "__main__":
    sys.exit(main())
