#!/usr/bin/env python3
"""Phi-3's fused checkpoint tensors (qkv_proj, gate_up_proj) against the same weights split.

  python3 bench/phi3_fused_vs_split.py make DIR       a random Phi-3 checkpoint (BF16) of a larger
                                                      shape: hidden 3072, ffn 8192, 32 heads, 4 layers
  python3 bench/phi3_fused_vs_split.py split SRC DST  SRC's weights in Llama's split layout (q/k/v_proj,
                                                      gate/up_proj) as model_type "llama"
                                                      (partial_rotary_factor is a shared RoPE field)

The two folders compute the same function (`twofold logits` on both: bitwise equal), so
`twofold logits` / `twofold bench` on each measure only the layout: loaded as is, the fused
tensors are read in place; split, the loader concatenates q|k|v and gate|up into a copy.
docs/PERF.md has the figures.
"""
import json, os, shutil, struct, sys

import numpy as np

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write(path, tensors):  # name -> (dtype, shape, bytes)
    hdr, off = {}, 0
    for k, (dt, sh, b) in tensors.items():
        hdr[k] = {"dtype": dt, "shape": sh, "data_offsets": [off, off + len(b)]}
        off += len(b)
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, (_, _, b) in tensors.items():
            f.write(b)


def make(dst):
    os.makedirs(dst, exist_ok=True)
    d, ff, H, L, V = 3072, 8192, 32, 4, 32064
    cfg = json.load(open(here + "/models/parity/phi3/config.json"))
    cfg.update(hidden_size=d, intermediate_size=ff, num_attention_heads=H, num_key_value_heads=H, num_hidden_layers=L,
               vocab_size=V, max_position_embeddings=4096, original_max_position_embeddings=4096, dtype="bfloat16")
    json.dump(cfg, open(dst + "/config.json", "w"), indent=1)
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(here + "/models/parity/phi3/" + f, dst)
    rng = np.random.default_rng(0)
    def bf(shape, scale):
        a = (rng.standard_normal(shape, dtype=np.float32) * scale).view(np.uint32)
        return ((a + 0x7FFF + ((a >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
    t = {"model.embed_tokens.weight": ([V, d], 0.02), "lm_head.weight": ([V, d], 0.02), "model.norm.weight": ([d], None)}
    for i in range(L):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = ([d], None); t[p + "post_attention_layernorm.weight"] = ([d], None)
        t[p + "self_attn.qkv_proj.weight"] = ([3 * d, d], 0.02); t[p + "self_attn.o_proj.weight"] = ([d, d], 0.02)
        t[p + "mlp.gate_up_proj.weight"] = ([2 * ff, d], 0.02); t[p + "mlp.down_proj.weight"] = ([d, ff], 0.02)
    out = {}
    for k, (sh, sc) in t.items():
        b = np.full(sh, 0x3F80, np.uint16).tobytes() if sc is None else bf(sh, sc)
        out[k] = ("BF16", sh, b)
    write(dst + "/model.safetensors", out)


def split(src, dst):
    cfg = json.load(open(src + "/config.json"))
    hdr, body = read(src + "/model.safetensors")
    H, KV, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["hidden_size"]
    hd = cfg.get("head_dim") or d // H; ff = cfg["intermediate_size"]
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__": continue
        b0, b1 = v["data_offsets"]; data = body[b0:b1]; es = 4 if v["dtype"] == "F32" else 2
        row = v["shape"][-1] * es
        if k.endswith("qkv_proj.weight"):
            p = k.replace("qkv_proj", "{}")
            q, kk = H * hd * row, KV * hd * row
            out[p.format("q_proj")] = (v["dtype"], [H * hd, v["shape"][1]], data[:q])
            out[p.format("k_proj")] = (v["dtype"], [KV * hd, v["shape"][1]], data[q:q + kk])
            out[p.format("v_proj")] = (v["dtype"], [KV * hd, v["shape"][1]], data[q + kk:])
        elif k.endswith("gate_up_proj.weight"):
            p = k.replace("gate_up_proj", "{}"); half = ff * row
            out[p.format("gate_proj")] = (v["dtype"], [ff, v["shape"][1]], data[:half])
            out[p.format("up_proj")] = (v["dtype"], [ff, v["shape"][1]], data[half:])
        else:
            out[k] = (v["dtype"], v["shape"], data)
    os.makedirs(dst, exist_ok=True)
    for f in os.listdir(src):
        if f not in ("model.safetensors", "config.json"): shutil.copy(src + "/" + f, dst)
    cfg["model_type"] = "llama"; cfg["architectures"] = ["LlamaForCausalLM"]
    json.dump(cfg, open(dst + "/config.json", "w"), indent=1)
    write(dst + "/model.safetensors", out)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "split":
        split(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
