// Fuzz harness for GGUF files: the reader, then what twofold builds from a file it accepts
// (config, tokenizer with one encode/decode, weights under Hugging Face names with
// dequantization). A tf::Error is the expected answer to bad bytes; anything else (a crash,
// a sanitizer report, another exception, an allocation out of proportion to the input) is a
// bug. Seeds: tests/fuzz/corpus/gguf (make_gguf_seeds.py).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/error.h"
#include "model/gguf/gguf_file.h"
#include "model/gguf_config.h"
#include "model/gguf_weights.h"
#include "model/tokenizer/gguf_vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<const tf::GgufFile> file;
  try {
    file = std::make_shared<const tf::GgufFile>(std::span<const uint8_t>(data, size), "fuzz.gguf");
  } catch (const tf::Error&) {
    return 0;
  }
  try {
    const tf::ModelConfig cfg = tf::gguf_model_config(*file);
    tf::gguf_weights(file, cfg);
  } catch (const tf::Error&) {
  }
  try {
    const auto tok = tf::gguf_tokenizer(*file);
    const std::vector<int32_t> ids = tok->encode("Hello 123 <|im_start|>wörld\n", /*add_special=*/true);
    tok->decode(ids);
  } catch (const tf::Error&) {
  }
  return 0;
}
