#!/usr/bin/env python3
"""tests/interrupt.py TFG: Ctrl-C (SIGINT) during `tfg run`'s training.

A long training run of the digits MLP with a checkpoint gets one SIGINT
once its first progress line is out: it must stop after the step in
progress, say so, write the checkpoint at that step, and exit 130 (CLI.md);
run again, it resumes from that step. A run without a checkpoint stops
the same way and leaves no file; one whose stderr reader is gone (a `| tee`
ended by the same Ctrl-C) still does. (A second SIGINT while the first is
honoured ends the process at once; that depends on when it lands within a
step, so no test here can time it without flaking.)

Prints one line per check, "ok NAME" or "FAIL NAME: why" (tests/run.sh
counts them), and exits 1 if any failed. Each tfg starts with SIGINT at
its default (a test runner may have been started ignoring it)."""
import os
import signal
import subprocess
import sys
import tempfile

from checks import check, finish
from ckpt_compare import read

TFG = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIGITS = os.path.join(ROOT, "examples", "data", "digits.csv.gz")


def program(path, steps, checkpoint):
    with open(path, "w") as f:
        f.write('import nn\n')
        f.write('data digits = csv("%s", label = -1, test = 0.2, shuffle = true, seed = 7)\n' % DIGITS)
        f.write('input x: f32[16, 64] from digits.x\n')
        f.write('input y: i32[16] from digits.y\n')
        f.write('logits = nn.mlp(x / 16.0, [48, 10])\n')
        f.write('train cross_entropy(logits, y) {\n')
        f.write('  optimizer = adam(lr = 1e-2)\n')
        f.write('  steps = %d\n' % steps)
        f.write('  log_every = 200\n')
        if checkpoint:
            f.write('  checkpoint = "%s"\n' % checkpoint)
        f.write('}\n')


def start(path):
    return subprocess.Popen([TFG, "run", "--color=never", path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def interrupt_after_progress(p):
    """Waits for the first progress line, sends SIGINT; returns (rc, stderr)."""
    first = p.stderr.readline()
    p.send_signal(signal.SIGINT)
    rest = p.stderr.read()
    return p.wait(timeout=60), first + rest


def ckpt_step(path):
    """The "step" of a safetensors checkpoint's metadata."""
    return int(read(path)[0]["__metadata__"]["step"])


with tempfile.TemporaryDirectory() as tmp:
    ck = os.path.join(tmp, "long.safetensors")
    prog = os.path.join(tmp, "long.tfg")
    program(prog, 10000000, ck)
    rc, err = interrupt_after_progress(start(prog))
    check("run-exit-130", rc == 130, "exit %s: %r" % (rc, err[-400:]))
    check("run-says-stopping", "tfg: interrupt: stopping after this step" in err, repr(err[-400:]))
    marker = "error: training interrupted after step "
    at = err.find(marker)
    step = int(err[at + len(marker):].split()[0]) if at >= 0 else -1
    check("run-located", at >= 0 and "long.tfg:6:1: " + marker in err, repr(err[-400:]))
    check("run-stopped-early", 200 <= step < 10000000, "step %d" % step)
    check("run-note", ("%s holds step %d: running again resumes from it" % (ck, step)) in err, repr(err[-400:]))
    got = ckpt_step(ck) if os.path.exists(ck) else None
    check("run-checkpoint-step", got == step, "checkpoint step %s, interrupted at %d" % (got, step))

    # Running again resumes there: 50 more steps.
    program(prog, step + 50, ck)
    r = subprocess.run([TFG, "run", "--color=never", prog], capture_output=True, text=True)
    check("resume", r.returncode == 0 and ("step %d" % step) in r.stderr and "trained 50 steps" in r.stderr,
          "exit %d: %r" % (r.returncode, r.stderr[-400:]))
    check("resume-checkpoint", ckpt_step(ck) == step + 50, "step %s" % ckpt_step(ck))

    # Without a checkpoint: the same stop, and no file.
    plain = os.path.join(tmp, "plain.tfg")
    program(plain, 10000000, None)
    rc, err = interrupt_after_progress(start(plain))
    check("no-checkpoint-exit-130", rc == 130 and marker in err and "holds step" not in err,
          "exit %s: %r" % (rc, err[-400:]))

    # The log's reader gone with the Ctrl-C (`tfg run ... 2>&1 | tee log`:
    # the terminal's SIGINT ends tee too): tfg's later writes fail, but it
    # still stops, writes its checkpoint and exits 130 (no SIGPIPE death).
    os.remove(ck)
    program(prog, 10000000, ck)
    p = start(prog)
    p.stderr.readline()
    p.stderr.close()
    p.send_signal(signal.SIGINT)
    rc = p.wait(timeout=60)
    check("log-reader-gone", rc == 130 and os.path.exists(ck), "exit %s, checkpoint %s" % (rc, os.path.exists(ck)))

finish()
