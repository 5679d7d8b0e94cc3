// tokenizer.json "normalizer": rewrites each piece of input text (between added tokens)
// before pre-tokenization. Supported: null, NFC, NFD, NFKC, NFKD (ICU), Prepend, Replace
// (String or Regex pattern), Lowercase, Strip (strip_left, strip_right), StripAccents,
// ByteLevel, Sequence. Anything else is an error naming the field.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>

namespace tf::tok {

struct JsonAt;

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `s` is valid UTF-8 and stays so.
  virtual void normalize(std::string& s) const = 0;
};

// nullptr for a JSON null (no normalizer).
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const JsonAt& at);

}  // namespace tf::tok
