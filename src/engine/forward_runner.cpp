#include "engine/forward_runner.h"

#include <vector>

#include "core/error.h"

namespace tf {

namespace {

// Decode batches run padded to one of these sizes when the backend records forwards, so a
// handful of recordings cover every batch size (vLLM records a similar list).
int32_t graph_bucket(int32_t n_seqs) {
  static const int32_t kBuckets[] = {1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256};
  for (int32_t b : kBuckets)
    if (n_seqs <= b) return b;
  return 0;  // too large: run eagerly
}

// Block-table strides are padded to multiples of this many blocks (one recording per bucket
// of context length), with two finer buckets below it (graph_block_stride).
constexpr int32_t kGraphBlockQuantum = 64;

// The logits of the batch's own rows (a padded batch's rows come first).
TensorView first_rows(const TensorView& t, int64_t n) {
  TensorView v = t;
  v.shape[0] = n;
  return v;
}

}  // namespace

int32_t graph_block_stride(int32_t max_blocks) {
  if (max_blocks <= kGraphBlockQuantum / 4) return kGraphBlockQuantum / 4;
  if (max_blocks <= kGraphBlockQuantum / 2) return kGraphBlockQuantum / 2;
  return (max_blocks + kGraphBlockQuantum - 1) / kGraphBlockQuantum * kGraphBlockQuantum;
}

std::vector<int32_t> recorded_batch_sizes(int32_t max_seqs) {
  std::vector<int32_t> out;
  for (int32_t n = 1; n <= max_seqs; ++n) {
    const int32_t b = graph_bucket(n);
    if (b == 0) break;
    if (out.empty() || out.back() != b) out.push_back(b);
  }
  return out;
}

namespace {

TensorView forward(Model& model, Backend& backend, const Batch& batch, const DeviceTokenIds* ids) {
  std::vector<int32_t> pad_blocks;
  for (int32_t g = 0; g < batch.n_kv_groups; ++g) pad_blocks.push_back(backend.pad_kv_block(g));
  const bool records = pad_blocks[0] >= 0;
  // Decode steps (one token per sequence) and verification steps (1 + k tokens per sequence,
  // logits for all) record; other batches (prefill chunks, mixed widths) run eagerly.
  const int32_t width = records ? uniform_width(batch) : 0;
  const int32_t bucket = width > 0 && width <= backend.kv_spec().block_size && width < 512 ? graph_bucket(batch.n_seqs()) : 0;
  if (!records || bucket == 0) {
    const PreparedStep p = model.prepare(batch);
    if (p.buffers_moved) backend.graph_reset();  // recordings refer to the old buffers
    if (ids) backend.take_token_ids(ids->ids, ids->rows);
    model.run();
    return p.logits;
  }
  // A decode or verification step on a recording backend: pad to the bucket, then replay,
  // record or run.
  const int32_t max_blocks = graph_block_stride(batch.max_blocks);
  const Batch padded = pad_uniform_batch(batch, bucket, max_blocks, pad_blocks, int32_t(backend.kv_spec().block_size));
  const PreparedStep p = model.prepare(padded);
  if (p.buffers_moved) backend.graph_reset();
  if (ids) backend.take_token_ids(ids->ids, ids->rows);  // the real rows come first
  // Bits: bucket 14, max_blocks 20, rows out 18, width 9 (at most a block), weight copy 3.
  const uint64_t key = uint64_t(bucket) | uint64_t(max_blocks) << 14 | uint64_t(padded.n_out()) << 34 |
                       uint64_t(width) << 52 | uint64_t(p.weight_copy) << 61;
  const GraphStep g = backend.graph_begin(key);
  try {
    if (g != GraphStep::Replayed) model.run();
  } catch (...) {
    if (g == GraphStep::Capture) backend.graph_reset();  // ends the broken recording
    throw;
  }
  if (g == GraphStep::Capture) backend.graph_end();
  return first_rows(p.logits, batch.n_out());
}

}  // namespace

TensorView run_forward(Model& model, Backend& backend, const Batch& batch) {
  return forward(model, backend, batch, nullptr);
}

TensorView run_forward_taking_ids(Model& model, Backend& backend, const Batch& batch, const DeviceTokenIds& ids) {
  TF_ASSERT(int32_t(ids.rows.size()) <= batch.n_tokens(), "run_forward_taking_ids: {} ids for a batch of {} tokens",
            ids.rows.size(), batch.n_tokens());
  return forward(model, backend, batch, &ids);
}

}  // namespace tf
