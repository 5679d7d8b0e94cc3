#!/bin/sh
# Writes Llama-3-8B's shape (llama3_8b_shape.sh) pruned unevenly across layers, for
# `--load-format dummy` speed runs against the unpruned shape (docs/PERF.md, "Pruned layers"):
# 25% of the query heads removed (768 of 1024 kept; every layer keeps a multiple of its 8 KV
# heads: 32 in the first and last two layers, 16 to 32 between) and 20% of the FFN channels
# (366,976 of 458,752 kept, multiples of 128, the middle layers cut most: 8,960 to 13,952).
# The layer_* arrays are docs/PER_LAYER_WIDTHS.md's.
#   sh bench/llama3_8b_pruned_shape.sh /tmp/l8p
#   twofold bench -m /tmp/l8p --load-format dummy --backend cuda --kv-dtype bf16 --batch 1,32 --gen 256
set -eu
out=${1:?usage: llama3_8b_pruned_shape.sh OUTDIR}
sh "$(dirname "$0")/llama3_8b_shape.sh" "$out"
heads="32, 32, 24, 16, 24, 32, 24, 16, 24, 24, 32, 16, 24, 24, 16, 24, 32, 24, 16, 24, 24, 16, 24, 32, 24, 16, 24, 24, 16, 24, 32, 32"
ffn="13952, 13824, 13568, 13312, 13056, 12672, 12160, 11648, 11264, 10752, 10368, 9984, 9600, 9344, 8960, 8960, 8960, 9088, 9344, 9600, 9984, 10368, 10752, 11264, 11648, 12160, 12672, 13056, 13312, 13568, 13824, 13952"
# The arrays go in before config.json's closing brace.
sed -i '$d' "$out/config.json"
sed -i '$s/$/,/' "$out/config.json"
cat >> "$out/config.json" <<JSON
  "layer_num_attention_heads": [$heads],
  "layer_intermediate_size": [$ffn]
}
JSON
