#!/usr/bin/env python3
"""
An independent safetensors reader and writer (numpy + json + struct only, deliberately not the
`safetensors` package) that tests/nn/test_safetensors.cpp runs to check Loom's files against
a second implementation of the format, in both directions.

  safetensors_interop.py read <file>    validate <file> and print its content as JSON:
        {"header_length": N, "metadata": {...},
         "tensors": [{"name", "dtype", "shape", "data_offsets", "sum", "values"}, ...]}
        in header order; "values" is the flattened row-major content (floats that are not
        finite as the strings "nan", "inf", "-inf", since JSON has no such numbers).
  safetensors_interop.py write <file>   write a file with the fixed content that the C++ test
        expects (Hugging Face's layout: sorted header, space padding), every dtype included.

Any deviation from the format makes `read` exit non-zero with the reason on stderr.
"""
import json
import math
import struct
import sys

import numpy as np

# safetensors dtype code -> numpy little-endian dtype. BF16 has no numpy type: it is read as
# uint16 and widened to float32 by shifting the bits into the high half.
DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2",
    "I64": "<i8", "I32": "<i4", "I8": "i1", "U8": "u1", "BOOL": "u1",
}


def fail(message):
    print(f"safetensors_interop: {message}", file=sys.stderr)
    sys.exit(1)


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        fail(f"duplicate keys in {keys}")
    return dict(pairs)


def to_json_number(x):
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        fail("file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        fail(f"header length {n} beyond the file")
    # Loom promises an 8-aligned data buffer (as Hugging Face's writer does).
    if (8 + n) % 8 != 0:
        fail(f"data buffer starts at {8 + n}, not 8-aligned")
    header = json.loads(data[8:8 + n].decode("utf-8"), object_pairs_hook=no_duplicates)
    buffer = data[8 + n:]
    metadata = header.pop("__metadata__", {})
    tensors, ranges = [], []
    for name, entry in header.items():
        if sorted(entry) != ["data_offsets", "dtype", "shape"]:
            fail(f"{name}: fields {sorted(entry)}")
        code, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
        dtype = np.dtype(DTYPES[code])
        numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if end - begin != numel * dtype.itemsize or end > len(buffer):
            fail(f"{name}: offsets {begin},{end} do not fit shape {shape} of {code}")
        if begin % dtype.itemsize != 0:
            fail(f"{name}: offset {begin} not aligned to {dtype.itemsize}")
        ranges.append((begin, end, name))
        raw = np.frombuffer(buffer[begin:end], dtype=dtype).reshape(shape)
        if code == "BF16":
            array = (raw.astype("<u4") << 16).view("<f4")
        elif code == "BOOL":
            if raw.size and raw.max() > 1:
                fail(f"{name}: BOOL byte above 1")
            array = raw.astype(bool)
        else:
            array = raw
        flat = array.reshape(-1)
        if code == "BOOL":
            values = [bool(v) for v in flat]
        elif code.startswith(("I", "U")):
            values = [int(v) for v in flat]
        else:
            values = [to_json_number(float(v)) for v in flat]
        total = float(np.sum(flat.astype(np.float64))) if flat.size else 0.0
        tensors.append({"name": name, "dtype": code, "shape": shape, "data_offsets": [begin, end],
                        "sum": to_json_number(total), "values": values})
    covered = 0
    for begin, end, name in sorted(ranges):
        if begin != covered:
            fail(f"{name}: starts at {begin}, expected {covered} (hole or overlap)")
        covered = end
    if covered != len(buffer):
        fail(f"buffer has {len(buffer)} bytes, tensors cover {covered}")
    print(json.dumps({"header_length": n, "metadata": metadata, "tensors": tensors}))


def bf16_bits(values):
    bits = np.array(values, dtype="<f4").view("<u4")
    if np.any(bits & 0xFFFF):
        fail("bf16 test values must be exactly representable")
    return (bits >> 16).astype("<u2")


def write(path):
    arrays = {
        "b.f32": (np.arange(6, dtype="<f4").reshape(2, 3) * 0.5 - 1, "F32"),
        "a.f64": (np.array([[1e-300, -2.5], [3.0, 1e300]], dtype="<f8"), "F64"),
        "c.f16": (np.array([0.5, -2.0, 65504.0, 2.0 ** -14], dtype="<f2"), "F16"),
        "d.bf16": (bf16_bits([1.0, -3.140625, 3.3895313892515355e38, 0.0078125]), "BF16"),
        "e.i64": (np.array([[-(2 ** 63), 2 ** 63 - 1], [0, -1]], dtype="<i8"), "I64"),
        "f.i32": (np.array([-2 ** 31, 2 ** 31 - 1, 7], dtype="<i4"), "I32"),
        "g.i8": (np.array([-128, 127, 0], dtype="i1"), "I8"),
        "h.u8": (np.array([0, 255, 128], dtype="u1"), "U8"),
        "i.bool": (np.array([1, 0, 1], dtype="u1"), "BOOL"),
        "j.scalar": (np.array(42.0, dtype="<f4"), "F32"),
        "k.empty": (np.zeros((0, 3), dtype="<f4"), "F32"),
    }
    header = {"__metadata__": {"format": "pt", "source": "numpy"}}
    chunks, offset = [], 0
    # Data in reverse name order while the header is sorted: readers must use the offsets.
    for name in sorted(arrays, reverse=True):
        array, code = arrays[name]
        raw = array.tobytes(order="C")
        header[name] = {"dtype": code, "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for chunk in chunks:
            f.write(chunk)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("read", "write"):
        fail("usage: safetensors_interop.py read|write <file>")
    read(sys.argv[2]) if sys.argv[1] == "read" else write(sys.argv[2])
