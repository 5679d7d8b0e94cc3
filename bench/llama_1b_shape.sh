#!/bin/sh
# Writes a model folder with the Llama-1B shape of issue 17 (hidden 2048, 16 layers, 32 heads,
# 8 kv heads, head_dim 64, ffn 8192, vocab 8192: 2.0 GB in 16-bit) and no weights, for
# `--load-format dummy` speed runs on the CPU:
#   sh bench/llama_1b_shape.sh /tmp/l1b
#   twofold bench -m /tmp/l1b --load-format dummy -t 2 --kv-dtype bf16 --prompt-len 64 --gen 32
# The tokenizer is tiny-main's (its 8192 tokens are the shape's vocabulary; benchmarks feed
# token ids, not text). bench/gguf_random_llama.py writes the same shape as a GGUF for llama.cpp.
set -eu
out=${1:?usage: llama_1b_shape.sh OUTDIR}
here=$(dirname "$0")/..
mkdir -p "$out"
cp "$here/models/tiny-main/tokenizer.json" "$here/models/tiny-main/tokenizer_config.json" "$out/"
cat > "$out/config.json" <<JSON
{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 2048,
  "intermediate_size": 8192,
  "num_hidden_layers": 16,
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "head_dim": 64,
  "vocab_size": 8192,
  "max_position_embeddings": 4096,
  "rms_norm_eps": 1e-05,
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "bos_token_id": 0,
  "eos_token_id": 1,
  "torch_dtype": "bfloat16"
}
JSON
