#!/usr/bin/env python3
"""Copies the first H heads of [heads, seq, dim] .npy dumps (q.npy, k.npy, v.npy of one layer)
into another directory: every layer of a model at fewer heads, where all heads cost too much.
Usage: scripts/npy_head_slice.py SRC_DIR DST_DIR Q_HEADS KV_HEADS (stdlib only)."""
import ast
import os
import struct
import sys


def slice_npy(src, dst, heads):
    with open(src, "rb") as f:
        magic = f.read(8)
        assert magic[:6] == b"\x93NUMPY", src
        n = struct.unpack("<H" if magic[6] == 1 else "<I", f.read(2 if magic[6] == 1 else 4))[0]
        hdr = ast.literal_eval(f.read(n).decode("latin1"))
        assert not hdr["fortran_order"] and hdr["descr"] == "<f4", hdr
        h, s, d = hdr["shape"]
        assert heads <= h, (src, heads, h)
        data = f.read(heads * s * d * 4)
    text = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d, %d), }" % (heads, s, d)
    text += " " * (63 - (10 + len(text)) % 64) + "\n"
    with open(dst, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1"))
        f.write(data)


if __name__ == "__main__":
    src, dst, qh, kvh = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    os.makedirs(dst, exist_ok=True)
    slice_npy(os.path.join(src, "q.npy"), os.path.join(dst, "q.npy"), qh)
    for t in ("k.npy", "v.npy"):
        slice_npy(os.path.join(src, t), os.path.join(dst, t), kvh)
