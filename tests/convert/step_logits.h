// One prefill step of the first n tokens of `ids` from position 0, written to block 0 of each
// KV group: the copy of the linear weights it used and its last-position logits.
#pragma once

#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/batch.h"
#include "model/arch/model.h"

namespace tf::test {

inline std::pair<int, std::vector<float>> step_logits(Model& m, Backend& b, const std::vector<int32_t>& ids, int32_t n,
                                                      int32_t n_kv_groups = 1) {
  const std::vector<std::vector<int32_t>> tables(static_cast<size_t>(n_kv_groups), std::vector<int32_t>{0});
  BatchBuilder bb(16, 1, n_kv_groups);
  bb.add(SeqChunk{.ids = ids.data(), .n_ids = n, .start_pos = 0, .tables = tables});
  const PreparedStep s = m.prepare(bb.take());
  m.run();
  std::vector<float> out(size_t(s.logits.numel()));
  b.copy_to_host(s.logits, out.data());
  return {s.weight_copy, std::move(out)};
}

}  // namespace tf::test
