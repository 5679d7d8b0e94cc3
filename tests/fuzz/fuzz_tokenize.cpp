// Fuzz harness: the input is text, encoded and decoded by a real bundled tokenizer (tiny-main's:
// byte-level BPE with a Unicode regex pre-tokenizer and special added tokens, as Llama-3's and
// Qwen's are). Checked beyond "no crash": every id is inside the vocabulary, decoding the ids
// gives the text back (ill-formed UTF-8 as U+FFFD, which encode substitutes first), and the
// streaming decoder's pieces add up to the same text.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/error.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/utf8.h"

namespace {

const tf::Tokenizer& tokenizer() {
  static const std::unique_ptr<tf::Tokenizer> tok = tf::Tokenizer::from_dir(TF_SOURCE_DIR "/models/tiny-main");
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizer();  // load once, outside the timed runs
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tf::Tokenizer& tok = tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string expected = tf::tok::utf8_is_valid(text) ? std::string(text) : tf::tok::utf8_lossy(text);

  const std::vector<int32_t> ids = tok.encode(text, /*add_special=*/false);
  for (int32_t id : ids) TF_ASSERT(id >= 0 && id < tok.n_vocab(), "id {} outside the vocabulary", id);
  const std::string decoded = tok.decode(ids);
  TF_ASSERT(decoded == expected, "decode(encode(text)) differs from the text ({} ids)", ids.size());

  tf::StreamDecoder stream(tok, /*skip_special=*/false);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.push(id);
  streamed += stream.flush();
  TF_ASSERT(streamed == decoded, "the streamed pieces differ from decode()");

  const std::vector<int32_t> with_special = tok.encode(text, /*add_special=*/true);
  (void)tok.decode(with_special, /*skip_special=*/true);
  return 0;
}
