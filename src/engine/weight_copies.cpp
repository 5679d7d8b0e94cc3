#include "engine/weight_copies.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <sstream>

#include "core/error.h"
#include "engine/forward_runner.h"
#include "quant/quantized_weight.h"

namespace tf {

namespace {

WeightCopy copy_named(const std::string& name, int32_t group_size) {
  if (name == "stored") return WeightCopy{.kind = WeightCopy::Kind::Stored};
  if (name == "bf16") return WeightCopy{.kind = WeightCopy::Kind::Dense16};
  if (name == "int8" || name == "int4" || name == "fp8")
    return WeightCopy{.kind = WeightCopy::Kind::Quantized, .format = parse_quant_format(name, "--weights-per-batch"),
                      .group_size = group_size};
  fail("--weights-per-batch: unknown copy '{}' (expected stored, bf16, int8, int4 or fp8)", name);
}

// One forward of n tokens: n one-token sequences (a decode step), or with `prefill` one
// sequence of n tokens. Sequences write distinct blocks of each KV group's pool where it has
// enough.
void forward_of(Model& model, Backend& backend, int64_t n, bool prefill) {
  const KvCacheSpec& kv = backend.kv_spec();
  const int32_t bs = int32_t(kv.block_size), n_groups = kv.n_groups();
  auto pool = [&](int32_t g) { return int32_t(kv.group_blocks.empty() ? kv.n_blocks : kv.group_blocks[size_t(g)]); };
  const std::vector<int32_t> ids(static_cast<size_t>(n), 1);
  if (prefill) {
    std::vector<std::vector<int32_t>> tables(static_cast<size_t>(n_groups));
    for (auto& t : tables)
      for (int32_t b = 0; b < int32_t((n + bs - 1) / bs); ++b) t.push_back(b);
    BatchBuilder bb(bs, int32_t(tables[0].size()), n_groups);
    bb.add(SeqChunk{.ids = ids.data(), .n_ids = int32_t(n), .start_pos = 0, .tables = tables});
    run_forward(model, backend, bb.take());
    return;
  }
  BatchBuilder bb(bs, 1, n_groups);
  std::vector<std::vector<std::vector<int32_t>>> tables(static_cast<size_t>(n));  // [seq][group] one block
  for (int64_t s = 0; s < n; ++s) {
    for (int32_t g = 0; g < n_groups; ++g) tables[size_t(s)].push_back({int32_t(s % pool(g))});
    bb.add(SeqChunk{.ids = ids.data(), .n_ids = 1, .start_pos = 0, .tables = tables[size_t(s)]});
  }
  run_forward(model, backend, bb.take());
}

// Milliseconds per forward: warm-up (a recording backend's first sight, recording and first
// replay), then the best of three timed runs of enough forwards to last about 20 ms.
double time_forward(Model& model, Backend& backend, int64_t n, bool prefill) {
  using Clock = std::chrono::steady_clock;
  const int warm = backend.pad_kv_block(0) >= 0 ? 3 : 1;
  for (int i = 0; i < warm; ++i) forward_of(model, backend, n, prefill);
  backend.synchronize();
  auto run = [&](int reps) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) forward_of(model, backend, n, prefill);
    backend.synchronize();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / reps;
  };
  double best = run(1);
  const int reps = int(std::clamp(20.0 / std::max(best, 1e-3), 1.0, 20.0));
  for (int i = 0; i < 3; ++i) best = std::min(best, run(reps));
  return best;
}

}  // namespace

