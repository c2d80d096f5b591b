#!/usr/bin/env python3
"""tests/ckpt_writer.py OUT: writes a params-only safetensors file to OUT.

A second, independent writer for the checkpoint tests (tests/unit/test_ckpt.c):
the file a program gets from PyTorch or elsewhere, made here with the standard
library only (no numpy, no safetensors package), so tfg's reader is checked
against bytes it did not write itself. Its choices differ from tfg's writer on
purpose: json.dumps' spaced separators, no "__metadata__", the tensors listed
in the header in the reverse of their order in the data.

    "h.w"  F32 [2, 3]  0, 1, 2, 3, 4, 5   (data bytes [0, 24))
    "h.b"  F32 [3]     0.5, -1.5, 2.25    (data bytes [24, 36))
"""
import json
import struct
import sys

TENSORS = [
    ("h.w", "F32", [2, 3], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]),
    ("h.b", "F32", [3], [0.5, -1.5, 2.25]),
]


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: ckpt_writer.py OUT\n")
        return 2
    header = {}
    data = bytearray()
    for name, dtype, shape, values in TENSORS:
        raw = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    # Reverse the header's order: the format does not tie it to the data's.
    text = json.dumps(dict(reversed(list(header.items())))).encode("utf-8")
    text += b" " * (-len(text) % 8)  # pad as the reference writer does
    with open(sys.argv[1], "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
