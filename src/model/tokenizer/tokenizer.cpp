#include "model/tokenizer/tokenizer.h"

#include "core/error.h"
#include "model/gguf/gguf_file.h"
#include "model/tokenizer/gguf_vocab.h"
#include "model/tokenizer/hf_tokenizer.h"
#include "model/tokenizer/utf8.h"

namespace tf {

std::unique_ptr<Tokenizer> Tokenizer::from_files(const std::string& tokenizer_json,
                                                 const std::string& tokenizer_config_json) {
  return load_guarded(tokenizer_json, [&]() -> std::unique_ptr<Tokenizer> {
    return std::make_unique<tok::HfTokenizer>(tokenizer_json, tokenizer_config_json);
  });
}

std::unique_ptr<Tokenizer> Tokenizer::from_dir(const std::string& dir) {
  return from_files(dir + "/tokenizer.json", dir + "/tokenizer_config.json");
}

std::unique_ptr<Tokenizer> Tokenizer::from_model(const std::string& path) {
  if (const std::optional<std::string> gguf = find_gguf_model(path)) return gguf_tokenizer(GgufFile(*gguf));
  return from_dir(path);
}

// Bytes accumulate in pending_ until they end on a character boundary; ill-formed bytes that
// no later byte could complete are emitted at once as U+FFFD, so the concatenation of all
// pieces equals utf8_lossy of all the bytes.
std::string StreamDecoder::push(int32_t id) {
  if (skip_special_ && tok_.is_special(id)) return {};
  pending_ += tok_.token_bytes(id);
  const size_t n = tok::utf8_complete_prefix(pending_);
  std::string out = tok::utf8_lossy(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = tok::utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace tf
