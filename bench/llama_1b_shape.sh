#!/bin/sh
# Writes a model folder with the Llama-1B shape of issue 17 (hidden 2048, 16 layers, 32 heads,
# 8 kv heads, head_dim 64, ffn 8192, vocab 8192: 2.0 GB in 16-bit) and no weights, for
# `--load-format dummy` speed runs on the CPU:
#   sh bench/llama_1b_shape.sh /tmp/l1b
#   twofold bench -m /tmp/l1b --load-format dummy -t 2 --kv-dtype bf16 --prompt-len 64 --gen 32
# Its vocabulary is tiny-main's 8192 tokens, so bench/gguf_random_llama.py can write the same
# shape as a GGUF with tiny-main's tokenizer for llama.cpp.
set -eu
out=${1:?usage: llama_1b_shape.sh OUTDIR}
exec sh "$(dirname "$0")/llama_shape.sh" "$out" 2048 8192 16 32 8 64 8192 4096 500000.0 0 1
