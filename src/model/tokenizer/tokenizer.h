// Tokenizers loaded from a Hugging Face tokenizer.json (+ tokenizer_config.json), or from the
// tokenizer metadata of a GGUF file (translated to the same description: gguf_vocab.h).
//
// Two model families cover nearly all open models:
//  - byte-level BPE (GPT-2, Llama-3, Qwen2/3): a Unicode regex pre-tokenizer (PCRE2), GPT-2's
//    byte-to-unicode mapping, merges applied by rank;
//  - SentencePiece-style BPE (Llama-2, Mistral): Metaspace/"▁" normalisation, merges by rank,
//    byte fallback to <0xNN> tokens.
// Added tokens (special or not) are matched in the raw text before splitting, as the
// `tokenizers` library does. Whether BOS is prepended follows the tokenizer's own
// configuration, tokenizer.json's post_processor, as the `tokenizers` library does
// (tokenizer_config.json's add_bos_token is not consulted; it only matters to transformers'
// legacy slow tokenizers). The implementation lives in hf_tokenizer.h and the files it names.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads `tokenizer_json` and, if the path is non-empty and exists, `tokenizer_config_json`.
  // Throws tf::Error naming the file and the field on anything unsupported or malformed.
  static std::unique_ptr<Tokenizer> from_files(const std::string& tokenizer_json,
                                               const std::string& tokenizer_config_json = "");
  // DIR/tokenizer.json and DIR/tokenizer_config.json.
  static std::unique_ptr<Tokenizer> from_dir(const std::string& dir);
  // The tokenizer of a model path: a GGUF file (or a folder holding one; its tokenizer.ggml.*
  // metadata, gguf_vocab.h) or a Hugging Face folder (from_dir).
  static std::unique_ptr<Tokenizer> from_model(const std::string& path);

  // add_special: add what the tokenizer's configuration adds (e.g. BOS), as HF's
  // encode(text, add_special_tokens=True).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special = true) const = 0;
  // Exact bytes of the concatenated tokens (invalid UTF-8 replaced by U+FFFD only at the end,
  // as HF decode does). skip_special drops special added tokens.
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special = false) const = 0;
  // Raw bytes one token stands for (byte-level tokens mapped back to bytes, "▁" to space,
  // <0xNN> to the byte). Streaming decoders concatenate these.
  virtual std::string token_bytes(int32_t id) const = 0;
  // The token's string as written in the vocabulary (e.g. "Ġthe"); empty if out of range.
  virtual std::string token_text(int32_t id) const = 0;
  virtual std::optional<int32_t> token_id(std::string_view token_text) const = 0;
  virtual bool is_special(int32_t id) const = 0;

  virtual int32_t n_vocab() const = 0;  // largest id + 1, added tokens included
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
};

// Turns a stream of token ids into text pieces that are always whole UTF-8: bytes of a
// character split across tokens are held back until the character is complete.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = true)
      : tok_(tok), skip_special_(skip_special) {}
  // Returns the text that became complete with this token (possibly empty).
  std::string push(int32_t id);
  // Whatever is left at the end (incomplete UTF-8 becomes U+FFFD).
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace tf
