#!/usr/bin/env python3
"""Writes a Llama-architecture GGUF of a given shape with random F16 weights, for speed
comparisons with llama.cpp on shapes that have no trained checkpoint (bench/cpu_vs_llamacpp.sh).

The tokenizer and the non-shape metadata are copied from an existing GGUF (--like), so the
vocabulary must match its size (tiny-main's 8192 tokens for the 1B shape of issue 17).
Weights are N(0, 0.02^2) in F16, norms 1.0 in F32, as a freshly initialised model; speed does
not depend on the values.

  python3 bench/gguf_random_llama.py --like models/gguf/tiny-main-f16.gguf \\
      --hidden 2048 --ffn 8192 --layers 16 --heads 32 --kv-heads 8 --head-dim 64 -o llama1b-f16.gguf

Needs the `gguf` and `numpy` packages (pip install gguf).
"""
import argparse
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("gguf_random_llama.py: needs the gguf package (pip install gguf)")

SHAPE_KEYS = ("block_count", "embedding_length", "feed_forward_length", "attention.head_count",
              "attention.head_count_kv", "attention.key_length", "attention.value_length",
              "rope.dimension_count", "vocab_size", "context_length")


def copy_metadata(reader, writer):
    """Copies tokenizer and general fields of `reader` except the architecture's shape."""
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type"):
            continue
        if key.startswith("llama.") and key[len("llama."):] in SHAPE_KEYS:
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, field.contents())
        elif vtype == gguf.GGUFValueType.STRING:
            writer.add_string(key, field.contents())
        else:
            writer.add_key_value(key, field.contents(), vtype)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--like", required=True, help="GGUF whose tokenizer and metadata to copy")
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--ffn", type=int, required=True)
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--kv-heads", type=int, required=True)
    p.add_argument("--head-dim", type=int, required=True)
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--out", required=True)
    a = p.parse_args()

    reader = gguf.GGUFReader(a.like)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    w = gguf.GGUFWriter(a.out, "llama")
    copy_metadata(reader, w)
    w.add_block_count(a.layers)
    w.add_context_length(a.context)
    w.add_embedding_length(a.hidden)
    w.add_feed_forward_length(a.ffn)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_key_length(a.head_dim)
    w.add_value_length(a.head_dim)
    w.add_rope_dimension_count(a.head_dim)
    w.add_vocab_size(n_vocab)

    rng = np.random.default_rng(a.seed)

    def rand(rows, cols):  # numpy [rows, cols] = GGUF ne [cols, rows], a [out, in] matrix
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
    w.add_tensor("token_embd.weight", rand(n_vocab, a.hidden))
    w.add_tensor("output_norm.weight", np.ones(a.hidden, dtype=np.float32))
    w.add_tensor("output.weight", rand(n_vocab, a.hidden))
    for il in range(a.layers):
        b = f"blk.{il}."
        w.add_tensor(b + "attn_norm.weight", np.ones(a.hidden, dtype=np.float32))
        w.add_tensor(b + "attn_q.weight", rand(q, a.hidden))
        w.add_tensor(b + "attn_k.weight", rand(kv, a.hidden))
        w.add_tensor(b + "attn_v.weight", rand(kv, a.hidden))
        w.add_tensor(b + "attn_output.weight", rand(a.hidden, q))
        w.add_tensor(b + "ffn_norm.weight", np.ones(a.hidden, dtype=np.float32))
        w.add_tensor(b + "ffn_gate.weight", rand(a.ffn, a.hidden))
        w.add_tensor(b + "ffn_up.weight", rand(a.ffn, a.hidden))
        w.add_tensor(b + "ffn_down.weight", rand(a.hidden, a.ffn))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=True)
    w.close()
    print(f"wrote {a.out}: {a.layers} layers, hidden {a.hidden}, ffn {a.ffn}, heads {a.heads}/{a.kv_heads} x "
          f"{a.head_dim}, vocab {n_vocab}")


if __name__ == "__main__":
    main()
