#!/usr/bin/env python3
"""tests/repl_pty.py TFG: `tfg repl` on a terminal, driven through a
pseudo-terminal (Python's pty module): the prompts, the continuation
prompt, history recall (up arrow) and its file, tab completion of a name
of a meta command and of a file name after :load, Ctrl-C dropping an unfinished input, Ctrl-C
stopping a train (the session goes on), an error that does not end the session, and Ctrl-D ending
it with status 0.

Prints one line per check, "ok NAME" or "FAIL NAME: why" (tests/repl.sh
counts them), and exits 1 if any failed. TERM=dumb keeps libedit's output
free of cursor movement; NO_COLOR keeps diagnostics plain."""
import os
import pty
import select
import sys
import tempfile
import termios
import time

from checks import check, finish

TFG = sys.argv[1]


class Term:
    """A tfg repl on a pseudo-terminal: send keys, wait for text."""

    def __init__(self, env):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execve(TFG, [TFG, "repl"], env)
        self.out = b""
        self.mark = 0  # expect() looks at the output after this point

    def read(self, timeout):
        end = time.time() + timeout
        while time.time() < end:
            r, _, _ = select.select([self.fd], [], [], 0.05)
            if not r:
                continue
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                return False  # the child closed the terminal
            if not data:
                return False
            self.out += data
            return True
        return True

    def expect(self, text, timeout=10):
        """Waits until text appears after the mark; moves the mark past it."""
        want = text.encode()
        end = time.time() + timeout
        while True:
            i = self.out.find(want, self.mark)
            if i >= 0:
                self.mark = i + len(want)
                return True
            if time.time() > end or not self.read(end - time.time()):
                i = self.out.find(want, self.mark)
                if i >= 0:
                    self.mark = i + len(want)
                    return True
                return False

    def send(self, keys):
        """Types keys once libedit reads the terminal: it switches it to
        raw mode only after showing the prompt, and a key that arrives
        before that is taken by the line discipline (a ^D there ends
        nothing), as keys typed ahead are."""
        end = time.time() + 10
        while time.time() < end and termios.tcgetattr(self.fd)[3] & termios.ICANON:
            self.read(0.02)
        os.write(self.fd, keys.encode())

    def tail(self):
        return repr(self.out[self.mark:][-300:].decode(errors="replace"))

    def wait(self, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            self.read(0.05)
        os.kill(self.pid, 9)
        os.waitpid(self.pid, 0)
        return None


with tempfile.TemporaryDirectory() as home:
    hist = os.path.join(home, "history")
    env = dict(os.environ, TERM="dumb", HOME=home, TFG_HISTFILE=hist, NO_COLOR="1")
    env.pop("TFG_FUSE", None)

    t = Term(env)
    check("prompt", t.expect("tfg> "), t.tail())
    t.send("hidden_units = 3\n")
    check("statement", t.expect("tfg> "), t.tail())
    t.send("fn scale(a) {\n")
    check("continuation-prompt", t.expect("...> "), t.tail())
    t.send("  return a * hidden_units\n")
    check("continuation-again", t.expect("...> "), t.tail())
    t.send("}\n")
    check("continuation-done", t.expect("tfg> "), t.tail())
    t.send("scale(14)\n")
    check("value", t.expect("42\r\n") and t.expect("tfg> "), t.tail())
    # Up arrow recalls the last line; Enter runs it again.
    t.send("\x1b[A")
    check("history-recall", t.expect("scale(14)"), t.tail())
    t.send("\n")
    check("history-run", t.expect("42\r\n") and t.expect("tfg> "), t.tail())
    # Tab completes a name in scope, and a meta command.
    t.send("hidd\t")
    check("complete-name", t.expect("hidden_units"), t.tail())
    t.send("\n")
    check("complete-name-run", t.expect("3\r\n") and t.expect("tfg> "), t.tail())
    t.send(":gr\t")
    check("complete-meta", t.expect(":graph"), t.tail())
    t.send("\n")
    check("complete-meta-run", t.expect("(the graph is empty)") and t.expect("tfg> "), t.tail())
    # After :load, Tab completes a file name.
    with open(os.path.join(home, "tiny_model.tfg"), "w") as f:
        f.write("tiny = 5\n")
    t.send(":lo\t")
    check("complete-load", t.expect(":load "), t.tail())
    t.send(home + "/tiny_m\t")
    check("complete-file", t.expect("tiny_model.tfg"), t.tail())
    t.send("\n")
    check("load-file", t.expect("tfg> "), t.tail())
    t.send("tiny\n")
    check("load-file-run", t.expect("5\r\n") and t.expect("tfg> "), t.tail())
    # A builtin op completes too.
    t.send("x = sigm\t")
    check("complete-builtin", t.expect("sigmoid"), t.tail())
    t.send("(tensor([0.0]))\n")
    check("builtin-run", t.expect("tfg> "), t.tail())
    t.send("x\n")
    check("tensor-value", t.expect("x: f32[1] @cpu:0") and t.expect("[0.5]") and t.expect("tfg> "), t.tail())
    # Ctrl-C drops an unfinished input.
    t.send("y = (1 +\n")
    check("interrupt-continuation", t.expect("...> "), t.tail())
    t.send("\x03")
    check("interrupt-prompt", t.expect("tfg> "), t.tail())
    t.send("y\n")
    check("interrupt-dropped", t.expect("unknown name 'y'") and t.expect("tfg> "), t.tail())
    # An error does not end the session; the next input runs.
    t.send("nope + 1\n")
    check("error-located", t.expect("<stdin>:") and t.expect("error: unknown name 'nope'"), t.tail())
    t.send("6 * 7\n")
    check("error-survived", t.expect("42\r\n") and t.expect("tfg> "), t.tail())
    # Ctrl-C during a train stops it after its step: the input is undone
    # (like any failed one) and the session goes on.
    digits = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "data",
                          "digits.csv.gz")
    for line in ["import nn", 'data digits = csv("%s", label = -1)' % digits, "input x: f32[16, 64] from digits.x",
                 "input y: i32[16] from digits.y", "logits = nn.mlp(x / 16.0, [48, 10])"]:
        t.send(line + "\n")
        t.expect("tfg> ")
    t.send("train cross_entropy(logits, y) { optimizer = adam(lr = 1e-2); steps = 10000000; log_every = 200 }\n")
    check("train-progress", t.expect("step 200/10000000", timeout=30), t.tail())
    os.write(t.fd, b"\x03")  # the terminal is not raw while the train runs: ^C is SIGINT
    check("train-interrupted", t.expect("stopping after this step") and t.expect("training interrupted after step")
          and t.expect("tfg> "), t.tail())
    t.send("6 * 7\n")
    check("train-interrupt-survived", t.expect("42\r\n") and t.expect("tfg> "), t.tail())
    # Ctrl-D ends the session with status 0.
    t.send("\x04")
    code = t.wait()
    check("eof-exit", code == 0, "exit %s, %s" % (code, t.tail()))

    try:
        saved = open(hist, encoding="utf-8", errors="replace").read()
    except OSError as e:
        saved = str(e)
    check("history-file", "scale(14)" in saved and "6\\040*\\0407" in saved.replace(" ", "\\040"), repr(saved[-200:]))

    # A new session reads the history: up arrow brings back the last line.
    t = Term(env)
    check("second-prompt", t.expect("tfg> "), t.tail())
    t.send("\x1b[A")
    check("history-across-sessions", t.expect("6 * 7"), t.tail())
    t.send("\n")
    check("history-across-run", t.expect("42\r\n"), t.tail())
    t.send(":quit\n")
    code = t.wait()
    check("quit-exit", code == 0, "exit %s, %s" % (code, t.tail()))

finish()
