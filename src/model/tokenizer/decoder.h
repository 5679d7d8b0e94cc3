// tokenizer.json "decoder": turns token strings back into text, as HF's decode_chain does on
// the list of token strings. Supported: ByteLevel, Replace, ByteFallback, Fuse, Strip,
// Metaspace, BPEDecoder (end-of-word suffix), Sequence.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <vector>

namespace tf::tok {

struct JsonAt;

class Decoder {
 public:
  virtual ~Decoder() = default;
  // HF's decode_chain: rewrites the list of token strings (may merge them).
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // The raw bytes one token stands for, out of context: what decode_chain does to a token in
  // the middle of a sequence, without whole-sequence steps (Strip, first-token rules) and
  // without replacing invalid UTF-8 (byte tokens map to their bytes).
  virtual void token_bytes(std::string& token) const = 0;
};

// nullptr for a JSON null (HF then joins the tokens with spaces).
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const JsonAt& at);

}  // namespace tf::tok
