// Calibration activations without touching the model: a Backend decorator that forwards
// every op to the backend it wraps and, on the way, records the input rows of each matmul,
// keyed by the weight's data pointer (one record per linear layer). For matmul_fused with an
// RMSNorm prologue the recorded rows are the normalized ones, what the weight multiplies:
// the decorator runs the norm itself into the call's scratch `h`, then the rest of the fused
// op on h. Rows are kept as F32, the first `max_rows` a weight sees (in token order across
// forwards), so memory stays bounded by max_rows * k * 4 bytes per weight.
//
// Forwards never replay recorded graphs through it (graph_begin answers Eager), so every
// step's ops are seen.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/forwarding_backend.h"

namespace tf {

struct CaptureOptions {
  int64_t max_rows = 512;  // input rows kept per weight
};

class CaptureBackend : public ForwardingBackend {
 public:
  struct Record {
    const void* weight = nullptr;  // the matmul's w.data
    int64_t k = 0;                 // input features
    int64_t n_rows = 0;            // rows kept (<= max_rows)
    int64_t n_seen = 0;            // rows offered, kept or not
    std::vector<float> rows;       // [n_rows, k]
  };

  CaptureBackend(Backend& inner, const CaptureOptions& opt) : ForwardingBackend(inner), opt_(opt) {}

  void matmul(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out) override;
  void matmul_fused(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out,
                    const MatmulFusion& f) override;
  GraphStep graph_begin(uint64_t key) override { return GraphStep::Eager; }
  void graph_end() override {}

  // Records in the order their weights were first seen; nullptr for a weight never seen.
  const std::vector<Record>& records() const { return records_; }
  const Record* find(const void* weight) const;
  void clear() { records_.clear(); }

 private:
  void record(const TensorView& w, const TensorView& x);

  CaptureOptions opt_;
  std::vector<Record> records_;
};

}  // namespace tf
