"""Reads a predictions file written by tools/predict with h5py (tests/tools/test_predict_cli.cpp).

Prints one JSON object: every dataset's shape, dtype and values, and the root attributes; and
checks, with numpy, that each class is the argmax of its logits and each probability their
softmax at that class (when the file has logits). Exit status 1 on a failed check.
"""
import json
import sys

import h5py
import numpy as np


def main(path):
    out = {"datasets": {}, "attrs": {}}
    with h5py.File(path, "r") as f:
        for name, d in f.items():
            values = d[()]
            out["datasets"][name] = {"shape": list(d.shape), "dtype": str(d.dtype), "values": values.tolist()}
        for name, value in f.attrs.items():
            out["attrs"][name] = value.decode() if isinstance(value, bytes) else (
                value if isinstance(value, str) else float(value))
        if "logits" in f:
            logits = f["logits"][()].astype(np.float64)
            p = np.exp(logits - logits.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
            if not (logits.argmax(axis=-1) == f["class"][()]).all():
                print("class is not the argmax of the logits", file=sys.stderr)
                return 1
            if np.abs(p.max(axis=-1) - f["probability"][()]).max() > 1e-5:
                print("probability is not the softmax at the class", file=sys.stderr)
                return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
