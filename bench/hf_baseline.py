#!/usr/bin/env python3
"""Hugging Face transformers' generate() on the same shapes as `twofold bench`: the baseline
that twofold's CUDA numbers are compared with (docs/PERF.md).

Builds the model from a config.json alone with random BF16 weights directly on the GPU (speed
does not depend on the values), then for each batch size: random prompts of --prompt-len
tokens, greedy, exactly --gen new tokens (EOS suppressed). Decode tokens/s is measured as
batch * (gen - 1) / (time(gen tokens) - time(1 token)), so prefill is not counted; the
1-token run also gives the prefill time. Prints one JSON object per line.

  python3 bench/hf_baseline.py --config /tmp/l8/config.json --batch 1,32 --prompt-len 128 --gen 256
"""
import argparse
import json
import time

import torch
import transformers


def timed_generate(model, ids, n_new, cache):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    kwargs = dict(max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False, pad_token_id=0)
    if cache:
        kwargs["cache_implementation"] = cache
    model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="config.json of the model shape")
    ap.add_argument("--batch", default="1,32", help="comma-separated batch sizes")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen", type=int, default=256)
    ap.add_argument("--cache", default="", help="cache_implementation for generate (e.g. static); default: dynamic")
    a = ap.parse_args()

    cfg = transformers.AutoConfig.from_pretrained(a.config)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
    model.eval()
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    print(json.dumps({"event": "loaded", "seconds": time.perf_counter() - t0, "weight_bytes": weight_bytes,
                      "transformers": transformers.__version__, "torch": torch.__version__}), flush=True)
    for b in [int(x) for x in a.batch.split(",")]:
        ids = torch.randint(16, cfg.vocab_size, (b, a.prompt_len), device="cuda")
        with torch.inference_mode():
            if a.cache:
                # A static cache is sized by max_new_tokens and its forward is compiled per
                # shape: warm up both timed lengths, or compilation lands in the timed runs.
                timed_generate(model, ids, 1, a.cache)
                timed_generate(model, ids, a.gen, a.cache)
            else:
                timed_generate(model, ids, 2, a.cache)  # warm-up
            t1 = timed_generate(model, ids, 1, a.cache)
            tn = timed_generate(model, ids, a.gen, a.cache)
        print(json.dumps({"engine": "transformers", "cache": a.cache or "dynamic", "batch": b,
                          "prompt_len": a.prompt_len, "gen": a.gen,
                          "prefill_tokens_per_s": b * a.prompt_len / t1,
                          "decode_tokens_per_s": b * (a.gen - 1) / (tn - t1),
                          "total_seconds": tn}), flush=True)


if __name__ == "__main__":
    main()
