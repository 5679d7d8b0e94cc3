#!/usr/bin/env python3
"""Two parity models beside the bundled ones (models/README.md), each a folder
models/parity/NAME and golden vectors tests/data/golden-NAME.json from Hugging Face transformers
(float32, CPU, eager attention):
  llama3-rope       Llama with Llama 3.1's RoPE scaling (factor 4, low_freq_factor 1,
                    high_freq_factor 4, original_max_position_embeddings 32: RoPE's 16
                    frequencies of a 32-wide head fall in all three of its bands, and the
                    prompts run past position 32)
  qwen3-moe-sparse  Qwen3-MoE with experts in every layer (as released Qwen3-MoE models are;
                    parity/qwen3-moe has a dense first layer, which llama.cpp's converter
                    cannot write)

python3 models/make/extra_parity.py REPO [NAME ...]
Needs torch, transformers, tokenizers and safetensors. The tokenizer and the three parity prompts
are the other parity models' (models/parity/llama-mha, tests/data/golden-llama-mha.json).
Weights follow the parity models' rule: sorted names, one generator; embeddings N(0, 0.25^2);
norms 1 + N(0, 0.2^2); other matrices (experts' too) N(0, 1/fan_in).
"""
import json, os, shutil, sys

import torch
from tokenizers import Tokenizer
import transformers
from transformers import AutoModelForCausalLM, GenerationConfig

BOS_ID, EOS_ID, PAD_ID = 0, 1, 2
COMMON = dict(vocab_size=8192, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              head_dim=32, max_position_embeddings=256, hidden_act="silu", tie_word_embeddings=True,
              attention_bias=False, bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID)
MODELS = {  # name: (model class, config class, arguments, seed)
    "llama3-rope": ("LlamaForCausalLM", "LlamaConfig",
                    dict(intermediate_size=256, rms_norm_eps=1e-5, mlp_bias=False,
                         rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0,
                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 32}), 206),
    "qwen3-moe-sparse": ("Qwen3MoeForCausalLM", "Qwen3MoeConfig",
                         dict(intermediate_size=256, moe_intermediate_size=64, num_experts=8, num_experts_per_tok=2,
                              norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], rms_norm_eps=1e-6,
                              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), 207),
}


def r6(values):
    return [float(f"{v:.6g}") for v in values]


@torch.no_grad()
def init_weights(model, seed):
    g = torch.Generator().manual_seed(seed)
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        if "norm" in name:
            v = 1.0 + 0.2 * torch.randn(p.shape, generator=g)
        elif "embed_tokens" in name or "lm_head" in name:
            v = 0.25 * torch.randn(p.shape, generator=g)
        else:
            v = torch.randn(p.shape, generator=g) / (p.shape[-1] ** 0.5)
        p.copy_(v.to(p.dtype))


@torch.no_grad()
def record(model, tok, name, text, n_new):
    ids = tok.encode(text).ids
    logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    seq, new, margins = list(ids), [], []
    for _ in range(n_new):  # greedy by full recomputation, never stopping at EOS
        top = torch.topk(model(input_ids=torch.tensor([seq])).logits[0, -1].float(), 2)
        new.append(int(top.indices[0]))
        margins.append(float(f"{float(top.values[0] - top.values[1]):.6g}"))
        seq.append(new[-1])
    return {"name": name, "text": text, "input_ids": ids, "num_input_tokens": len(ids),
            "argmax_per_position": logits.argmax(-1).tolist(),
            "greedy": {"new_token_ids": new, "top1_top2_margins": margins},
            "last_logits": r6(logits[-1].tolist())}


def make(repo, name):
    cls, ccls, extra, seed = MODELS[name]
    out = os.path.join(repo, "models/parity", name)
    src = os.path.join(repo, "models/parity/llama-mha")
    cfg = getattr(transformers, ccls)(**COMMON, **extra)
    torch.manual_seed(seed)
    model = getattr(transformers, cls)(cfg)
    init_weights(model, seed)
    model.tie_weights()
    model = model.float()
    model.generation_config = GenerationConfig(bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, f), out)
    m = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").float().eval()
    sd0 = {k: v.float() for k, v in model.state_dict().items()}
    for k, v in m.state_dict().items():  # the saved folder gives back the same weights
        assert torch.equal(v, sd0[k]), k
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    prompts = json.load(open(os.path.join(repo, "tests/data/golden-llama-mha.json")))["prompts"]
    g = {"format": "llm-golden-v1", "model": name, "prompt_set": "parity",
         "weights": f"random, seeded: models/make/extra_parity.py, seed={seed}",
         "environment": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "device": "cpu", "dtype": "float32 (float32 weights)", "attention": "eager"},
         "greedy_new_tokens": 16,
         "prompts": [record(m, tok, p["name"], p["text"], 16) for p in prompts]}
    with open(os.path.join(repo, f"tests/data/golden-{name}.json"), "w", encoding="utf-8") as f:
        json.dump(g, f, ensure_ascii=False, indent=1)
    for r in g["prompts"]:
        print(name, r["name"], r["num_input_tokens"], "min margin", min(r["greedy"]["top1_top2_margins"]))


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    for name in sys.argv[2:] or MODELS:
        make(sys.argv[1], name)


if __name__ == "__main__":
    main()
