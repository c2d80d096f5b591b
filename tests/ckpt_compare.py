#!/usr/bin/env python3
"""tests/ckpt_compare.py A B TOL [NAME_PREFIX]: compares two safetensors files
written by tfg, tensor by tensor (f32 and f64), with the standard library
only. Passes (exit 0) when both hold the same tensor names, dtypes and
shapes, and every element agrees: |a - b| <= TOL * (1 + |b|). Prints the
largest difference seen; on failure names the first tensor that differs."""
import json
import struct
import sys

FORMATS = {"F64": "d", "F32": "f"}


def read(path):
    """The header (its __metadata__ included) and the data of a safetensors file."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n].decode("utf-8")), data[8 + n:]


def load(path):
    header, body = read(path)
    header.pop("__metadata__", None)
    out = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        fmt = FORMATS.get(t["dtype"])
        if fmt is None:
            continue
        count = (end - begin) // struct.calcsize(fmt)
        out[name] = (t["dtype"], t["shape"], struct.unpack("<%d%s" % (count, fmt), body[begin:end]))
    return out


def main():
    a, b, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
    prefix = sys.argv[4] if len(sys.argv) > 4 else ""
    names = sorted(k for k in a if k.startswith(prefix))
    if names != sorted(k for k in b if k.startswith(prefix)):
        print("different tensors: %s vs %s" % (names, sorted(b)))
        return 1
    worst = 0.0
    for name in names:
        (da, sa, va), (db, sb, vb) = a[name], b[name]
        if da != db or sa != sb:
            print("%s: %s%s vs %s%s" % (name, da, sa, db, sb))
            return 1
        for i, (x, y) in enumerate(zip(va, vb)):
            d = abs(x - y) / (1 + abs(y))
            worst = max(worst, d)
            if not d <= tol:
                print("%s[%d]: %r vs %r" % (name, i, x, y))
                return 1
    print("%d tensors agree, largest relative difference %.3g" % (len(names), worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
