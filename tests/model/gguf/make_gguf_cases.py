#!/usr/bin/env python3
"""Test data for twofold's GGUF reader and dequantizers, written by the `gguf` Python package
(llama.cpp's own writer and reference dequantizer), so the C++ side is checked against an
independent implementation.

  make_gguf_cases.py reader OUT_DIR    fields.gguf (every metadata type, arrays, strings,
                                       alignment 64, tensors of several types and ranks) and
                                       fields.json: what the file holds, and where the fields
                                       that the mutation tests patch sit in it
  make_gguf_cases.py dequant OUT_DIR   for each type, TYPE.blocks (random blocks) and
                                       TYPE.f32 (gguf.quants.dequantize of them, float32 LE)
  make_gguf_cases.py tokenizers OUT_DIR SOURCE_DIR
                                       NAME.gguf (tokenizer metadata only) from real
                                       tokenizer.json files, written the way llama.cpp's
                                       converter writes them, and NAME.json: texts and the ids
                                       and decoded text the `tokenizers` library gives for them
"""
import json
import lzma
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V


def write_reader_case(out: Path) -> None:
    rng = np.random.default_rng(1234)
    path = out / "fields.gguf"
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_custom_alignment(64)
    scalars = [
        ("test.u8", 200, V.UINT8), ("test.i8", -100, V.INT8), ("test.u16", 60000, V.UINT16),
        ("test.i16", -30000, V.INT16), ("test.u32", 4000000000, V.UINT32), ("test.i32", -2000000000, V.INT32),
        ("test.f32", 0.15625, V.FLOAT32), ("test.bool_true", True, V.BOOL), ("test.bool_false", False, V.BOOL),
        ("test.u64", 18000000000000000000, V.UINT64), ("test.i64", -9000000000000000000, V.INT64),
        ("test.f64", 2.718281828459045, V.FLOAT64),
        ("test.string", "héllo, wörld ▁ <|im_start|>\n", V.STRING), ("test.empty_string", "", V.STRING),
    ]
    for key, val, vt in scalars:
        w.add_key_value(key, val, vt)
    arrays = [
        ("test.arr_u8", [0, 1, 255], V.UINT8), ("test.arr_i16", [-32768, 0, 32767], V.INT16),
        ("test.arr_i32", [-5, 7, 1 << 30], V.INT32), ("test.arr_u64", [0, 1 << 63], V.UINT64),
        ("test.arr_f32", [1.5, -0.25, 3.0e-3], V.FLOAT32), ("test.arr_f64", [1e300, -2.5], V.FLOAT64),
        ("test.arr_bool", [True, False, True], V.BOOL),
        ("test.arr_str", ["a", "", "ünïcødé", "x y"], V.STRING),
    ]
    for key, val, sub in arrays:
        w.add_key_value(key, val, V.ARRAY, sub_type=sub)

    tensors = {
        "t.f32_2d": (rng.standard_normal((3, 5)).astype(np.float32), None),
        "t.f16_1d": (rng.standard_normal(7).astype(np.float16), None),
        "t.f32_3d": (rng.standard_normal((2, 3, 4)).astype(np.float32), None),
        "t.f32_4d": (rng.standard_normal((2, 1, 3, 2)).astype(np.float32), None),
        "t.q8_0": (gguf.quants.quantize(rng.standard_normal((2, 64)).astype(np.float32), Q.Q8_0), Q.Q8_0),
        "t.bf16": (gguf.quants.quantize(rng.standard_normal((4, 8)).astype(np.float32), Q.BF16), Q.BF16),
    }
    for name, (arr, qt) in tensors.items():
        w.add_tensor(name, arr, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # What the file holds, read back by the package's own reader.
    r = gguf.GGUFReader(str(path))
    expect = {"alignment": 64, "version": 3, "metadata": [], "tensors": []}
    for key, val, vt in scalars:
        v = val
        if vt == V.STRING:
            v = list(val.encode("utf-8"))  # bytes, exactly
        expect["metadata"].append({"key": key, "type": int(vt), "value": v})
    for key, val, sub in arrays:
        v = [list(s.encode("utf-8")) for s in val] if sub == V.STRING else val
        expect["metadata"].append({"key": key, "type": int(V.ARRAY), "elem_type": int(sub), "value": v})
    for t in r.tensors:
        f = t.field
        name_len = len(t.name.encode("utf-8"))
        n_dims = len(t.shape)
        info = {
            "name": t.name, "type": int(t.tensor_type), "ne": [int(x) for x in t.shape],
            "offset": int(t.data_offset), "nbytes": int(t.n_bytes),
            "bytes": list(np.asarray(t.data).view(np.uint8).reshape(-1)[:16].tolist()),
            # positions in the file of this tensor info's fields
            "at_n_dims": f.offset + 8 + name_len,
            "at_ne": f.offset + 8 + name_len + 4,
            "at_type": f.offset + 8 + name_len + 4 + 8 * n_dims,
            "at_offset": f.offset + 8 + name_len + 4 + 8 * n_dims + 4,
        }
        expect["tensors"].append(info)
    # keys written by GGUFWriter itself come first
    expect["n_kv"] = len(r.fields) - 3  # GGUF.version, GGUF.tensor_count, GGUF.kv_count are header fields
    expect["first_key_at"] = r.fields["general.architecture"].offset
    expect["data_offset"] = int(r.data_offset)
    expect["size"] = path.stat().st_size
    (out / "fields.json").write_text(json.dumps(expect))


def random_half(rng, n, lo=-4.0, hi=4.0):
    return rng.uniform(lo, hi, n).astype(np.float16).view(np.uint8).reshape(n, 2)


def write_dequant_cases(out: Path) -> None:
    rng = np.random.default_rng(42)
    n_blocks = 64
    cases = {}
    for qt in (Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q5_K, Q.Q6_K):
        block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qt]
        blocks = rng.integers(0, 256, (n_blocks, block_bytes), dtype=np.uint8)
        # Finite f16 scales (random bytes there could be NaN, whose payload is not the point).
        if qt == Q.Q6_K:
            blocks[:, 208:210] = random_half(rng, n_blocks)
        else:
            blocks[:, 0:2] = random_half(rng, n_blocks)
            if qt in (Q.Q4_1, Q.Q4_K, Q.Q5_K):
                blocks[:, 2:4] = random_half(rng, n_blocks)
        cases[qt.name] = (blocks, qt)
    # Dense types: every finite bit pattern class (normal, subnormal, zero, both signs).
    bits = rng.integers(0, 1 << 16, 4096, dtype=np.uint32).astype(np.uint16)
    f16 = bits[(bits & 0x7C00) != 0x7C00]
    bf16 = bits[(bits & 0x7F80) != 0x7F80]
    cases["F16"] = (f16[: (len(f16) // 32) * 32].view(np.uint8).reshape(-1, 64), Q.F16)
    cases["BF16"] = (bf16[: (len(bf16) // 32) * 32].view(np.uint8).reshape(-1, 64), Q.BF16)
    cases["F32"] = (rng.standard_normal(256).astype(np.float32).view(np.uint8).reshape(-1, 128), Q.F32)
    manifest = {}
    for name, (blocks, qt) in cases.items():
        ref = gguf.quants.dequantize(blocks, qt).astype(np.float32).reshape(-1)
        (out / f"{name}.blocks").write_bytes(blocks.tobytes())
        (out / f"{name}.f32").write_bytes(ref.astype("<f4").tobytes())
        manifest[name] = {"elements": int(ref.size)}
    (out / "dequant.json").write_text(json.dumps(manifest))


# Texts beyond each tokenizer's golden cases: digits, special tokens, chat markup.
EXTRA_TEXTS = [
    "In 2024, 3 cats ate 1234567 fish; pi = 3.14159.",
    "<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n<|im_start|>assistant\n",
    "<s>[INST] Hello [/INST] 42</s>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi 99<|eot_id|>",
    "a<|eos|>b  c\n\n d",
    "HTTPServer parseJSON getURLPath /v1/chat/completions?x=1 DON'T don't I'M ÉcoleNormale 12345",
]


def tokenizer_gguf(tok_json: dict, out: Path, name: str, model: str, pre: str | None, add_bos: bool) -> None:
    """Writes the tokenizer of tok_json as llama.cpp's convert_hf_to_gguf.py would: every id up
    to the largest (gaps as UNUSED "[PADn]"), added tokens CONTROL (special) or USER_DEFINED,
    SentencePiece byte tokens BYTE and unk UNKNOWN. A SentencePiece model's scores rank its
    pieces in merge order (Hugging Face's merges were derived from them), so here a piece's
    score is minus the rank of the first merge that makes it; pieces no merge makes (single
    characters) score below all of those; special and byte pieces 0."""
    m = tok_json["model"]
    vocab = dict(m["vocab"])
    pairs = [mm.split(" ") if isinstance(mm, str) else mm for mm in m["merges"]]
    first_rank = {}
    for rank, (left, right) in enumerate(pairs):
        first_rank.setdefault(left + right, rank)
    added = {a["id"]: a for a in tok_json["added_tokens"]}
    for i, a in added.items():
        vocab.setdefault(a["content"], i)
    by_id = {i: t for t, i in vocab.items()}
    n = max(by_id) + 1
    tokens, types, scores = [], [], []
    for i in range(n):
        t = by_id.get(i)
        if t is None:
            tokens.append(f"[PAD{i}]"); types.append(5); scores.append(0.0)
        elif i in added:
            tokens.append(t); types.append(2 if t == m.get("unk_token") else (3 if added[i]["special"] else 4)); scores.append(0.0)
        elif model == "llama" and t.startswith("<0x") and len(t) == 6:
            tokens.append(t); types.append(6); scores.append(0.0)
        else:
            tokens.append(t); types.append(1); scores.append(float(-first_rank.get(t, len(pairs) + i)))
    w = gguf.GGUFWriter(str(out / f"{name}.gguf"), arch="llama")
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if model == "llama":
        w.add_token_scores(scores)
        w.add_unk_token_id(vocab[m["unk_token"]])
        w.add_bos_token_id(vocab["<s>"]); w.add_eos_token_id(vocab["</s>"])
    else:
        w.add_token_merges([" ".join(p) for p in pairs])
    w.add_add_bos_token(add_bos)
    if add_bos and model != "llama":
        w.add_bos_token_id(vocab["<|begin_of_text|>"])
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()


# The Split regexes of Mistral's Tekken and OpenAI's o200k tokenizer.json files.
SPLIT_PATTERNS = {
    "tekken": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?"
              r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|"
              r"\s+(?!\S)|\s+",
    "gpt-4o": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
              r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
              r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}


def write_tokenizer_cases(out: Path, src: Path) -> None:
    from tokenizers import Tokenizer
    data = src / "tests/data/tokenizers"
    cases = [  # name, tokenizer.json, tokenizer.ggml.model, tokenizer.ggml.pre, golden texts
        ("spm-mistral-32k", data / "spm-mistral-32k/tokenizer.json.xz", "llama", None, data / "spm-mistral-32k/golden.json"),
        ("llama3-128k", data / "llama3-128k/tokenizer.json.xz", "gpt2", "llama-bpe", data / "llama3-128k/golden.json"),
        ("qwen3-151k", data / "qwen3-151k/tokenizer.json.xz", "gpt2", "qwen2", data / "qwen3-151k/golden.json"),
        ("tiny-gpt2", src / "models/tiny-main/tokenizer.json", "gpt2", "gpt-2", data / "llama3-128k/golden.json"),
        # Other names for the same rules (DeepSeek-R1's distilled Qwen models), and the split
        # patterns of Mistral's Tekken and of o200k (Phi-4) over Llama 3's vocabulary: the
        # patterns are those of their tokenizer.json files, the flags llama.cpp's for the names.
        ("qwen3-151k-r1", data / "qwen3-151k/tokenizer.json.xz", "gpt2", "deepseek-r1-qwen", data / "qwen3-151k/golden.json"),
        ("llama3-128k-tekken", data / "llama3-128k/tokenizer.json.xz", "gpt2", "tekken", data / "llama3-128k/golden.json"),
        ("llama3-128k-gpt4o", data / "llama3-128k/tokenizer.json.xz", "gpt2", "gpt-4o", data / "llama3-128k/golden.json"),
    ]
    for name, path, model, pre, golden in cases:
        raw = lzma.open(path).read() if path.suffix == ".xz" else path.read_bytes()
        tj = json.loads(raw)
        # What GGUF cannot carry: a normalizer (Qwen3's NFC; llama.cpp applies none for these
        # names). tiny-gpt2 is tiny-main's vocabulary under GPT-2's byte-level split.
        if model == "gpt2":
            tj["normalizer"] = None
        if name == "tiny-gpt2":
            tj["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}
        if pre in SPLIT_PATTERNS:
            tj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": SPLIT_PATTERNS[pre]}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
            tj["model"]["ignore_merges"] = pre == "tekken"
        tok = Tokenizer.from_str(json.dumps(tj))
        # add_bos_token: whether the post-processor puts a token in front
        add_bos = len(tok.encode("x", add_special_tokens=True).ids) > len(tok.encode("x", add_special_tokens=False).ids)
        tokenizer_gguf(tj, out, name, model, pre, add_bos)
        texts = [c["text"] for c in json.loads(golden.read_text())["cases"]] + EXTRA_TEXTS
        ids = [tok.encode(t, add_special_tokens=True).ids for t in texts]
        decoded = [tok.decode(i, skip_special_tokens=False) for i in ids]
        (out / f"{name}.json").write_text(json.dumps({"texts": texts, "ids": ids, "decoded": decoded}))


def main() -> None:
    what, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    if what == "tokenizers":
        write_tokenizer_cases(out, Path(sys.argv[3]))
        return
    {"reader": write_reader_case, "dequant": write_dequant_cases}[what](out)


if __name__ == "__main__":
    main()
