"""tests/checks.py: the check lines of the Python test scripts
(tests/repl_pty.py, tests/interrupt.py), which tests/lib.sh's py_checks
counts: one line per check, "ok NAME" or "FAIL NAME: why"."""
import sys

failed = 0


def check(name, cond, why=""):
    """Prints the check's line; remembers a failure."""
    global failed
    if cond:
        print("ok " + name)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, why))


def finish():
    """Exits 1 if any check failed, else 0."""
    sys.exit(1 if failed else 0)
