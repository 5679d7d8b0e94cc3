#!/usr/bin/env python3
"""Reference cases for twofold's Hugging Face tokenizer components, made by the `tokenizers`
library itself (pip install tokenizers).

For each configuration below (a normalizer, a pre-tokenizer, a decoder and sometimes a
post-processor), a small BPE vocabulary is trained on CORPUS with that same pipeline, so that
its merges fit what the pre-tokenizer produces; characters the vocabulary lacks fall back to
<0xNN> byte tokens (or, for byte-level pre-tokenizers, every byte has its character). The
tokenizer is saved as OUT_DIR/NAME/tokenizer.json and TEXTS are encoded with it, with and
without special tokens; the ids and a few random id sequences are decoded, with and without
special tokens. Everything goes to OUT_DIR/cases.json:

  {"tokenizers_version": "...",
   "configs": {NAME: {"encode": [{"text", "ids", "ids_plain", "decoded", "decoded_skip"}],
                      "decode": [{"ids", "decoded", "decoded_skip"}]}}}

test_tokenizer_components.cpp loads each tokenizer.json with twofold and checks that every
id and every decoded string is identical.

Usage: make_component_cases.py OUT_DIR
"""
import json
import os
import random
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

# Text the vocabularies are trained on: words, numbers, punctuation and a little non-Latin
# script, so that the merges are real but many test characters stay outside the vocabulary.
CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs!",
    "In 2024, 1,234 people paid $56.78 each (about 12% more than in 2023).",
    "Hello world, hello there. How's it going? I'm fine, we've been well, they'll come.",
    "snake_case, kebab-case and CamelCase names: foo_bar, foo-bar, FooBar...",
    "  indented line\twith a tab\nand a second line\r\nand a third   ",
    "café, naïve, résumé, Straße, İstanbul, ΣΑΣ, Ελληνικά, русский текст",
    "中文字符和日本語のテキスト、한국어 텍스트。",
    "<b>bold</b> [link](url) {key: value} a+b=c; x^2 | y~z @home #tag `code`",
    "numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000 3.14159 2.71828 42",
    "the the the and and of of to to in in is is it it that that",
] * 3

# Strings every configuration encodes: empty, spaces, digits of several scripts, numerals that
# are not digits, accents (composed and combining), compatibility forms, case mappings with
# no 1:1 answer, emoji with modifiers and joiners, control whitespace, CJK, the added tokens.
TEXTS = [
    "",
    " ",
    "   ",
    "Hello world",
    "  two leading spaces",
    "trailing spaces   ",
    "Hello, world! How's it going?",
    "a--b...c!!?(x)[y]{z}",
    "$100 + 20% = <tag> ^_^ `code` | ~tilde @me #1",
    "1234567890",
    "x2y3 4.5e10 3,141 -7",
    "\u0663\u0664\u0665 \u0661\u0662 \u07c1\u07c2",
    "\u00b2\u00b3\u00bc \u216b \u2177 \u2460",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9",
    "e\u0301 a\u0308 combining\u0327",
    "\ufb01ne \uff21\uff22\uff23 \uff11\uff12\uff13 \u338f",
    "\u0130stanbul \u03a3\u0391\u03a3 \u1f48\u0394\u03a5\u03a3\u03a3\u0395\u038e\u03a3 Stra\u00dfe",
    "emoji \U0001F600\U0001F44D\U0001F3FD family \U0001F468\u200d\U0001F469\u200d\U0001F467",
    "tabs\tand\nnew\nlines\r\nend\n",
    "\u00a0nbsp\u2003em\u3000ideo\u0085nel",
    "\u4e2d\u6587\u5b57\u7b26\uff0c\u6d4b\u8bd5\u3002\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "don't I'll we've they're",
    "snake_case and kebab-case and CamelCase",
    "<|im_start|>user\nHello 123<|im_end|>\n<|im_start|>assistant\n",
    "x<|im_end|>y <|im_start|>",
    "Say Hello World twice: hello world",
    "\u200dzwj\u200c \u203fconnector\u2040 \u00abquotes\u00bb \u201eGerman\u201c \u2014dash\u2013 \u2026",
    "mixed123abc456",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "the quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!",
]

SPECIAL = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
# A non-special added token, matched in normalized text.
ADDED_NORMALIZED = "hello world"

bytes_fallback = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
bos_template = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])


def cfg(pre=None, norm=None, dec=None, post=None, byte_level_model=False, suffix=None):
    return dict(pre=pre, norm=norm, dec=dec, post=post, byte_level_model=byte_level_model, suffix=suffix)


