#!/bin/sh
# Writes a model folder with Llama-3-8B's shape (hidden 4096, 32 layers, 32 heads, 8 kv heads,
# ffn 14336, vocab 128256) and no weights, for `--load-format dummy` speed runs:
#   sh bench/llama3_8b_shape.sh /tmp/l8
#   twofold bench -m /tmp/l8 --load-format dummy --backend cuda --kv-dtype bf16 --batch 1,32 --gen 256
# The tokenizer is tiny-main's (benchmarks feed token ids, not text).
set -eu
out=${1:?usage: llama3_8b_shape.sh OUTDIR}
here=$(dirname "$0")/..
mkdir -p "$out"
cp "$here/models/tiny-main/tokenizer.json" "$here/models/tiny-main/tokenizer_config.json" "$out/"
cat > "$out/config.json" <<JSON
{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "num_hidden_layers": 32,
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "head_dim": 128,
  "vocab_size": 128256,
  "max_position_embeddings": 8192,
  "rms_norm_eps": 1e-05,
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "torch_dtype": "bfloat16"
}
JSON
