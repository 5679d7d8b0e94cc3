// Copies of the linear weights per step size (docs/QUANT.md, "Precision per step"): the
// options parsed into the loader's copies, and the crossovers measured at load.
//
// Measuring: for each size n in 1, 2, 4, ... up to the most sequences a step decodes (at most
// 256), and the largest step as one prefill chunk,
// every copy runs the model's forward over n one-token sequences (run_forward: padded and
// replayed as the engine's own decode steps are), timed after warm-up as the best of a few
// runs; each size takes its fastest copy, and a step of n tokens uses the copy of the largest
// measured size not above n. Attention costs the same in every copy, so what differs is the
// linear layers, which is what the choice is about.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/arch/model.h"
#include "twofold/engine.h"

namespace tf {

struct CopyPlan {
  std::vector<WeightCopy> copies;  // empty: one copy as stored
  bool measure = false;            // no crossovers given: measure them at load
};

// WeightOptions -> the loader's copies. Throws tf::Error naming the option: an unknown name,
// thresholds on some entries only, a first threshold other than 1, thresholds not ascending,
// a copy named twice, quantization together with per_batch.
CopyPlan plan_weight_copies(const WeightOptions& w);

struct CopyTiming {
  int64_t n_tokens = 0;
  std::vector<double> ms;  // [copy] per forward
  int best = 0;
};

// Times every copy at the sizes above (decode steps up to max_seqs sequences, one chunk of
// max_tokens) on `model`, whose KV pool on `backend` is set up and unused (the forwards write
// into it), and sets the model's policy from the fastest copy per size. Returns the
// measurements, by size.
std::vector<CopyTiming> measure_copy_ranges(Model& model, Backend& backend, int64_t max_seqs, int64_t max_tokens);

// "int4 g128 (3.6 GB): steps of 1-31 tokens" ... and the timing table, one line each.
std::vector<std::string> copy_report(const Model& model, const std::vector<CopyTiming>& timings);

}  // namespace tf