def behaviors():
    return ["removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"]


CONFIGS = {
    # Pre-tokenizers.
    "digits_individual": cfg(pre=pre_tokenizers.Digits(individual_digits=True), dec=bytes_fallback),
    "digits_contiguous": cfg(pre=pre_tokenizers.Digits(individual_digits=False), dec=bytes_fallback),
    # SmolLM2's own pipeline: digits one by one, then GPT-2's byte-level split; ByteLevel
    # post-processor and decoder.
    "smollm2_style": cfg(pre=pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level]),
                         dec=decoders.ByteLevel(), post=processors.ByteLevel(trim_offsets=True),
                         byte_level_model=True),
    "whitespace": cfg(pre=pre_tokenizers.Whitespace()),  # no decoder: HF joins tokens with spaces
    "whitespace_split": cfg(pre=pre_tokenizers.WhitespaceSplit(), dec=decoders.BPEDecoder(suffix="</w>"), suffix="</w>"),
    "bert_pre_tokenizer": cfg(pre=pre_tokenizers.BertPreTokenizer(), dec=bytes_fallback),
    "char_delimiter_split": cfg(pre=pre_tokenizers.CharDelimiterSplit("-"), dec=bytes_fallback),
    "char_delimiter_split_space": cfg(pre=pre_tokenizers.CharDelimiterSplit(" ")),
    "bytelevel_prefix_space": cfg(pre=pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
                                  dec=decoders.ByteLevel(), byte_level_model=True),
    "bytelevel_no_regex": cfg(pre=pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
                              dec=decoders.ByteLevel(), byte_level_model=True),
    "bytelevel_prefix_no_regex": cfg(pre=pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False),
                                     dec=decoders.ByteLevel(), byte_level_model=True),
    "sequence_whitespace_digits_punct": cfg(
        pre=pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Digits(individual_digits=False),
                                     pre_tokenizers.Punctuation(behavior="contiguous")]),
        dec=bytes_fallback),
    # Normalizers (over the byte-level pipeline, so that every character has tokens).
    "nfc": cfg(norm=normalizers.NFC(), pre=byte_level, dec=decoders.ByteLevel(), byte_level_model=True),
    "nfd": cfg(norm=normalizers.NFD(), pre=byte_level, dec=decoders.ByteLevel(), byte_level_model=True),
    "nfkc": cfg(norm=normalizers.NFKC(), pre=byte_level, dec=decoders.ByteLevel(), byte_level_model=True),
    "nfkd": cfg(norm=normalizers.NFKD(), pre=byte_level, dec=decoders.ByteLevel(), byte_level_model=True),
    "lowercase": cfg(norm=normalizers.Lowercase(), pre=byte_level, dec=decoders.ByteLevel(), byte_level_model=True),
    "strip_both": cfg(norm=normalizers.Strip(), pre=byte_level, dec=decoders.ByteLevel(), byte_level_model=True),
    "strip_left": cfg(norm=normalizers.Strip(left=True, right=False), pre=byte_level, dec=decoders.ByteLevel(),
                      byte_level_model=True),
    "strip_right": cfg(norm=normalizers.Strip(left=False, right=True), pre=byte_level, dec=decoders.ByteLevel(),
                       byte_level_model=True),
    "strip_accents": cfg(norm=normalizers.Sequence([normalizers.NFKD(), normalizers.StripAccents()]), pre=byte_level,
                         dec=decoders.ByteLevel(), byte_level_model=True),
    "replace_regex": cfg(norm=normalizers.Replace(Regex(r"\s+"), " "), pre=byte_level, dec=decoders.ByteLevel(),
                         byte_level_model=True),
    "normalizer_sequence": cfg(
        norm=normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(), normalizers.Strip(),
                                   normalizers.Replace(Regex(r"[0-9]"), "#"), normalizers.Replace("!", ".")]),
        pre=byte_level, dec=decoders.ByteLevel(), byte_level_model=True),
    # Llama-2's pipeline: no pre-tokenizer, spaces made "▁" by normalizers, byte fallback, and
    # a decoder chain undoing it.
    "llama2_style": cfg(
        norm=normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]),
        dec=decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                               decoders.Strip(" ", 1, 0)]),
        post=bos_template),
    "prepend_strip_decoder": cfg(norm=normalizers.Prepend("@@"), pre=pre_tokenizers.WhitespaceSplit(),
                                 dec=decoders.Sequence([decoders.ByteFallback(), decoders.Strip("@", 2, 0),
                                                        decoders.Fuse()])),
    "replace_regex_decoder": cfg(pre=pre_tokenizers.Whitespace(),
                                 dec=decoders.Sequence([decoders.Replace(Regex(r"[aeiou]"), "*"),
                                                        decoders.ByteFallback(), decoders.Fuse()])),
}

