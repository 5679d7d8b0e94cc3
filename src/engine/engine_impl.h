// Engine internals: the per-request state and the pieces one step wires together.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "kv/kv_manager.h"
#include "model/arch/model.h"
#include "model/tokenizer/tokenizer.h"
#include "sample/sampler.h"
#include "sample/stop_matcher.h"
#include "engine/weight_copies.h"
#include "sched/scheduler.h"
#include "twofold/engine.h"

namespace tf {

using Clock = std::chrono::steady_clock;

struct RequestState {
  RequestId id = -1;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
  std::vector<int32_t> all_tokens;  // prompt + output: what the scheduler computes; it and the
                                    // KV manager read it by pointer until sched->remove(id)
  SamplingParams params;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<StreamDecoder> decoder;
  std::unique_ptr<StopMatcher> stop;
  int32_t max_len = 0;  // prompt + output never exceeds this (context and max_tokens)
  bool finished = false;
  FinishReason finish_reason = FinishReason::None;
  Clock::time_point arrival, first_token, finish;
};

struct Engine::Impl {
  explicit Impl(const EngineOptions& opt);

  RequestId add(GenerateRequest req);
  std::vector<RequestOutput> step();
  void abort(RequestId id);
  RequestState& state(RequestId id);
  const RequestState& state(RequestId id) const;

  // Runs `ids` as one sequence through the model in chunks (its blocks are taken from the
  // pool and given back); returns logits of every position ([n, n_vocab]) or of the last.
  std::vector<float> score(const std::vector<int32_t>& ids, bool all_positions);

  EngineOptions opt;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<KvManager> kv;
  std::unique_ptr<Scheduler> sched;
  std::unordered_map<RequestId, RequestState> requests;
  std::vector<RequestOutput> pending;  // aborts to report at the next step
  RequestId next_id = 0;
  std::vector<float> logits_host;
  int64_t n_steps = 0;
  double schedule_s = 0, launch_s = 0, wait_s = 0, output_s = 0;  // see EngineMetrics
  TensorView ids_dev;              // greedy ids where the logits live (argmax_rows)
  std::vector<int32_t> ids_host;
  std::vector<CopyRange> copy_policy;  // which weight copy steps use (as given or measured at load)
  std::vector<CopyTiming> copy_timings;  // the measurements behind it, when measured

 private:
  Batch build_batch(const ScheduleOutput& so) const;
  // Appends a sampled token and checks every stop condition; fills `o`.
  void on_token(RequestState& r, int32_t token, RequestOutput& o);
  void finish(RequestState& r, FinishReason why, RequestOutput& o);
};

}  // namespace tf
