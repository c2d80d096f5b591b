#!/usr/bin/env python3
"""tests/ckpt_reader.py FILE: reads a safetensors file the way the format's
specification describes it, with the standard library only, and prints one
line per tensor ("NAME DTYPE SHAPE FIRST_VALUE") and one per metadata key
("meta KEY VALUE"). An independent reader for tfg's writer: it fails (exit
1) on anything the specification does not allow."""
import json
import struct
import sys

SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "BOOL": 1}
FORMATS = {"F64": "<d", "F32": "<f", "I64": "<q", "I32": "<i"}


def main():
    data = open(sys.argv[1], "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = data[8 + n:]
    meta = header.pop("__metadata__", {})
    end = 0
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, stop = t["data_offsets"]
        count = 1
        for d in t["shape"]:
            count *= d
        assert begin == end, "hole or overlap before %s" % name
        assert stop - begin == count * SIZES[t["dtype"]], "size of %s" % name
        end = stop
        first = ""
        if count and t["dtype"] in FORMATS:
            first = "%.9g" % struct.unpack_from(FORMATS[t["dtype"]], body, begin)[0]
        print(name, t["dtype"], t["shape"], first)
    assert end == len(body), "trailing bytes"
    for k, v in meta.items():
        assert isinstance(v, str)
        print("meta", k, v)
    return 0


if __name__ == "__main__":
    sys.exit(main())
