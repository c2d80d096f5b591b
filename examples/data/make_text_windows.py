#!/usr/bin/env python3
"""examples/data/make_text_windows.py: cuts a text into byte windows for a
byte-level language model, as a NumPy .npy file (format 1.0, dtype '|u1',
shape [rows, window], C order), written with the standard library alone.

  python3 examples/data/make_text_windows.py            # the shipped file:
      examples/data/constitution.txt -> examples/data/constitution.npy,
      window 129, stride 64
  python3 examples/data/make_text_windows.py --window 257 --stride 32 \\
      examples/data/constitution.txt /tmp/windows.npy

Row r is bytes [r * stride, r * stride + window) of the file; the last
partial window is dropped. A model reads T + 1 <= window bytes of a row:
the first T are its input, the last T (shifted by one) its targets. The
output depends only on the text and the two numbers: the same bytes every
time.
"""

import argparse
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def npy_bytes(rows, window, data):
    """The .npy file of a [rows, window] uint8 array whose values are data."""
    header = "{'descr': '|u1', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, window)
    # magic (6) + version (2) + header length (2) + header + '\n', padded to 64
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * (pad % 64) + "\n"
    return b"\x93NUMPY" + bytes([1, 0]) + struct.pack("<H", len(header)) + header.encode("latin1") + data


def main(argv):
    p = argparse.ArgumentParser(description="Byte windows of a text as a uint8 .npy.")
    p.add_argument("text", nargs="?", default=os.path.join(HERE, "constitution.txt"))
    p.add_argument("out", nargs="?", default=os.path.join(HERE, "constitution.npy"))
    p.add_argument("--window", type=int, default=129, help="bytes per row (default 129)")
    p.add_argument("--stride", type=int, default=64, help="bytes between row starts (default 64)")
    a = p.parse_args(argv)
    if a.window < 2 or a.stride < 1:
        p.error("--window must be >= 2 and --stride >= 1")
    with open(a.text, "rb") as f:
        text = f.read()
    if len(text) < a.window:
        p.error("%s has %d bytes, fewer than a window (%d)" % (a.text, len(text), a.window))
    rows = (len(text) - a.window) // a.stride + 1
    data = b"".join(text[r * a.stride:r * a.stride + a.window] for r in range(rows))
    with open(a.out, "wb") as f:
        f.write(npy_bytes(rows, a.window, data))
    print("%s: %d rows of %d bytes (stride %d) from %s" % (a.out, rows, a.window, a.stride, a.text))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
