#!/usr/bin/env python3
"""bench/make_batch.py DIR: writes the wide model's batch for the training
benchmarks, with the standard library only: DIR/x.npy (128 x 784 f32 in
[0, 1)) and DIR/y.npy (128 i32 labels 0..9), from a fixed seed."""
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
npy(sys.argv[1] + "/x.npy", "<f4", (128, 784), [r.random() for _ in range(128 * 784)], "f")
npy(sys.argv[1] + "/y.npy", "<i4", (128,), [r.randrange(10) for _ in range(128)], "i")
