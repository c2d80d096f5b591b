#!/usr/bin/env python3
"""tests/progress_pty.py TFG DIR: `tfg run` training on a terminal,
through a pseudo-terminal (Python's pty module): the progress bar between
log lines (done and to do, the step, the loss, steps/s and the time left),
redrawn at most 10 times a second and cleared before each log line and at
the end, so the log lines stay whole; under --quiet, nothing at all.

Prints one line per check, "ok NAME" or "FAIL NAME: why" (tests/lib.sh's
py_checks counts them), and exits 1 if any failed. DIR: a scratch folder."""
import os
import pty
import re
import select
import sys
import time

from checks import check, finish

TFG, DIR = sys.argv[1], sys.argv[2]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 20000
WIDTH = 24  # runtime/train.c job_bar
CLEAR = b"\r\x1b[K"
BAR = re.compile(rb"\[([#.]{%d})\] (\d+)/%d  loss [0-9.]+  ([0-9.]+) steps/s  ETA (\d+):(\d\d)" % (WIDTH, STEPS))


def run(args):
    """Runs tfg with args on a pseudo-terminal (stdout and stderr); its
    output, exit status and wall seconds."""
    env = dict(os.environ, NO_COLOR="1", TERM="xterm")
    t0 = time.time()
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(TFG, [TFG] + args, env)
    out = b""
    while True:
        r, _, _ = select.select([fd], [], [], 60)
        if not r:
            break
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    return out.replace(b"\r\n", b"\n"), os.waitstatus_to_exitcode(status), time.time() - t0


prog = os.path.join(DIR, "bar.tfg")
with open(prog, "w") as f:
    f.write('import nn\n'
            'data digits = csv("%s/examples/data/digits.csv.gz", label = -1, test = 0.2, shuffle = true, seed = 7)\n'
            'input x: f32[16, 64] from digits.x\n'
            'input y: i32[16] from digits.y\n'
            'logits = nn.mlp(x / 16.0, [48, 10])\n'
            'train cross_entropy(logits, y) { optimizer = adam(lr = 1e-3); steps = %d; log_every = 5000 }\n'
            % (ROOT, STEPS))

out, rc, secs = run(["run", "--threads", "1", prog])
check("bar-exit", rc == 0, "exit %d: %r" % (rc, out[-300:]))
draws = [m for m in BAR.finditer(out)]
# The run lasts well over 0.3 s (20000 steps), so the bar is drawn more
# than twice; at most 10 times a second, with one more for the first.
check("bar-drawn", len(draws) >= 3, "%d drawings in %.2f s: %r" % (len(draws), secs, out[:300]))
check("bar-rate", len(draws) <= 10 * secs + 1, "%d drawings in %.2f s" % (len(draws), secs))
steps = [int(m.group(2)) for m in draws]
check("bar-steps", steps == sorted(steps) and all(0 < s < STEPS for s in steps), "steps %s" % steps)
fill_ok = all(m.group(1).count(b"#") == WIDTH * int(m.group(2)) // STEPS and
              m.group(1) == b"#" * m.group(1).count(b"#") + b"." * (WIDTH - m.group(1).count(b"#")) for m in draws)
check("bar-fill", fill_ok, "bars %s" % [m.group(0) for m in draws[:5]])
# ETA: the steps left at the printed rate (its 0.1 rounding and the
# rounding to whole seconds allowed)
eta_ok = True
for m in draws:
    s, rate, eta = int(m.group(2)), float(m.group(3)), int(m.group(4)) * 60 + int(m.group(5))
    want = (STEPS - s) / rate if rate > 0 else 0
    eta_ok &= rate > 0 and abs(eta - want) <= 1 + want * 0.05 / rate
check("bar-eta", eta_ok, "bars %s" % [m.group(0) for m in draws[:5]])
# every drawing starts with the clear, and the next write clears it again
check("bar-cleared", all(out[m.start() - len(CLEAR):m.start()] == CLEAR and out[m.end():m.end() + len(CLEAR)] == CLEAR
                         for m in draws), "%r" % out[:400])
# without the drawings and clears, the log is the plain one: whole lines
plain = re.sub(rb"\r\x1b\[K(\[[#.]{%d}\][^\r\n]*)?" % WIDTH, b"", out).decode()
lines = plain.splitlines()
want = ["step %d/%d  loss " % (k, STEPS) for k in (5000, 10000, 15000, 20000)]
check("bar-log-lines", [l[:len(w)] for l, w in zip([l for l in lines if l.startswith("step")], want)] == want and
      any(l.startswith("eval  step %d" % STEPS) for l in lines) and
      any(l.startswith("trained %d steps" % STEPS) for l in lines), "%r" % plain[:500])

out, rc, secs = run(["run", "--quiet", "--threads", "1", prog])
check("bar-quiet", rc == 0 and out == b"", "exit %d, %r" % (rc, out[:200]))
finish()
