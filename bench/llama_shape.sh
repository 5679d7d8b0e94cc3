#!/bin/sh
# Writes a Llama model folder of a given shape with no weights (config.json and tiny-main's
# tokenizer), for `--load-format dummy` speed runs; llama3_8b_shape.sh and llama_1b_shape.sh
# name the shapes used in docs/PERF.md.
#   sh bench/llama_shape.sh OUTDIR HIDDEN FFN LAYERS HEADS KV_HEADS HEAD_DIM VOCAB MAX_POS ROPE_THETA BOS EOS
# The tokenizer is tiny-main's (benchmarks feed token ids, not text).
set -eu
if [ $# -ne 12 ]; then
  echo "usage: llama_shape.sh OUTDIR HIDDEN FFN LAYERS HEADS KV_HEADS HEAD_DIM VOCAB MAX_POS ROPE_THETA BOS EOS" >&2
  exit 1
fi
out=$1
here=$(dirname "$0")/..
mkdir -p "$out"
cp "$here/models/tiny-main/tokenizer.json" "$here/models/tiny-main/tokenizer_config.json" "$out/"
cat > "$out/config.json" <<JSON
{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": $2,
  "intermediate_size": $3,
  "num_hidden_layers": $4,
  "num_attention_heads": $5,
  "num_key_value_heads": $6,
  "head_dim": $7,
  "vocab_size": $8,
  "max_position_embeddings": $9,
  "rms_norm_eps": 1e-05,
  "rope_theta": ${10},
  "tie_word_embeddings": false,
  "bos_token_id": ${11},
  "eos_token_id": ${12},
  "torch_dtype": "bfloat16"
}
JSON
