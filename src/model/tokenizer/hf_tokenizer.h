// The Tokenizer implementation for Hugging Face tokenizer.json files (BPE model).
//
// encode() follows HF `tokenizers` step by step:
//   1. added tokens with normalized=false are cut out of the raw text;
//   2. each remaining piece is normalized, then added tokens with normalized=true are cut out;
//   3. each remaining piece is pre-tokenized into words;
//   4. each word goes through BPE;
//   5. with add_special, the post-processor's ids go around the result.
// decode() maps ids to token strings (added tokens' decode_text included) and runs the decoder
// chain over the whole list, then replaces invalid UTF-8 by U+FFFD.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/tokenizer/added_tokens.h"
#include "model/tokenizer/bpe.h"
#include "model/tokenizer/decoder.h"
#include "model/tokenizer/normalizer.h"
#include "model/tokenizer/post_processor.h"
#include "model/tokenizer/pretokenizer.h"
#include "model/tokenizer/string_index.h"
#include "model/tokenizer/tokenizer.h"

namespace tf::tok {

class HfTokenizer final : public Tokenizer {
 public:
  // See Tokenizer::from_files.
  HfTokenizer(const std::string& tokenizer_json, const std::string& tokenizer_config_json);
  // From a tokenizer.json document built in memory (a GGUF file's tokenizer: gguf_vocab.h);
  // model.vocab's entries may be given apart in `vocab`. `origin` names the source in errors;
  // `special` stands for what tokenizer_config.json would say.
  struct SpecialIds {
    std::optional<int32_t> bos, eos;
  };
  HfTokenizer(const nlohmann::json& tokenizer, VocabEntries vocab, const std::string& origin, SpecialIds special);

  std::vector<int32_t> encode(std::string_view text, bool add_special = true) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const override;
  std::string token_bytes(int32_t id) const override;
  std::string token_text(int32_t id) const override;
  std::optional<int32_t> token_id(std::string_view token_text) const override;
  bool is_special(int32_t id) const override;
  int32_t n_vocab() const override { return n_vocab_; }
  std::optional<int32_t> bos_id() const override { return bos_id_; }
  std::optional<int32_t> eos_id() const override { return eos_id_; }

 private:
  void build(const nlohmann::json& root, VocabEntries* vocab, const std::string& origin);
  void load_config(const std::string& path);
  // Steps 3 and 4 for one piece of normalized text.
  void encode_piece(std::string_view piece, bool at_start, std::vector<int32_t>& ids) const;
  // The string HF's decode starts from: the added token's decode_text, else the vocab entry.
  const std::string* token_string(int32_t id) const;
  const AddedToken* added_token(int32_t id) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Bpe> model_;
  std::unique_ptr<Decoder> decoder_;
  AddedVocabulary added_;
  PostProcessor post_;
  StringIndex added_by_content_;
  std::vector<int32_t> added_index_;  // [n_vocab] index into added_.tokens(), -1 if not added
  int32_t n_vocab_ = 0;
  std::optional<int32_t> bos_id_, eos_id_;
};

}  // namespace tf::tok
