// One forward of a model over a batch, run as the backend runs it best: the one place that
// pads batches and records or replays forwards (CUDA Graphs).
//
// On a backend that records (Backend::pad_kv_block(0) >= 0), a decode batch (one token per
// sequence) or a verification batch (the same 1 + k tokens per sequence, logits for all) is
// padded to a bucket of sequences and a block-table stride (graph_block_stride;
// pad_uniform_batch, one padding block per KV group), so a handful of recordings cover every
// batch; its forward is then run eagerly the first time its shapes are seen, recorded the
// second, replayed after (Backend::graph_begin). Every other batch runs eagerly.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/batch.h"
#include "model/arch/model.h"

namespace tf {

// Runs `batch` through `model`, loaded onto `backend`. Returns the logits [batch.n_out(),
// n_vocab] F32 on the backend, valid until the next forward.
TensorView run_forward(Model& model, Backend& backend, const Batch& batch);

// Token ids that a decode batch takes from a buffer on the backend instead of from its host
// copy: token j of the batch (j < rows.size()) is ids[rows[j]]. The engine's overlapped steps
// pass the previous step's sampled ids, which have not reached the host yet.
struct DeviceTokenIds {
  TensorView ids;
  std::vector<int32_t> rows;
};

// run_forward for a batch whose first ids.rows.size() token ids come from ids.ids (their host
// values in `batch` are placeholders); Backend::take_token_ids puts them in place after the
// batch is set, before the forward runs or replays.
TensorView run_forward_taking_ids(Model& model, Backend& backend, const Batch& batch, const DeviceTokenIds& ids);

// The block-table stride a recorded batch of `max_blocks` is padded to: 16 or 32 blocks for
// short contexts, else the next multiple of 64. The stride is the longest context the CUDA
// backend's decode attention sizes its grid for: at 16 and 32 blocks of 16 keys its splits
// fit one thread block cluster and merge without the combine kernel (docs/PERF.md, the entry
// on finer recorded strides for short contexts).
int32_t graph_block_stride(int32_t max_blocks);

// The sequence counts a recording backend pads decode and verification batches of 1..max_seqs
// sequences to (ascending): each has its own recordings.
std::vector<int32_t> recorded_batch_sizes(int32_t max_seqs);

}  // namespace tf
