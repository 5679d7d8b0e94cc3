// The tokenizer of a GGUF file, from its tokenizer.ggml.* metadata. It is translated into the
// tokenizer.json description that Hugging Face's own converters give the same vocabulary, and
// HfTokenizer loads that: one tokenizer implementation for both sources.
//
//   tokenizer.ggml.model "gpt2": byte-level BPE with tokenizer.ggml.merges. The pre-tokenizer
//     is chosen by tokenizer.ggml.pre, with the split rules llama.cpp uses for each name:
//       default, gpt-2, gpt2  ByteLevel with GPT-2's word regex
//       llama-bpe (llama3, llama-v3)  Llama 3's regex (digits in runs of up to 3), then ByteLevel;
//                             a word that is itself a token is not merged (ignore_merges)
//       qwen2                 Llama 3's regex with every digit alone, then ByteLevel
//       smollm, starcoder     every digit alone, then ByteLevel with GPT-2's regex
//     Anything else is refused: tokenizing with the wrong rules would give silently wrong ids.
//   tokenizer.ggml.model "llama": SentencePiece BPE with byte fallback (<0xNN> tokens). The
//     merges are derived from tokenizer.ggml.scores as transformers' SentencePieceExtractor
//     does: every split of a token into two tokens, ranked by the merged token's score
//     (higher first). A space is "▁", prepended to the text and after every special token
//     (tokenizer.ggml.add_space_prefix, default true), as llama.cpp and HF's legacy Llama
//     tokenizer do.
// tokenizer.ggml.token_type: CONTROL and UNKNOWN tokens become special added tokens,
// USER_DEFINED ones plain added tokens (both matched in the raw text before splitting).
// tokenizer.ggml.add_bos_token / add_eos_token (defaults as llama.cpp: BOS for llama-bpe and
// SentencePiece) put bos_token_id / eos_token_id around encode(text, add_special=true).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>

#include "model/tokenizer/bpe.h"
#include "model/tokenizer/tokenizer.h"

namespace tf {

class GgufFile;

std::unique_ptr<Tokenizer> gguf_tokenizer(const GgufFile& f);

namespace tok {

// The tokenizer.json document for `f` (model.vocab apart in `vocab`), for gguf_tokenizer and
// tests.
nlohmann::json gguf_tokenizer_json(const GgufFile& f, VocabEntries& vocab);

}  // namespace tok
}  // namespace tf