for scheme in ["always", "first", "never"]:
    for split in [True, False]:
        CONFIGS[f"metaspace_{scheme}{'' if split else '_nosplit'}"] = cfg(
            pre=pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme, split=split),
            dec=decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(replacement="\u2581",
                                                                               prepend_scheme=scheme)]),
            post=bos_template if scheme == "first" else None)
CONFIGS["metaspace_custom_replacement"] = cfg(
    pre=pre_tokenizers.Metaspace(replacement="\u00b7", prepend_scheme="always", split=True),
    dec=decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(replacement="\u00b7", prepend_scheme="always")]))
for b in behaviors():
    CONFIGS[f"punctuation_{b}"] = cfg(pre=pre_tokenizers.Punctuation(behavior=b), dec=bytes_fallback)
    CONFIGS[f"split_string_{b}"] = cfg(pre=pre_tokenizers.Split(" ", behavior=b), dec=bytes_fallback)
    CONFIGS[f"split_string_{b}_invert"] = cfg(pre=pre_tokenizers.Split("o", behavior=b, invert=True),
                                              dec=bytes_fallback)
    CONFIGS[f"split_regex_{b}"] = cfg(pre=pre_tokenizers.Split(Regex(r"\s+|\p{N}"), behavior=b), dec=bytes_fallback)
    CONFIGS[f"split_regex_{b}_invert"] = cfg(pre=pre_tokenizers.Split(Regex(r"\p{L}+"), behavior=b, invert=True),
                                             dec=bytes_fallback)


def build(c):
    """Trains the BPE vocabulary for configuration c and returns the tokenizer."""
    suffix = c["suffix"]
    suffix_args = {"end_of_word_suffix": suffix} if suffix else {}
    tok = Tokenizer(models.BPE(unk_token="<unk>", **suffix_args))
    if c["norm"] is not None:
        tok.normalizer = c["norm"]
    if c["pre"] is not None:
        tok.pre_tokenizer = c["pre"]
    alphabet = pre_tokenizers.ByteLevel.alphabet() if c["byte_level_model"] else []
    trainer = trainers.BpeTrainer(vocab_size=400 if not c["byte_level_model"] else 600, min_frequency=2,
                                  special_tokens=SPECIAL, initial_alphabet=alphabet, show_progress=False,
                                  **suffix_args)
    tok.train_from_iterator(CORPUS, trainer)
    j = json.loads(tok.to_str())
    if not c["byte_level_model"]:
        # Every byte gets a <0xNN> token, so characters outside the vocabulary fall back to bytes.
        vocab = j["model"]["vocab"]
        for b in range(256):
            name = "<0x%02X>" % b
            if name not in vocab:
                vocab[name] = len(vocab)
        j["model"]["byte_fallback"] = True
    tok = Tokenizer.from_str(json.dumps(j))
    tok.add_tokens([AddedToken(ADDED_NORMALIZED, normalized=True, special=False)])
    if c["dec"] is not None:
        tok.decoder = c["dec"]
    if c["post"] is not None:
        tok.post_processor = c["post"]
    return tok


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    rng = random.Random(1234)
    result = {"tokenizers_version": __import__("tokenizers").__version__, "configs": {}}
    for name, c in CONFIGS.items():
        tok = build(c)
        os.makedirs(os.path.join(out_dir, name), exist_ok=True)
        tok.save(os.path.join(out_dir, name, "tokenizer.json"))
        # Reload what was written: the file is what twofold reads.
        tok = Tokenizer.from_file(os.path.join(out_dir, name, "tokenizer.json"))
        encode = []
        for text in TEXTS:
            ids = tok.encode(text, add_special_tokens=True).ids
            encode.append({"text": text, "ids": ids,
                           "ids_plain": tok.encode(text, add_special_tokens=False).ids,
                           "decoded": tok.decode(ids, skip_special_tokens=False),
                           "decoded_skip": tok.decode(ids, skip_special_tokens=True)})
        decode = []
        n_vocab = tok.get_vocab_size(with_added_tokens=True)
        for _ in range(6):
            ids = [rng.randrange(n_vocab) for _ in range(rng.randrange(1, 16))]
            decode.append({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                           "decoded_skip": tok.decode(ids, skip_special_tokens=True)})
        result["configs"][name] = {"encode": encode, "decode": decode}
    with open(os.path.join(out_dir, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=0)


if __name__ == "__main__":
    main()
