#!/usr/bin/env python3
"""Seeds for fuzz_gguf (tests/fuzz/corpus/gguf), written by the `gguf` Python package:
small valid GGUF files that reach every part of the loader.

  tiny-llama-q.gguf   a 1-layer llama (d_model 32) with a byte-level BPE tokenizer (gpt2,
                      smollm), Q8_0 / Q4_0 / Q4_1 / F16 / F32 tensors, no output.weight (tied)
  tiny-qwen2-spm.gguf a 1-layer qwen2 with biases and a SentencePiece tokenizer (llama)
  kquants.gguf        Q4_K, Q5_K and Q6_K rows under llama names, no tokenizer
  tiny-qwen3moe.gguf  a 1-layer qwen3moe: q/k norms, 4 experts stacked in Q8_0 ffn_*_exps
  tiny-gemma3.gguf    a 2-layer gemma3: sandwich norms, window period 2, linear RoPE scaling
  tiny-llama-rope.gguf  a 1-layer llama with a rope_freqs tensor (Llama 3.1's scaling)

  make_gguf_seeds.py OUT_DIR
"""
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

rng = np.random.default_rng(7)


def mat(rows, cols):
    return rng.standard_normal((rows, cols)).astype(np.float32) * 0.1


def llama_keys(w, arch, d, ff, heads, kv, vocab, layers=1):
    w.add_block_count(layers)
    w.add_context_length(64)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(vocab)


def layer(w, d, ff, hd, heads, kv, qt, bias=False):
    for name, (r, c) in {"attn_q": (heads * hd, d), "attn_k": (kv * hd, d), "attn_v": (kv * hd, d),
                         "attn_output": (d, heads * hd), "ffn_gate": (ff, d), "ffn_up": (ff, d),
                         "ffn_down": (d, ff)}.items():
        w.add_tensor(f"blk.0.{name}.weight", gguf.quants.quantize(mat(r, c), qt), raw_dtype=qt)
    if bias:
        for name, n in {"attn_q": heads * hd, "attn_k": kv * hd, "attn_v": kv * hd}.items():
            w.add_tensor(f"blk.0.{name}.bias", rng.standard_normal(n).astype(np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(d, dtype=np.float32))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(d, dtype=np.float16))


def finish(w):
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()


