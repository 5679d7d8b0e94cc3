// Engine internals: the per-request state and the pieces one step wires together.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "kv/kv_manager.h"
#include "model/arch/model.h"
#include "model/tokenizer/tokenizer.h"
#include "sample/json_machine.h"
#include "sample/json_schema.h"
#include "sample/regex_dfa.h"
#include "sample/schema_machine.h"
#include "sample/token_constraint.h"
#include "sample/sampler.h"
#include "sample/stop_matcher.h"
#include "engine/forward_runner.h"
#include "engine/weight_copies.h"
#include "sched/scheduler.h"
#include "spec/proposer.h"
#include "spec/spec_policy.h"
#include "twofold/engine.h"

namespace tf {

using Clock = std::chrono::steady_clock;

// True when a request's row must come to the host: the penalties (reading its history), the
// logit bias and an output format's mask change it, and logprobs read the raw row. Everything
// else is sampled where the logits live.
inline bool needs_host_row(const SamplingParams& p) {
  return adjusts_logits(p) || p.logprobs >= 0 || p.prompt_logprobs >= 0 || p.output_format != OutputFormat::Text;
}

// True when sampling needs nothing but the argmax of the raw logits.
inline bool plain_greedy(const SamplingParams& p) { return p.greedy() && !needs_host_row(p); }

inline BackendOptions backend_options(const KernelOptions& k) {
  return BackendOptions{.graphs = k.cuda_graphs, .attention = k.attention_kernel, .gemv = k.gemv,
                        .fusion = k.fusion, .fp8_fusion = k.fp8_fusion, .fp8_handoff = k.fp8_handoff,
                        .fp8_sums_f32 = k.fp8_sums_f32, .pdl = k.pdl,
                        .pdl_resident = k.pdl_resident, .pdl_decode = k.pdl_decode, .pdl_decode_resident = k.pdl_decode_resident, .pdl_timed = k.pdl_timed, .gemv_timed = k.gemv_timed, .cublaslt = k.cublaslt, .lt_split_k = k.lt_split_k,
                        .decode_mma = k.decode_mma, .decode_cluster = k.decode_cluster, .decode_early_keys = k.decode_early_keys, .decode_splits = k.decode_splits,
                        .split_gemv = k.split_gemv, .moe_mma = k.moe_mma,
                        .profile = k.profile,
                        .int8_activations = k.int8_activations, .bf16_activations = k.bf16_activations,
                        .huge_pages = k.huge_pages};
}

inline DType parse_kv_dtype(const std::string& s) {
  if (s == "f32") return DType::F32;
  if (s == "bf16") return DType::BF16;
  if (s == "f16") return DType::F16;
  if (s == "int8") return DType::I8;
  if (s == "fp8") return DType::FP8;
  fail("unknown KV dtype '{}' (expected f32, bf16, f16, int8 or fp8)", s);
}

// A request's speculative decoding: its own RNG for sampled proposals and verification, its
// acceptance rate, this step's proposals, and counters.
struct SpecState {
  explicit SpecState(uint64_t seed) : rng(seed ^ 0x5bd1e9955bd1e995ull) {}
  Rng rng;
  AcceptanceRate acceptance;
  int32_t n_idle = 0;                   // steps since the policy last proposed or probed
  // The engine's quiet-step counts (Engine::Impl::spec_quiet_*) this state has taken in: the
  // steps since then count as idle ones (acceptance.idle(), n_idle) when it is next looked at.
  int64_t quiet_idle_seen = 0, quiet_probe_seen = 0;
  std::vector<int32_t> proposal;        // [n] offered to the scheduler this step
  int32_t n_real = 0;                   // its first n_real are proposals; the rest pad it to the step's width
  std::vector<std::vector<float>> q;    // [n][n_vocab] their draft distributions (empty: point masses)
  int32_t n_drafts = 0, n_draft_tokens = 0, n_accepted = 0;
};

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
  std::unique_ptr<TokenConstraint> constraint;  // OutputFormat other than Text
  int32_t max_len = 0;  // prompt + output never exceeds this (context and max_tokens)
  int32_t n_cached_prompt = -1;  // prompt tokens its first schedule found computed (-1: not yet scheduled)
  std::vector<SampledLogprobs> prompt_logprobs;  // SamplingParams::prompt_logprobs: [prompt size - 1]
  bool finished = false;
  FinishReason finish_reason = FinishReason::None;
  Clock::time_point arrival, first_token, finish;
  std::unique_ptr<SpecState> spec;  // set when speculation is on
};