CopyPlan plan_weight_copies(const WeightOptions& w) {
  CopyPlan plan;
  if (!w.quantization.empty()) {
    if (!w.per_batch.empty())
      fail("--quantization and --weights-per-batch together: name every copy in --weights-per-batch instead");
    plan.copies.push_back(WeightCopy{.kind = WeightCopy::Kind::Quantized,
                                     .format = parse_quant_format(w.quantization, "--quantization"),
                                     .group_size = w.group_size});
    return plan;
  }
  if (w.per_batch.empty()) return plan;
  std::stringstream ss(w.per_batch);
  std::set<std::string> seen;
  int n_with = 0;
  for (std::string item; std::getline(ss, item, ',');) {
    const size_t colon = item.find(':');
    const std::string name = item.substr(0, colon);
    if (!seen.insert(name).second) fail("--weights-per-batch: copy '{}' named twice", name);
    WeightCopy c = copy_named(name, w.group_size);
    c.min_tokens = 0;
    if (colon != std::string::npos) {
      ++n_with;
      try {
        size_t used = 0;
        c.min_tokens = std::stoll(item.substr(colon + 1), &used);
        if (used != item.size() - colon - 1) throw std::invalid_argument("trailing characters");
      } catch (const std::exception&) {
        fail("--weights-per-batch: '{}' is not NAME:TOKENS", item);
      }
    }
    plan.copies.push_back(c);
  }
  if (plan.copies.empty()) fail("--weights-per-batch: no copies in '{}'", w.per_batch);
  if (n_with != 0 && n_with != int(plan.copies.size()))
    fail("--weights-per-batch: give every copy its fewest tokens (NAME:N) or none (crossovers measured at load)");
  if (n_with == 0) {
    plan.measure = plan.copies.size() > 1;
    plan.copies[0].min_tokens = 1;  // until the measurement sets the policy
    return plan;
  }
  if (plan.copies[0].min_tokens != 1)
    fail("--weights-per-batch: the first copy serves steps from 1 token (NAME:1), not {}", plan.copies[0].min_tokens);
  for (size_t i = 1; i < plan.copies.size(); ++i)
    if (plan.copies[i].min_tokens <= plan.copies[i - 1].min_tokens)
      fail("--weights-per-batch: token thresholds must ascend ({} after {})", plan.copies[i].min_tokens,
           plan.copies[i - 1].min_tokens);
  return plan;
}

std::vector<CopyTiming> measure_copy_ranges(Model& model, Backend& backend, int64_t max_seqs, int64_t max_tokens) {
  const int n_copies = int(model.weight_copies().size());
  const int64_t max_decode = std::min<int64_t>({max_seqs, max_tokens, 256});
  std::vector<int64_t> sizes;
  for (int64_t n = 1; n <= max_decode; n *= 2) sizes.push_back(n);
  if (sizes.back() < max_decode) sizes.push_back(max_decode);
  const KvCacheSpec& kv = backend.kv_spec();
  int64_t fewest_blocks = kv.n_blocks;  // of any KV group's pool
  for (int64_t b : kv.group_blocks) fewest_blocks = std::min(fewest_blocks, b);
  if (max_tokens > max_decode && (max_tokens + kv.block_size - 1) / kv.block_size <= fewest_blocks)
    sizes.push_back(max_tokens);
  std::vector<CopyTiming> out;
  for (int64_t n : sizes) {
    CopyTiming t{.n_tokens = n};
    for (int c = 0; c < n_copies; ++c) {
      model.set_copy_ranges({CopyRange{.min_tokens = 1, .copy = c}});
      t.ms.push_back(time_forward(model, backend, n, /*prefill=*/n > max_decode));
      if (t.ms[size_t(c)] < t.ms[size_t(t.best)]) t.best = c;
    }
    out.push_back(t);
  }
  std::vector<CopyRange> ranges;
  for (const CopyTiming& t : out)
    if (ranges.empty() || ranges.back().copy != t.best)
      ranges.push_back({.min_tokens = ranges.empty() ? 1 : t.n_tokens, .copy = t.best});
  model.set_copy_ranges(ranges);
  return out;
}

std::vector<std::string> copy_report(const Model& model, const std::vector<CopyTiming>& timings) {
  const std::vector<WeightCopyInfo> copies = model.weight_copies();
  const std::vector<CopyRange> ranges = model.copy_ranges();
  std::vector<std::string> lines;
  for (size_t c = 0; c < copies.size(); ++c) {
    std::string serves;
    for (size_t r = 0; r < ranges.size(); ++r) {
      if (ranges[r].copy != int(c)) continue;
      serves += serves.empty() ? "" : ", ";
      serves += r + 1 < ranges.size() ? fmt::format("{}-{}", ranges[r].min_tokens, ranges[r + 1].min_tokens - 1)
                                      : fmt::format("{}+", ranges[r].min_tokens);
    }
    lines.push_back(fmt::format("weights {}: {:.1f} MB, steps of {} tokens", copies[c].name,
                                double(copies[c].bytes) / 1e6, serves.empty() ? "no" : serves));
  }
  for (const CopyTiming& t : timings) {
    std::string row = fmt::format("measured {:>5} tokens:", t.n_tokens);
    for (size_t c = 0; c < t.ms.size(); ++c)
      row += fmt::format(" {} {:.3f} ms{}", copies[c].name, t.ms[c], int(c) == t.best ? " *" : "");
    lines.push_back(row);
  }
  return lines;
}

}  // namespace tf