def main():
    out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
    # Byte-level BPE: the 256 byte symbols, a few merges, two special tokens.
    byte_chars = [chr(c) for c in range(ord("!"), ord("~") + 1)] + ["Ġ", "Ċ"]
    tokens = ["<|endoftext|>", "<|im_start|>"] + byte_chars + ["He", "ll", "Hell", "Hello", "Ġw"]
    merges = ["H e", "l l", "He ll", "Hell o", "Ġ w"]
    vocab = len(tokens)
    w = gguf.GGUFWriter(str(out / "tiny-llama-q.gguf"), arch="llama")
    llama_keys(w, "llama", 32, 64, 4, 2, vocab)
    w.add_tokenizer_model("gpt2"); w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens); w.add_token_types([3, 3] + [1] * (vocab - 2)); w.add_token_merges(merges)
    w.add_bos_token_id(0); w.add_eos_token_id(0); w.add_add_bos_token(False)
    w.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    w.add_tensor("token_embd.weight", gguf.quants.quantize(mat(vocab, 32), Q.Q8_0), raw_dtype=Q.Q8_0)
    w.add_tensor("output_norm.weight", np.ones(32, dtype=np.float32))
    layer(w, 32, 64, 8, 4, 2, Q.Q4_0)
    finish(w)

    spm = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["▁", "a", "b", "▁a", "ab", "▁ab"]
    w = gguf.GGUFWriter(str(out / "tiny-qwen2-spm.gguf"), arch="qwen2")
    llama_keys(w, "qwen2", 32, 64, 2, 1, len(spm))
    w.add_tokenizer_model("llama")
    w.add_token_list(spm); w.add_token_scores([0.0] * 259 + [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * 6)
    w.add_bos_token_id(1); w.add_eos_token_id(2); w.add_unk_token_id(0)
    w.add_tensor("token_embd.weight", mat(len(spm), 32).astype(np.float16))
    w.add_tensor("output.weight", gguf.quants.quantize(mat(len(spm), 32), Q.Q4_1), raw_dtype=Q.Q4_1)
    w.add_tensor("output_norm.weight", np.ones(32, dtype=np.float32))
    layer(w, 32, 64, 16, 2, 1, Q.Q8_0, bias=True)
    finish(w)

    w = gguf.GGUFWriter(str(out / "kquants.gguf"), arch="llama")
    for qt, name in ((Q.Q4_K, "blk.0.ffn_gate.weight"), (Q.Q5_K, "blk.0.ffn_up.weight"), (Q.Q6_K, "output.weight")):
        blocks = rng.integers(0, 256, (2, gguf.GGML_QUANT_SIZES[qt][1]), dtype=np.uint8)
        w.add_tensor(name, blocks, raw_dtype=qt)  # two rows of one 256-element block
    finish(w)

    # The other architectures' tensors and keys (no tokenizer: the loader's config and weights).
    w = gguf.GGUFWriter(str(out / "tiny-qwen3moe.gguf"), arch="qwen3moe")
    llama_keys(w, "qwen3moe", 32, 64, 4, 2, 16)
    w.add_key_length(8); w.add_value_length(8)
    w.add_expert_count(4); w.add_expert_used_count(2); w.add_expert_feed_forward_length(32)
    for name, (r, c) in {"attn_q": (32, 32), "attn_k": (16, 32), "attn_v": (16, 32), "attn_output": (32, 32),
                         "ffn_gate_inp": (4, 32)}.items():
        w.add_tensor(f"blk.0.{name}.weight", mat(r, c))
    for name, (r, c) in {"ffn_gate_exps": (32, 32), "ffn_up_exps": (32, 32), "ffn_down_exps": (32, 32)}.items():
        stacked = np.stack([gguf.quants.quantize(mat(r, c), Q.Q8_0) for _ in range(4)])
        w.add_tensor(f"blk.0.{name}.weight", stacked, raw_dtype=Q.Q8_0)
    for name, n in {"attn_norm": 32, "ffn_norm": 32, "attn_q_norm": 8, "attn_k_norm": 8}.items():
        w.add_tensor(f"blk.0.{name}.weight", np.ones(n, dtype=np.float32))
    w.add_tensor("token_embd.weight", mat(16, 32))
    w.add_tensor("output_norm.weight", np.ones(32, dtype=np.float32))
    finish(w)

    w = gguf.GGUFWriter(str(out / "tiny-gemma3.gguf"), arch="gemma3")
    llama_keys(w, "gemma3", 32, 64, 2, 1, 16, layers=2)
    w.add_key_length(16); w.add_value_length(16)
    w.add_sliding_window(4); w.add_sliding_window_pattern(2)
    w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR); w.add_rope_scaling_factor(8.0)
    for il in range(2):
        for name, (r, c) in {"attn_q": (32, 32), "attn_k": (16, 32), "attn_v": (16, 32), "attn_output": (32, 32),
                             "ffn_gate": (64, 32), "ffn_up": (64, 32), "ffn_down": (32, 64)}.items():
            w.add_tensor(f"blk.{il}.{name}.weight", mat(r, c).astype(np.float16))
        for name, n in {"attn_norm": 32, "post_attention_norm": 32, "ffn_norm": 32, "post_ffw_norm": 32,
                        "attn_q_norm": 16, "attn_k_norm": 16}.items():
            w.add_tensor(f"blk.{il}.{name}.weight", np.ones(n, dtype=np.float32))
    w.add_tensor("token_embd.weight", mat(16, 32))
    w.add_tensor("output_norm.weight", np.ones(32, dtype=np.float32))
    finish(w)

    w = gguf.GGUFWriter(str(out / "tiny-llama-rope.gguf"), arch="llama")
    llama_keys(w, "llama", 32, 64, 4, 2, 16)
    w.add_tensor("rope_freqs.weight", np.array([1.0, 1.5, 4.0, 4.0], dtype=np.float32))
    w.add_tensor("token_embd.weight", mat(16, 32))
    w.add_tensor("output_norm.weight", np.ones(32, dtype=np.float32))
    layer(w, 32, 64, 8, 4, 2, Q.Q8_0)
    finish(w)


if __name__ == "__main__":
    main()
