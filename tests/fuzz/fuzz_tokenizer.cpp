// Fuzz harness: the input is a tokenizer.json. Loading must either refuse it with tf::Error or
// give a tokenizer that encodes and decodes text (a fixed sample with added-token look-alikes
// and several scripts, and the input itself) into ids inside its vocabulary, without a crash,
// a hang or a runaway allocation.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "model/tokenizer/tokenizer.h"

namespace {

constexpr std::string_view kSample = "Hello, world! <s> </s> <|eos|> ab  a\tb\n\n 123 4567 Ünïcödé 日本語 "
                                     "\xF0\x9F\x98\x80 \xC3 \xE2\x82 it's";

void exercise(const tf::Tokenizer& tok, std::string_view text) {
  const std::vector<int32_t> ids = tok.encode(text);
  for (int32_t id : ids) {
    TF_ASSERT(id >= 0 && id < tok.n_vocab(), "id {} outside the vocabulary of {}", id, tok.n_vocab());
    (void)tok.token_bytes(id);
  }
  (void)tok.decode(ids);
  (void)tok.decode(ids, /*skip_special=*/true);
  tf::StreamDecoder stream(tok);
  for (int32_t id : ids) (void)stream.push(id);
  (void)stream.flush();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tf::fuzz::MemFile file(data, size);
  std::unique_ptr<tf::Tokenizer> tok;
  try {
    tok = tf::Tokenizer::from_files(file.path());
  } catch (const tf::Error&) {
    return 0;
  }
  exercise(*tok, kSample);
  exercise(*tok, std::string_view(reinterpret_cast<const char*>(data), size));
  const std::vector<int32_t> all = {0, 1, 2, tok->n_vocab() - 1, tok->n_vocab(), -1};
  (void)tok->decode(all);  // ids outside the vocabulary are skipped, as in HF
  return 0;
}
