// The engine: continuous batching over one model (public API).
//
//   tf::Engine engine(tf::EngineOptions{.model_dir = "models/tiny-main"});
//   tf::RequestId id = engine.add_request({.prompt = "Hello", .sampling = {.max_tokens = 8}});
//   while (engine.has_unfinished())
//     for (const tf::RequestOutput& o : engine.step()) std::cout << o.text;
//
// Every front end (CLI, server, benchmark) drives this same loop; a single request is a
// batch of one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "twofold/request.h"

namespace tf {

class Tokenizer;
struct ModelConfig;
class Model;
struct SpecCostModel;

// Switches of the CUDA backend, for measuring each optimisation alone (`twofold bench`);
// the host backends ignore them.
struct KernelOptions {
  bool cuda_graphs = true;                // record decode steps once, replay them
  std::string attention_kernel = "auto";  // prefill attention: auto | plain | flash
  std::string gemv = "auto";              // small-batch matmul: auto (faster per shape) | cublas | custom
  bool fusion = true;                     // off: fused ops run as separate kernels
  bool fp8_fusion = true;                 // FP8 W8A8 matmuls: activation quantization in the norm, add / GLU in the scale kernel
  bool fp8_handoff = true;                // FP8 W8A8: the epilogue quantizes its output for the next FP8 matmul
  bool fp8_sums_f32 = false;              // FP8 W8A8: unit-scale sums before the scale kernel as F32, not BF16
  bool pdl = true;                        // programmatic dependent launch (overlap of consecutive kernels)
  bool pdl_resident = false;              // PDL also for kernels whose grid is what fits on the GPU at once
  bool pdl_decode = false;                // PDL also in decode steps (one new token per sequence)
  bool pdl_decode_resident = true;        // PDL in decode steps for the kernels whose grid is what fits at once
  bool pdl_timed = true;                  // a step replayed often also recorded with PDL for every kernel; the faster kept
  bool gemv_timed = true;                 // ... and with the near-tie kernels of its quantized GEMVs; the faster kept
  bool cublaslt = true;                   // small-batch matmuls may take a timed cuBLASLt algorithm
  bool lt_split_k = true;                 // cuBLASLt's timed candidates include split-K copies of its heuristic's
  bool decode_mma = true;                 // decode attention on tensor cores (BF16 KV)
  bool decode_cluster = true;             // its key splits (up to 8) merged in a thread block cluster (no combine kernel)
  bool decode_early_keys = true;          // ... its older keys' first tile copied before the previous kernel ends (PDL)
  bool split_gemv = true;                 // W4/W8 one-row decode: also time the k-split GEMVs
  int decode_splits = 0;                  // decode attention key splits per sequence (0 = auto)
  bool moe_mma = true;                    // mixture-of-experts GEMMs on tensor cores
  bool profile = false;                   // time every op on the GPU (tuning_report lists them)
  bool int8_activations = false;          // CPU integer kernels: 8-bit activations instead of 16 (faster, coarser)
  bool bf16_activations = false;          // CPU BF16-weight prefill on AMX tiles, activations rounded to BF16
  bool huge_pages = true;                 // CPU: weights read in place copied onto huge pages (faster decode)
  // Decode steps launched before the previous step's sampled ids reach the host (they go to
  // the next step's batch where they are), so the host's work between steps overlaps the
  // device's: 1 on, 0 off, -1 where the backend's launches return before the work ends (CUDA).
  // Off by default: on an H100 it gained nothing at batch 1 to 256 (the host's part of a step
  // is 0.02-0.3 ms beside 2.3-11 ms of device work; docs/PERF.md, 2026-12-07).
  int overlap_steps = 0;
};

// Speculative decoding: a proposer guesses up to k tokens per sequence, the target scores
// them in the step's packed batch and keeps those it would have produced (lossless: greedy
// ids are those without speculation, sampled tokens have the same distribution).
struct SpecOptions {
  std::string method;           // "" (off) | "ngram" (prompt lookup) | "draft" (a draft model)
  std::string draft_model_dir;  // method "draft": a small model with the target's tokenizer
  int32_t k = 4;                // proposals per sequence and step, at most
  // On: each sequence's proposal length follows its acceptance rate and the measured cost of
  // verifying extra tokens at the step's batch size, including none where it does not pay.
  // Off: k every step (as far as the budget, free blocks and max_tokens allow).
  bool adaptive = true;
  // Adaptive: a file holding the cost model (a `twofold bench --spec ... --json` result, or
  // its "spec_cost_model" object) instead of measuring it at start-up.
  std::string cost_model_file;
  int32_t ngram_min = 1;  // prompt lookup: suffix lengths tried, longest first
  int32_t ngram_max = 3;
  // One width per step: in a step where every running sequence decodes, each sequence's
  // proposals are padded (with tokens that are never verified, whose KV slots are rolled back
  // like rejected ones) to the step's longest, so that the step has one shape a backend that
  // records forwards (CUDA Graphs) replays; adaptive, the step's width is then chosen for the
  // whole batch (spec_policy.h step_width). "auto": on backends that record forwards; "on",
  // "off". Outputs are the same either way.
  std::string uniform_width = "auto";
};

// How a speculating engine proposes, switchable between steps (Engine::set_spec_mode).
struct SpecMode {
  bool enabled = true;   // off: plain decoding (the proposer stays loaded)
  int32_t k = 4;         // proposals per sequence and step, at most
  bool adaptive = true;  // lengths from the cost model (Engine::spec_cost_model)
};

// How the linear weights (q/k/v, o, gate/up, down; the LM head on request) are held on the
// backend; docs/QUANT.md has the formats and the per-step choice.
struct WeightOptions {
  // int8 | int4 | fp8: round-to-nearest at load from the checkpoint's 16-bit weights (or
  // --load-format dummy's random ones); "": as the checkpoint stores them.
  std::string quantization;
  int32_t group_size = 128;       // int4: elements per group along the input dimension
  bool quantize_lm_head = false;  // quantization at load includes an untied LM head
  // Several copies, each step using one by its number of tokens: comma-separated names
  // (stored, bf16, int8, int4, fp8), each with ":N" for the fewest tokens it serves
  // ("int4:1,fp8:64"), or none of them with ":N" to measure the crossovers at load ("int4,fp8").
  // "": one copy.
  std::string per_batch;
  // A GGUF file's quantized matrices dequantized to F32 at load, also where the backend has
  // kernels for their blocks (the CPU: Q8_0, Q4_0, Q4_1, Q4_K), for comparison.
  bool dequantize_gguf = false;
};

struct EngineOptions {
  std::string model_dir;           // a Hugging Face folder, or a GGUF file (or a folder holding one)
  std::string backend = "cpu";     // cpu | ref | cuda
  std::string load_format = "auto";  // auto (safetensors) | dummy (random weights, config.json only)
  WeightOptions weights;           // quantization at load, copies per batch size
  int32_t block_size = 16;         // tokens per KV block
  int32_t n_kv_blocks = 0;         // 0: enough for max_seqs sequences of full context, capped by kv_memory_mb
  int64_t kv_memory_mb = 2048;     // cap on the automatic KV pool size
  std::string kv_dtype = "f32";    // f32 | bf16 | f16 | int8 | fp8 (int8, fp8: a scale per token and head)
  int32_t max_batch_tokens = 512;  // tokens per step (decodes + prefill chunks)
  int32_t max_seqs = 64;           // sequences running at once
  bool enable_prefix_caching = true;  // reuse KV blocks of identical prompt prefixes
  int32_t tensor_parallel = 1;     // ranks the model is sharded over (host backends: threads in this process)
  KernelOptions kernels;            // CUDA switches (defaults: everything on)
  SpecOptions spec;                 // speculative decoding (default: off)
};

// Counters for monitoring (the server's /metrics) and tests.
struct EngineMetrics {
  int32_t n_running = 0;
  int32_t n_waiting = 0;
  int64_t n_preemptions = 0;
  int32_t kv_blocks_total = 0;
  int32_t kv_blocks_used = 0;    // held by sequences
  int32_t kv_blocks_free = 0;    // never used or released without a prefix hash
  int32_t kv_blocks_cached = 0;  // released, kept for prefix hits, evicted when needed
  int64_t prefix_query_tokens = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_hit_tokens = 0;    // of those, served from cached blocks
  // Where step() spends its time, summed over all steps (seconds): scheduling and building
  // the batch, handing the forward to the backend (on a GPU: launching it), waiting for its
  // result (GPU execution not hidden behind the launch), and sampling/streaming outputs.
  int64_t n_steps = 0;
  double schedule_s = 0, launch_s = 0, wait_s = 0, output_s = 0;
  // Steps launched before the previous step's ids had reached the host (KernelOptions::overlap_steps);
  // their scheduling and launch overlap the previous step's execution.
  int64_t n_overlapped_steps = 0;
  // Speculative decoding, summed over requests: verifications of at least one proposal, the
  // proposals verified, and those accepted. Acceptance rate = accepted / draft tokens; mean
  // accepted length (tokens a verification yields, vLLM's definition) = 1 + accepted / drafts.
  int64_t spec_drafts = 0;
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  int32_t spec_kv_blocks_used = 0;  // blocks of the draft model's own KV pool held by sequences
  // Adaptive lengths: steps that ran the per-sequence policy, and quiet steps, which proposed
  // nothing without it (no length could pay for any sequence at that batch size, no probe due).
  int64_t spec_policy_steps = 0;
  int64_t spec_quiet_steps = 0;
};

class Engine {
 public:
  explicit Engine(const EngineOptions& opt);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and queues a request. Throws tf::Error naming the problem (empty prompt,
  // prompt longer than the context, bad sampling parameters).
  RequestId add_request(GenerateRequest req);
  // One iteration: schedule, run the batch, sample, stream. Returns what each request
  // produced in this step (finished requests included once, with finished = true). With
  // overlapped steps (KernelOptions::overlap_steps) the next decode step may already be
  // running when it returns; has_unfinished() stays true until its results are taken.
  std::vector<RequestOutput> step();
  bool has_unfinished() const;
  // Frees the request's KV blocks at once; it finishes with FinishReason::Abort.
  void abort(RequestId id);
  // Changes the kernel switches between steps (the bench measures several in one process).
  void set_kernel_options(const KernelOptions& k);
  // The backend's measured choices (e.g. GEMV or cuBLAS per matmul shape), one line each.
  std::vector<std::string> tuning_report() const;
  // The backend's own memory copy bandwidth in GB/s (read + write), or 0 for host backends.
  double device_copy_bandwidth_gb_s(int64_t bytes = int64_t(1) << 30);
  // Names of the linear weights' copies ("bf16", "int4 g128", ...; one, "as stored", without
  // WeightOptions::per_batch).
  std::vector<std::string> weight_copy_names() const;
  // Every step uses copy `index` (bench variants per precision); -1: each step the copy for
  // its number of tokens, as the options gave or the load measured.
  void pin_weight_copy(int index);
  // The copies (name, bytes), the token ranges each serves, and the timings measured at load
  // when the crossovers were measured: lines for stderr and `twofold bench`.
  std::vector<std::string> weight_copy_report() const;

  // Runs `ids` as one sequence outside the scheduler (call between steps, not during) and
  // returns F32 logits of every position ([n, n_vocab], all_positions) or of the last one.
  // For `twofold logits` and perplexity; throws tf::Error if the sequence does not fit.
  std::vector<float> score(const std::vector<int32_t>& ids, bool all_positions);

  const std::vector<int32_t>& prompt_ids(RequestId id) const;
  const std::vector<int32_t>& output_ids(RequestId id) const;
  RequestStats stats(RequestId id) const;
  // Forgets a finished request (its ids and stats).
  void release(RequestId id);

  const Tokenizer& tokenizer() const;
  const ModelConfig& config() const;
  Model& model();
  EngineMetrics metrics() const;
  int64_t kv_bytes_per_token() const;  // K and V of one token, all layers, scales included
  int32_t kv_block_size() const;
  // Blocks not held by any sequence (free + cached; cached ones are evicted on demand).
  int32_t n_kv_blocks_free() const;
  int32_t n_kv_blocks_total() const;
  // "" when the scheduler's, the KV manager's and the proposer's invariants hold, else the
  // first violation (for tests; walks every block).
  std::string check_invariants() const;

  // Speculative decoding (EngineOptions::spec). The cost model adaptive lengths use (empty
  // when none was measured or loaded); a fresh measurement: the time of a target step in which
  // each of `batch` sequences verifies k proposals, for every pair of batches x ks (forwards
  // over scratch sequences, the median of 7 after 2 warm-ups), and of a draft step per batch,
  // taken between steps; and the means to switch both between steps (the bench compares
  // modes in one process). set_spec_mode with adaptive needs a cost model: it measures one
  // (batch sizes up to max_seqs) when there is none. Both throw tf::Error when the engine was
  // built without speculation.
  const SpecCostModel& spec_cost_model() const;
  SpecCostModel measure_spec_cost_model(const std::vector<int32_t>& batches, const std::vector<int32_t>& ks);
  void set_spec_cost_model(const SpecCostModel& m);
  void set_spec_mode(const SpecMode& m);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tf
