#!/usr/bin/env python3
"""Reference logits for models/gguf/tiny-main-q4_k_m.gguf (Q4_K, Q5_K, Q6_K and Q8_0 matrices),
computed without twofold, for tests/model/gguf/test_gguf_q4_k_m.cpp: the float32 numpy forward
pass of smollm2_reference.py (ggml's RoPE on the tensors exactly as the file stores them) over
weights dequantized by the `gguf` package (gguf.quants.dequantize), on the prompt ids of
tests/data/golden-tiny-main.json.

  q4_k_m_reference.py GGUF GOLDEN_JSON OUT_DIR   writes OUT_DIR/q4_k_m.json and
                                                 OUT_DIR/<prompt>.logits.f32 (last position)
"""
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import gguf

from smollm2_reference import Model


def main():
    path, golden, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    r = gguf.GGUFReader(str(path))
    types = {}
    for t in r.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    model = Model(r)
    result = {"gguf": str(path.resolve()), "gguf_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
              "tensor_types": types, "prompts": []}
    for p in json.loads(golden.read_text())["prompts"]:
        last = model.logits(p["input_ids"], model.empty_cache()).astype("<f4")
        (out / f"{p['name']}.logits.f32").write_bytes(last.tobytes())
        result["prompts"].append({"name": p["name"], "input_ids": p["input_ids"]})
    (out / "q4_k_m.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
