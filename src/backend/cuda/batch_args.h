// The batch metadata as the kernels see it: device pointers into the backend's batch buffer
// (filled by CudaBackend::set_batch) and the sizes. Plain data, passed to kernels by value.
#pragma once

#include <cstdint>

namespace tf::cuda {

struct BatchArgs {
  const int32_t* token_ids = nullptr;     // [n_tokens]
  const int32_t* positions = nullptr;     // [n_tokens]
  const int32_t* seq_starts = nullptr;    // [n_seqs + 1]
  const int32_t* context_lens = nullptr;  // [n_seqs]
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks], -1 = no block
  const int32_t* slot_mapping = nullptr;  // [n_tokens]
  const int32_t* logits_rows = nullptr;   // [n_out]
  int32_t n_tokens = 0, n_seqs = 0, max_blocks = 0, n_out = 0;
};

}  // namespace tf::cuda
