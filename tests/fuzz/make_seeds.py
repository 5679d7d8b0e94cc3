#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz/corpus/<harness>/seed-* from files already in the
repository (bundled models, real tokenizers and chat templates, the Jinja test cases) plus a
few hand-made variants. Deterministic; rerun after changing it:

    python3 tests/fuzz/make_seeds.py

Files named regress-* in the corpus folders are past crash or hang inputs, kept by hand; this
script leaves them alone. Seeds stay small (a few KB each) so the corpus replays take seconds.
"""
import json
import lzma
import os
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fuzz" / "corpus"


def reset(name):
    d = CORPUS / name
    d.mkdir(parents=True, exist_ok=True)
    for f in d.glob("seed-*"):
        f.unlink()
    return d


def write(d, name, data):
    if isinstance(data, str):
        data = data.encode("utf-8")
    (d / f"seed-{name}").write_bytes(data)


# ---- safetensors ------------------------------------------------------------------------


def safetensors(tensors, metadata=None, pad_header_to=8):
    """tensors: list of (name, dtype, shape, raw bytes)."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % pad_header_to)
    return struct.pack("<Q", len(h)) + h + data


def seeds_safetensors():
    d = reset("safetensors")
    f32 = struct.pack("<6f", *range(6))
    bf16 = bytes(range(8))
    write(d, "two-tensors", safetensors([("a.weight", "F32", [2, 3], f32), ("b", "BF16", [4], bf16)],
                                        {"format": "pt"}))
    write(d, "empty-header", safetensors([]))
    write(d, "scalar-and-empty", safetensors([("s", "F32", [], struct.pack("<f", 1.5)), ("e", "F16", [0, 4], b"")]))
    write(d, "all-dtypes", safetensors([(f"t{i}", dt, [2], bytes(2 * sz)) for i, (dt, sz) in
                                        enumerate([("F32", 4), ("F16", 2), ("BF16", 2), ("I8", 1), ("I32", 4),
                                                   ("I64", 8), ("U8", 1)])]))
    write(d, "five-dims", safetensors([("x", "U8", [1, 1, 1, 1, 2], b"\x01\x02")]))
    ok = safetensors([("a", "F32", [2], struct.pack("<2f", 1, 2))])
    write(d, "truncated", ok[:-3])
    write(d, "header-too-long", struct.pack("<Q", 1 << 40) + ok[8:])
    h = b'{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}'
    write(d, "overlap", struct.pack("<Q", len(h)) + h + bytes(6))
    h = b'{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}'
    write(d, "duplicate", struct.pack("<Q", len(h)) + h + bytes(4))
    h = b'{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,16]}}'
    write(d, "shape-overflow", struct.pack("<Q", len(h)) + h + bytes(16))
    h = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}}'
    write(d, "misaligned", struct.pack("<Q", len(h)) + h + bytes(5))


# ---- config.json -------------------------------------------------------------------------


