#!/bin/sh
# Writes a model folder with Llama-3-8B's shape (hidden 4096, 32 layers, 32 heads, 8 kv heads,
# ffn 14336, vocab 128256) and no weights, for `--load-format dummy` speed runs:
#   sh bench/llama3_8b_shape.sh /tmp/l8
#   twofold bench -m /tmp/l8 --load-format dummy --backend cuda --kv-dtype bf16 --batch 1,32 --gen 256
set -eu
out=${1:?usage: llama3_8b_shape.sh OUTDIR}
exec sh "$(dirname "$0")/llama_shape.sh" "$out" 4096 14336 32 32 8 128 128256 8192 500000.0 128000 128001
