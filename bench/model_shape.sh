#!/bin/sh
# Writes a model folder with the shape of a released model and no weights, for
# `--load-format dummy` speed runs (the shapes as their Hugging Face config.json files state
# them; Gemma 3 12B: the text model's config):
#   sh bench/model_shape.sh mixtral-8x7b /tmp/mx     # 8 experts, top 2, 46.7 B parameters, 12.9 B active
#   sh bench/model_shape.sh qwen3-8b /tmp/q3
#   sh bench/model_shape.sh gemma3-12b /tmp/g3       # head_dim 256, 5 sliding-window layers per full one
#   twofold bench -m /tmp/mx --load-format dummy --backend cuda --batch 1,8,32 --gen 128
# (Llama-3-8B: bench/llama3_8b_shape.sh.) The tokenizer is tiny-main's (benchmarks feed token
# ids, not text).
set -eu
name=${1:?usage: model_shape.sh mixtral-8x7b|qwen3-8b|gemma3-12b OUTDIR}
out=${2:?usage: model_shape.sh mixtral-8x7b|qwen3-8b|gemma3-12b OUTDIR}
here=$(dirname "$0")/..
case $name in
  mixtral-8x7b) cat > /tmp/model_shape.$$ <<'JSON'
{
  "architectures": ["MixtralForCausalLM"],
  "model_type": "mixtral",
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "num_hidden_layers": 32,
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "num_local_experts": 8,
  "num_experts_per_tok": 2,
  "vocab_size": 32000,
  "max_position_embeddings": 32768,
  "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "torch_dtype": "bfloat16"
}
JSON
  ;;
  qwen3-8b) cat > /tmp/model_shape.$$ <<'JSON'
{
  "architectures": ["Qwen3ForCausalLM"],
  "model_type": "qwen3",
  "hidden_size": 4096,
  "intermediate_size": 12288,
  "num_hidden_layers": 36,
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "head_dim": 128,
  "vocab_size": 151936,
  "max_position_embeddings": 40960,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "attention_bias": false,
  "tie_word_embeddings": false,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "torch_dtype": "bfloat16"
}
JSON
  ;;
  gemma3-12b) cat > /tmp/model_shape.$$ <<'JSON'
{
  "architectures": ["Gemma3ForCausalLM"],
  "model_type": "gemma3_text",
  "hidden_size": 3840,
  "intermediate_size": 15360,
  "num_hidden_layers": 48,
  "num_attention_heads": 16,
  "num_key_value_heads": 8,
  "head_dim": 256,
  "query_pre_attn_scalar": 256,
  "hidden_activation": "gelu_pytorch_tanh",
  "sliding_window": 1024,
  "sliding_window_pattern": 6,
  "vocab_size": 262208,
  "max_position_embeddings": 131072,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "rope_local_base_freq": 10000.0,
  "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
  "tie_word_embeddings": true,
  "bos_token_id": 2,
  "eos_token_id": 1,
  "torch_dtype": "bfloat16"
}
JSON
  ;;
  *) echo "model_shape.sh: unknown shape '$name' (mixtral-8x7b, qwen3-8b or gemma3-12b)" >&2; exit 2 ;;
esac
mkdir -p "$out"
mv /tmp/model_shape.$$ "$out/config.json"
cp "$here/models/tiny-main/tokenizer.json" "$here/models/tiny-main/tokenizer_config.json" "$out/"
