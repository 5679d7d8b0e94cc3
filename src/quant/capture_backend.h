// Calibration activations without touching the model: a Backend decorator that forwards
// every op to the backend it wraps and, on the way, records the input rows of each matmul,
// keyed by the weight's data pointer (one record per linear layer). For matmul_fused with an
// RMSNorm prologue the recorded rows are the normalized ones, what the weight multiplies:
// the decorator runs the norm itself into the call's scratch `h`, then the rest of the fused
// op on h. Rows are kept as F32, the first `max_rows` a weight sees (in token order across
// forwards; CaptureOptions::skip_first leaves out each call's first rows), so memory stays
// bounded by max_rows * k * 4 bytes per weight.
//
// Mixture-of-experts layers: moe_experts records, per expert, the rows routed to it (what its
// gate|up rows multiply) and their silu(gate) * up (what its down rows multiply), computed on
// the host from the expert's weights as held (dense or quantized: the wrapped backend must
// hold them in host memory, as the CPU and reference backends do).
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
  // Rows left out at the start of every matmul call (dense layers; not the experts' records):
  // with one sequence per forward from position 0, the first positions, whose activations
  // (the attention sink's) are unlike the rest.
  int64_t skip_first = 0;
};

class CaptureBackend : public ForwardingBackend {
 public:
  struct Record {
    const void* weight = nullptr;  // the matmul's w.data
    int64_t k = 0;                 // input features
    int64_t n_rows = 0;            // rows kept (<= max_rows)
    int64_t n_seen = 0;            // rows offered (after skip_first), kept or not
    std::vector<float> rows;       // [n_rows, k]
  };

  CaptureBackend(Backend& inner, const CaptureOptions& opt) : ForwardingBackend(inner), opt_(opt) {}

  void matmul(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out) override;
  void matmul_fused(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out,
                    const MatmulFusion& f) override;
  void moe_experts(const TensorView& x, const TensorView& ids, const TensorView& weights, const TensorView& w_gate_up,
                   const TensorView& w_down, const MoeParams& p, const TensorView& out) override;

  // One mixture-of-experts layer's inputs per expert.
  struct ExpertRecords {
    const void* w_gate_up = nullptr;  // the layer's stacked weights
    std::vector<Record> gate_up;      // [n_experts]: rows routed to expert e [n_rows, d_model]
    std::vector<Record> down;         // [n_experts]: their silu(gate) * up [n_rows, d_ff]
  };
  GraphStep graph_begin(uint64_t key) override { return GraphStep::Eager; }
  void graph_end() override {}

  // Records in the order their weights were first seen; nullptr for a weight never seen.
  const std::vector<Record>& records() const { return records_; }
  const Record* find(const void* weight) const;
  // The mixture-of-experts layers in the order their weights were first seen.
  const std::vector<ExpertRecords>& expert_records() const { return experts_; }
  void clear() {
    records_.clear();
    experts_.clear();
  }

 private:
  void record(const TensorView& w, const TensorView& x);
  static void append(Record& r, const float* rows, int64_t n);  // n more rows, kept

  CaptureOptions opt_;
  std::vector<Record> records_;
  std::vector<ExpertRecords> experts_;
};

}  // namespace tf