struct Engine::Impl {
  explicit Impl(const EngineOptions& opt);

  RequestId add(GenerateRequest req);
  std::vector<RequestOutput> step();
  void abort(RequestId id);
  RequestState& state(RequestId id);
  const RequestState& state(RequestId id) const;
  // The constraint of an output format (null for Text); tf::Error naming the schema's fault.
  std::unique_ptr<TokenConstraint> make_constraint(const SamplingParams& p);

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
  // Constrained outputs: the vocabulary's trie (made at the first such request), the JSON
  // object masks, and the last schemas' compiled forms and masks, by schema text.
  std::shared_ptr<const TokenTrie> token_trie;
  std::shared_ptr<MaskSet<JsonMachine>> json_masks;
  struct SchemaMasks {
    std::shared_ptr<const JsonSchema> schema;
    std::shared_ptr<MaskSet<SchemaMachine>> masks;
  };
  std::unordered_map<std::string, SchemaMasks> schema_masks;
  struct RegexMasks {  // OutputFormat::Regex, by pattern
    std::shared_ptr<const RegexDfa> dfa;
    std::shared_ptr<MaskSet<RegexMachine>> masks;
  };
  std::unordered_map<std::string, RegexMasks> regex_masks;
  int64_t n_steps = 0;
  double schedule_s = 0, launch_s = 0, wait_s = 0, output_s = 0;  // see EngineMetrics
  TensorView ids_dev;              // greedy ids where the logits live (argmax_rows)
  std::vector<int32_t> ids_host;
  // A step whose forward and sampling are launched and whose results are not yet read.
  struct LaunchedStep {
    ScheduleOutput so;
    bool ids_ready = false;   // its ids are on their way to the host (else logits_host holds its rows)
    int slot = 0;             // Backend::copy_ids_async slot of its ids
    bool committed = false;   // committed with placeholder tokens (the step after it is launched)
    Clock::time_point t0;     // when its scheduling began
  };
  // The token a sequence holds for its newest token while that token is still on the device;
  // never computed and replaced by finish_step (the next step's batch takes the real one).
  static constexpr int32_t kPlaceholderToken = 0;
  std::optional<LaunchedStep> inflight;  // the overlapped step launched by the last step()
  int ids_slot = 0;                      // the copy slot of the next launch
  int64_t n_overlapped_steps = 0;        // see EngineMetrics
  std::unique_ptr<Proposer> proposer;  // speculative decoding; null when off
  SpecMode spec_mode;                  // how it proposes now (from EngineOptions::spec)
  SpecCostModel spec_costs;            // adaptive proposal lengths; empty when none measured or loaded
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted = 0;  // see EngineMetrics
  AcceptanceRate spec_acceptance{0.98};  // over every sequence: a new sequence's prior
  int64_t spec_idle_steps = 0;           // one-width steps since the policy last proposed or probed
  StepCalibration spec_calibration;      // adaptive: measured step times against the cost model's
  SpeculationGate spec_gate;             // adaptive: tokens/s realised with and without proposals
  int32_t spec_draft_steps = 0;          // this step's proposal steps (the longest proposal asked for)
  // Adaptive: steps in which the policy proposes nothing for any sequence without looking at
  // them (propose()): the `left` next steps at batch size `batch` while no request is added
  // (next_id stays; a probe due or the costs moving end it earlier: see propose()).
  struct SpecQuiet {
    int32_t batch = 0;
    RequestId next_id = 0;
    int64_t left = 0;
    bool uniform = false;      // counted as one-width idle steps (spec_idle_steps), else per sequence
    bool count_probe = false;  // idle steps count toward a probe (some length could pay)
  };
  SpecQuiet spec_quiet;
  // Steps without proposals that no sequence's state took in yet: each sequence catches up
  // when next looked at (sync_quiet). idle: its acceptance rate's decay; probe: its n_idle.
  int64_t spec_quiet_idle = 0, spec_quiet_probe = 0;
  int64_t spec_policy_steps = 0, spec_quiet_steps = 0;  // see EngineMetrics

