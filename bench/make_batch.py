#!/usr/bin/env python3
"""bench/make_batch.py DIR [normal D0xD1x...]: writes a batch for the
training benchmarks as .npy, with the standard library only, from a fixed
seed: the wide model's DIR/x.npy (128 x 784 f32 in [0, 1)) and DIR/y.npy
(128 i32 labels 0..9); or, given `normal` and a shape, DIR/x.npy of that
shape, f32 values from a standard normal (bench/opt_ab.sh's layers)."""
import random
import struct
import sys


def npy(path, descr, shape, values, fmt):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else ""))
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))


r = random.Random(1)
if len(sys.argv) > 2 and sys.argv[2] == "normal":
    shape = tuple(int(d) for d in sys.argv[3].split("x"))
    n = 1
    for d in shape:
        n *= d
    npy(sys.argv[1] + "/x.npy", "<f4", shape, [r.gauss(0, 1) for _ in range(n)], "f")
else:
    npy(sys.argv[1] + "/x.npy", "<f4", (128, 784), [r.random() for _ in range(128 * 784)], "f")
    npy(sys.argv[1] + "/y.npy", "<i4", (128,), [r.randrange(10) for _ in range(128)], "i")
