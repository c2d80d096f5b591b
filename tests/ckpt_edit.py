#!/usr/bin/env python3
"""tests/ckpt_edit.py IN OUT EDIT...: rewrites a safetensors file with edits,
for the checkpoint-restore tests (tests/reliability/io.sh). Standard library
only; the output is a valid safetensors file (data re-tiled, header padded).

    drop=KEY          removes tensor KEY
    copy=KEY=NEW      adds tensor NEW, a copy of tensor KEY
    meta=KEY=VALUE    sets metadata KEY to VALUE (an empty VALUE removes it)
"""
import json
import struct
import sys


def main():
    if len(sys.argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    raw = open(sys.argv[1], "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    body = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        tensors[name] = (t["dtype"], t["shape"], body[begin:end])
    for edit in sys.argv[3:]:
        op, _, arg = edit.partition("=")
        if op == "drop":
            del tensors[arg]
        elif op == "copy":
            key, _, new = arg.partition("=")
            tensors[new] = tensors[key]
        elif op == "meta":
            key, _, value = arg.partition("=")
            if value:
                meta[key] = value
            else:
                meta.pop(key, None)
        else:
            sys.stderr.write("unknown edit %r\n" % edit)
            return 2
    out = {}
    if meta:
        out["__metadata__"] = meta
    data = bytearray()
    for name, (dtype, shape, b) in tensors.items():
        out[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    text = json.dumps(out, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(sys.argv[2], "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
