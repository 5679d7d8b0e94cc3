#!/usr/bin/env python3
"""Checks that no span of N consecutive tokens (32 by default) of a calibration text occurs in
the held-out validation tokens, so that calibrating on the text cannot leak the split that
judges a quantized or pruned model (models/README.md, "Perplexity").

    scripts/check_calib_overlap.py models/calib/man-pages.txt [--span 32]
        [--tokens tests/data/valid_tokens_65536.bin] [--model models/tiny-main] [--twofold build/tools/twofold]

The text is tokenized by `twofold tokenize` (the model's tokenizer, nothing added); the
validation file is little-endian uint16 ids. Prints the count of the text's spans found in the
validation tokens and exits 1 when there is any (with the first few, decoded positions)."""
import argparse
import array
import json
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("text")
    ap.add_argument("--span", type=int, default=32)
    ap.add_argument("--tokens", default="tests/data/valid_tokens_65536.bin")
    ap.add_argument("--model", default="models/tiny-main")
    ap.add_argument("--twofold", default="build/tools/twofold")
    a = ap.parse_args()
    with open(a.text, "rb") as f:
        text = f.read()
    out = subprocess.run([a.twofold, "tokenize", "-m", a.model, "-p", "-", "--no-special"], input=text,
                         capture_output=True, check=True)
    ids = json.loads(out.stdout)["ids"]
    valid = array.array("H")
    with open(a.tokens, "rb") as f:
        valid.frombytes(f.read())
    if sys.byteorder != "little":
        valid.byteswap()
    n = a.span
    spans = {tuple(valid[i:i + n]) for i in range(len(valid) - n + 1)}
    hits = [i for i in range(len(ids) - n + 1) if tuple(ids[i:i + n]) in spans]
    print(f"{a.text}: {len(ids)} tokens, {max(len(ids) - n + 1, 0)} spans of {n}; "
          f"{len(hits)} found in {a.tokens} ({len(valid)} tokens)")
    if hits:
        print("first at token positions:", hits[:10])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