def seeds_config():
    d = reset("config")
    for m in ["tiny-main", "tiny-draft", "parity/llama-mha", "parity/qwen2"]:
        write(d, m.replace("/", "-"), (ROOT / "models" / m / "config.json").read_text())
    base = json.loads((ROOT / "models/tiny-main/config.json").read_text())
    variants = {
        "mistral-window": {"model_type": "mistral", "sliding_window": 512},
        "qwen2-layer-types": {"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 256,
                              "layer_types": ["sliding_attention"] * base["num_hidden_layers"]},
        "qwen2-max-window-layers": {"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 256,
                                    "max_window_layers": 0},
        "rope-llama3": {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
        "rope-parameters": {"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}},
        "head-dim-gqa": {"head_dim": 128, "num_key_value_heads": 1, "eos_token_id": [1, 2]},
        "attention-bias-tied": {"attention_bias": True, "tie_word_embeddings": True, "dtype": "float32"},
        "huge-layers": {"num_hidden_layers": 2147483647},
    }
    for name, v in variants.items():
        write(d, name, json.dumps({**base, **v}, indent=1))
    write(d, "nested", "{\"model_type\": \"llama\", \"x\": " + "[" * 200 + "]" * 200 + "}")


# ---- tokenizer.json ----------------------------------------------------------------------


def shrink(tok, n_merges):
    """A small tokenizer.json with the real one's components: its first n_merges merges, every
    token they use or make, every one-character token below U+0250, every byte-fallback token, and the added
    tokens; ids renumbered densely in their original order."""
    model = tok["model"]
    vocab = model["vocab"]
    merges = model["merges"][:n_merges]
    keep = {t for t in vocab if (len(t) == 1 and ord(t) < 0x250) or (t.startswith("<0x") and len(t) == 6)}
    prefix = model.get("continuing_subword_prefix") or ""
    for m in merges:
        left, right = m.split(" ") if isinstance(m, str) else m
        keep |= {left, right, left + right[len(prefix):] if right.startswith(prefix) else left + right}
    if model.get("unk_token"):
        keep.add(model["unk_token"])
    keep &= set(vocab)
    added = tok.get("added_tokens") or []
    old_ids = sorted({vocab[t] for t in keep} | {a["id"] for a in added})
    new_id = {old: new for new, old in enumerate(old_ids)}
    out = dict(tok)
    out["model"] = dict(model, vocab={t: new_id[vocab[t]] for t in sorted(keep, key=lambda t: vocab[t])},
                        merges=merges)
    out["added_tokens"] = [dict(a, id=new_id[a["id"]]) for a in added]

    def remap(pp):
        if not pp:
            return pp
        pp = json.loads(json.dumps(pp))
        for st in (pp.get("special_tokens") or {}).values():
            st["ids"] = [new_id.get(i, 0) for i in st["ids"]]
        for p in pp.get("processors") or []:
            remap(p)
        return pp
    out["post_processor"] = remap(tok.get("post_processor"))
    return out


def seeds_tokenizer():
    d = reset("tokenizer")
    for name in ["spm-mistral-32k", "llama3-128k", "qwen3-151k"]:
        with lzma.open(ROOT / "tests/data/tokenizers" / name / "tokenizer.json.xz") as f:
            tok = json.load(f)
        small = shrink(tok, 300)
        if name == "llama3-128k":
            small["added_tokens"] = small["added_tokens"][:12]  # 256 reserved tokens add little
        write(d, name + "-small", json.dumps(small, ensure_ascii=False, separators=(",", ":")))
    letters = {chr(ord("a") + i): i for i in range(26)}
    vocab = dict(letters, ab=26, **{"\u0120": 27, "abc": 28, "##c": 29, "<unk>": 30})
    hand = {
        "version": "1.0",
        "added_tokens": [{"id": 31, "content": "<eos>", "special": True, "normalized": False, "lstrip": True,
                          "rstrip": True, "single_word": False},
                         {"id": 32, "content": "xyz", "special": False, "normalized": True, "lstrip": False,
                          "rstrip": False, "single_word": True}],
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"},
                                                           {"type": "Replace", "pattern": {"Regex": "\\s+"},
                                                            "content": " "}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True}]},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "RobertaProcessing", "cls": ["<eos>", 31], "sep": ["<eos>", 31]},
            {"type": "ByteLevel"}]},
        "decoder": {"type": "Sequence", "decoders": [{"type": "ByteLevel"}, {"type": "Strip", "content": " ",
                                                                           "start": 1, "stop": 1}]},
        "model": {"type": "BPE", "vocab": vocab, "merges": [["a", "b"], ["ab", "##c"]], "unk_token": "<unk>",
                  "fuse_unk": True, "continuing_subword_prefix": "##", "ignore_merges": True},
    }
    write(d, "hand-made", json.dumps(hand, ensure_ascii=False, indent=1))
    meta = dict(hand, normalizer={"type": "NFD"},
                pre_tokenizer={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                               "split": True},
                decoder={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always"},
                post_processor={"type": "BertProcessing", "cls": ["<eos>", 31], "sep": ["<eos>", 31]})
    write(d, "metaspace", json.dumps(meta, ensure_ascii=False))


# ---- text for the bundled tokenizer ------------------------------------------------------


def seeds_tokenize():
    d = reset("tokenize")
    texts = {
        "english": "The LORD is my shepherd; I shall not want. It's 3:14pm, isn't it?",
        "specials": "<|bos|>Hello<|eos|><|pad|> <|bos|><|bos|>x<|eos",
        "whitespace": "  leading\t\ttabs\r\n\r\n\n   trailing   \n \u00a0\u2003nbsp",
        "numbers": "1 12 123 1234 12345 3.14159 -42 1e10 0x1F \u0663\u0664",
        "scripts": "日本語のテキスト。한국어 텍스트. Русский текст. العربية. हिन्दी. ελληνικά. עברית",
        "emoji": "\U0001F600\U0001F44D\U0001F3FD \U0001F468\u200D\U0001F469\u200D\U0001F467 \u2764\uFE0F",
        "code": "def f(x):\n    return {'a': [x, x**2]}  # comment\n\nif __name__ == '__main__':\n\tf(3)\n",
        "contractions": "I'M YOU'RE they'll we'd she's it'S don'T",
        "combining": "e\u0301 a\u0308 n\u0303 \u1e9b\u0323 \ufb01 \u2126",
    }
    for name, t in texts.items():
        write(d, name, t)
    write(d, "invalid-utf8", b"ok \xff\xfe \xc3\x28 \xe2\x82 \xf0\x9f\x98 \xed\xa0\x80 \xc0\xaf end\xc3")
    write(d, "nul-and-controls", b"a\x00b\x01\x1b[31mred\x1b[0m\x7f")
    write(d, "empty", b"")


# ---- Jinja chat templates ----------------------------------------------------------------


def seeds_jinja():
    d = reset("jinja")
    for name in ["llama3-128k", "qwen3-151k"]:
        cfg = json.loads((ROOT / "tests/data/tokenizers" / name / "tokenizer_config.json").read_text())
        write(d, "real-" + name, cfg["chat_template"])
    cases = json.loads((ROOT / "tests/chat/jinja_cases.json").read_text())["cases"]
    for i, c in enumerate(cases):
        write(d, f"case-{i:03d}", c["template"])
    write(d, "chatml",
          "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
          "{% endif %}")


if __name__ == "__main__":
    seeds_safetensors()
    seeds_config()
    seeds_tokenizer()
    seeds_tokenize()
    seeds_jinja()
    for sub in sorted(CORPUS.iterdir()):
        files = list(sub.iterdir())
        print(f"{sub.name}: {len(files)} files, {sum(f.stat().st_size for f in files)} bytes")
