#!/usr/bin/env python3
"""Runs llama.cpp's own convert_hf_to_gguf.py on a parity model (models/gguf/README.md says which
files were made so), with three patches for what the parity models lack:
  - their tokenizer (Llama 3's split pattern, new to the converter's table of pre-tokenizer
    hashes) is accepted as llama-bpe;
  - Phi-3's converter, which expects a SentencePiece tokenizer.model, reads it as the GPT-2-style
    BPE it is (as the converter's Gemma 3 class does on its own);
  - Gemma 3's file records the model's sliding-window period in
    gemma3.attention.sliding_window_pattern (the key llama.cpp's loader reads, default 6) when
    config.json's layer_types repeat with another period.
Nothing else is changed: the tensors, their names and layouts, and every other key are the
converter's.

python3 models/make/convert_gguf.py LLAMA_CPP_DIR MODEL_DIR --outtype f32 --outfile OUT.gguf
Needs torch, numpy, safetensors and sentencepiece (the converter's imports).
"""
import runpy
import sys

llama_cpp = sys.argv[1]
sys.path.insert(0, llama_cpp)
sys.path.insert(1, llama_cpp + "/gguf-py")
import conversion.base as base  # noqa: E402
import conversion.gemma as gemma  # noqa: E402
import conversion.phi as phi  # noqa: E402

base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "llama-bpe"

phi3_vocab = phi.Phi3MiniModel.set_vocab


def phi3_set_vocab(self):
    if (self.dir_model / "tokenizer.model").is_file():
        return phi3_vocab(self)
    self._set_vocab_gpt2()


phi.Phi3MiniModel.set_vocab = phi3_set_vocab

gemma3_params = gemma.Gemma3Model.set_gguf_parameters


def gemma3_set_gguf_parameters(self):
    gemma3_params(self)
    types = self.hparams.get("layer_types")
    if types:
        period = types.index("full_attention") + 1
        assert all((t == "full_attention") == ((i + 1) % period == 0) for i, t in enumerate(types)), types
        if period != 6:
            self.gguf_writer.add_sliding_window_pattern(period)


gemma.Gemma3Model.set_gguf_parameters = gemma3_set_gguf_parameters

sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[2:]
runpy.run_path(llama_cpp + "/convert_hf_to_gguf.py", run_name="__main__")
