#!/usr/bin/env python3
"""Writes fp8_e4m3.json, the independent reference test_fp8.cpp checks tf's E4M3 codec
against: ml_dtypes' float8_e4m3fn (the type JAX and numpy users share), not our code.

    pip install ml_dtypes && python3 tests/quant/make_fp8_table.py

decode: the float32 bit pattern (hex) of each of the 256 bytes, or "nan".
encode: [float32 bits (hex), byte] pairs for inputs of magnitude below 464, where
ml_dtypes and a saturating encoder agree (from 464 up ml_dtypes gives NaN, tf gives +-448;
test_fp8.cpp checks that part against the spec): every code value, every midpoint between
neighbouring codes (exact ties: round half to even) and the floats one ulp either side of
it, and log-uniform random values of both signs from 2^-12 to 464.
"""

import json
import os
import random

import ml_dtypes
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def bits(x):
    return "%08x" % int(np.array(x, dtype=np.float32).view(np.uint32))


def main():
    e4m3 = ml_dtypes.float8_e4m3fn
    codes = np.arange(256, dtype=np.uint8).view(e4m3).astype(np.float32)
    decode = ["nan" if np.isnan(v) else bits(v) for v in codes]

    inputs = [float(v) for v in codes if not np.isnan(v)]
    positive = sorted({v for v in inputs if v > 0})
    for a, b in zip(positive, positive[1:]):
        mid = np.float32((a + b) / 2)  # exact: neighbouring codes differ in few bits
        inputs += [float(mid), float(np.nextafter(mid, np.float32(0))), float(np.nextafter(mid, np.float32(np.inf)))]
    rng = random.Random(1234)
    for _ in range(4000):
        v = 2.0 ** rng.uniform(-12, np.log2(463.9))
        inputs.append(v if rng.random() < 0.5 else -v)
    inputs += [float(np.float32(463.99)), 2.0**-10, 2.0**-10 * 3, 2.0**-11, 1e-30, 0.0, -0.0]
    encode = []
    for v in inputs:
        f = np.float32(v)
        if abs(f) >= 464:
            continue
        byte = int(np.array(f).astype(e4m3).view(np.uint8))
        encode.append([bits(f), byte])

    out = {"source": "ml_dtypes %s float8_e4m3fn" % ml_dtypes.__version__, "decode": decode, "encode": encode}
    with open(os.path.join(HERE, "fp8_e4m3.json"), "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print("wrote %d decode and %d encode entries" % (len(decode), len(encode)))


if __name__ == "__main__":
    main()