  // engine_spec.cpp: speculative decoding inside the step.
  void init_spec();
  // Offers proposals to the scheduler for every decoding sequence that gets some this step.
  void propose();
  // Applies the quiet steps since `s` last looked (spec_quiet_idle, spec_quiet_probe).
  void sync_quiet(SpecState& s) const;
  // Verifies the proposals of `q` against its logits rows [row0, row0 + 1 + q.n_spec) and
  // emits the kept ones and the token after them (until a stop); returns the proposals appended.
  // ids_ready: the rows came back as greedy ids (ids_host), else as logits (logits_host).
  int32_t emit_verified(RequestState& r, const ScheduledSeq& q, int32_t row0, bool ids_ready, RequestOutput& o);
  // Whether this step's proposals are padded to one width (SpecOptions::uniform_width), with
  // n_decoding of the running sequences decoding.
  bool uniform_step(int32_t n_decoding) const;
  // Seconds of a target step in which `batch` scratch sequences verify k proposals each, for
  // each k of ks (interleaved rounds, the median of each); rounds 0: only the two unreported
  // runs of each (first sight and recording), returns nothing.
  std::vector<double> time_verify_steps(int32_t batch, const std::vector<int32_t>& ks, int rounds = 7);
  SpecCostModel measure_spec_costs(const CostGrid& grid);
  // On a backend that records forwards: runs the verification steps and proposer steps of
  // the shapes the grid did not time (warm_spec_shapes in engine_spec.cpp).
  void warm_spec_shapes(const CostGrid& grid);
  // On a backend that records forwards: the proposer's catch-up shapes (Proposer::warm_catch_up).
  void warm_catch_up();
  void set_spec_costs(const SpecCostModel& m);
  // Adaptive: feeds a step of decodes and verifications only, which took `seconds` from the
  // start of propose() to its outputs and emitted `tokens`, to spec_calibration and spec_gate.
  void calibrate(const ScheduleOutput& so, double seconds, int64_t tokens);
  void set_spec_mode(const SpecMode& m);
  std::vector<CopyRange> copy_policy;  // which weight copy steps use (as given or measured at load)
  std::vector<CopyTiming> copy_timings;  // the measurements behind it, when measured

 private:
  Batch build_batch(const ScheduleOutput& so) const;
  bool scores_prompt_rows(const RequestState& r, const ScheduledSeq& q) const;
  void take_prompt_logprobs(RequestState& r, const ScheduledSeq& q, int32_t row);
  // Starts the step's results toward the host: greedy ids or sampled ids where the logits
  // live (returns true; finish_step reads them from copy slot `slot`), else the logits
  // themselves (copied into logits_host before it returns).
  bool launch_results(const ScheduleOutput& so, const TensorView& logits, int slot);
  // Builds, runs (or launches) and samples the step `so`; `ids`: token ids still on the device.
  LaunchedStep launch_step(ScheduleOutput so, const DeviceTokenIds* ids, Clock::time_point t0);
  bool overlap_on() const;
  bool can_overlap(const LaunchedStep& cur) const;
  std::optional<LaunchedStep> launch_overlapped(LaunchedStep& cur);
  // Reads a launched step's results, emits its tokens, commits it (unless committed) and
  // removes the requests that finished.
  void finish_step(const LaunchedStep& s, std::vector<RequestOutput>& outs);
  // Samples one token for a sequence from logits row `row` (or takes ids_host[row]).
  void emit_sampled(RequestState& r, int32_t row, bool ids_ready, RequestOutput& o);
  // Appends a sampled token and checks every stop condition; fills `o`.
  void on_token(RequestState& r, int32_t token, RequestOutput& o);
  void finish(RequestState& r, FinishReason why, RequestOutput& o);
};

}  // namespace tf
