#!/usr/bin/env python3
"""Writes a calibration text drawn from tiny-main's training split (models/README.md,
"Calibration text from the training split"): from each source of the corpus, a share of the
characters proportional to that source's size in the split, taken as the first paragraphs
(about 2,000 characters) of pieces spaced evenly through the source; the excerpts shuffled
with a fixed seed and joined.

    scripts/make_calib_train_sample.py CORPUS/train.jsonl models/calib/train-sample.txt [--chars 260000]

CORPUS/train.jsonl is the training split that scripts/build_corpus.py writes from the
Debian 12 packages (sha256 1c1e4831...): it holds none of the validation split's pieces.
Check the result with scripts/check_calib_overlap.py."""
import argparse
import collections
import hashlib
import json
import random

TRAIN_SHA256 = "1c1e4831fd11b1f8d4fc7fed0bac04901fa9fec3020fd6afc6e6d1f8891a38dc"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("train_jsonl")
    ap.add_argument("out")
    ap.add_argument("--chars", type=int, default=260000, help="about this many characters in all")
    ap.add_argument("--excerpt", type=int, default=2000, help="characters taken from each piece (whole paragraphs)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--offset", type=float, default=0.5, help="where in each stride the piece is taken, 0 to 1")
    a = ap.parse_args()
    with open(a.train_jsonl, "rb") as f:
        data = f.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != TRAIN_SHA256:
        raise SystemExit(f"{a.train_jsonl}: sha256 {digest}, not the training split of models/README.md")
    pieces = collections.defaultdict(list)  # source -> texts, in file order
    for line in data.decode("utf-8").splitlines():
        o = json.loads(line)
        pieces[o["source"]].append(o["text"])
    total = sum(len(t) for texts in pieces.values() for t in texts)
    excerpts = []
    for texts in pieces.values():
        n = max(1, int(a.chars * sum(len(t) for t in texts) / total) // a.excerpt)
        step = len(texts) / n
        for i in range(n):
            s = ""
            for para in texts[int((i + a.offset) * step) % len(texts)].split("\n\n"):
                if len(s) >= a.excerpt:
                    break
                s += para + "\n\n"
            excerpts.append(s)
    random.Random(a.seed).shuffle(excerpts)
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("".join(excerpts))
    print(f"{a.out}: {len(excerpts)} excerpts, {sum(len(s) for s in excerpts)} characters")


if __name__ == "__main__":
    main()
