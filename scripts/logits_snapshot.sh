#!/usr/bin/env bash
# Writes `twofold logits` (JSON: prompt ids and last-position logits, floats as printed) for
# the bundled models on the host backends, to compare two builds bit for bit:
#   scripts/logits_snapshot.sh build/tools/twofold /tmp/before   # on the old commit
#   scripts/logits_snapshot.sh build/tools/twofold /tmp/after    # on the new one
#   diff -r /tmp/before /tmp/after && echo identical
# Also with --tp 2 and --load-format dummy, which go through the sharded and random loaders.
set -euo pipefail
TF=${1:?usage: logits_snapshot.sh TWOFOLD OUT_DIR}
OUT=${2:?usage: logits_snapshot.sh TWOFOLD OUT_DIR}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
prompts=("The LORD is my shepherd;" "def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)")
for model in tiny-main parity/llama-mha parity/qwen2; do
  for backend in ref cpu; do
    for i in "${!prompts[@]}"; do
      name="${model//\//_}.$backend.$i"
      "$TF" logits -m "models/$model" --backend "$backend" -t 2 -p "${prompts[$i]}" > "$OUT/$name.json"
      "$TF" logits -m "models/$model" --backend "$backend" -t 2 --tp 2 -p "${prompts[$i]}" > "$OUT/$name.tp2.json"
    done
  done
  "$TF" logits -m "models/$model" --backend cpu -t 2 --load-format dummy -p "${prompts[0]}" > "$OUT/${model//\//_}.dummy.json"
done
echo "wrote $(ls "$OUT" | wc -l) files to $OUT"
