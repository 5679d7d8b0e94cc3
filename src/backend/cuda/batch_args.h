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
  // Attention work lists, computed on the host by set_batch:
  const int32_t* decode_seqs = nullptr;    // [n_decode] the decode kernel's items: a sequence with one
                                           // new token, or one row of a short chunk (set_batch)
  const int32_t* decode_tokens = nullptr;  // [n_decode] their token rows
  const int32_t* plain_tokens = nullptr;   // [n_plain] token rows of longer chunks (plain kernel)
  const int32_t* flash_tiles = nullptr;    // [n_flash, 3] (sequence, first row, rows <= 64) of long chunks
  const int32_t* split_keys = nullptr;     // [1] keys per split of the decode kernel, chosen per step
                                           // from the longest context (device memory, so a recorded
                                           // step follows the context as it grows)
  int32_t n_tokens = 0, n_seqs = 0, max_blocks = 0, n_out = 0;
  int32_t n_decode = 0, n_plain = 0, n_flash = 0;
};

}  // namespace tf::cuda
