// The bound on the token ids a tokenizer file may use.
//
// Token ids index dense tables (id -> token string, id -> added token), so an id far beyond
// the number of tokens a file defines would size those tables by the id alone: an id of 2e8 in
// a file of 100 tokens asked for 7 GB. Ids must be below the number of tokens the file defines
// (model.vocab entries plus added tokens) plus kIdSlack, room for the unused ids some
// vocabularies leave; the real tokenizers of tests/data (Llama-3, Qwen3, Mistral) leave none.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tf::tok {

constexpr int64_t kIdSlack = int64_t(1) << 16;
constexpr int64_t kMaxIds = int64_t(1) << 30;  // whatever the file: ids stay far from int32's end

struct IdLimit {
  int64_t n_tokens = 0;  // tokens the file defines
  int64_t limit() const { return std::min(n_tokens + kIdSlack, kMaxIds); }
};

}  // namespace tf::tok
