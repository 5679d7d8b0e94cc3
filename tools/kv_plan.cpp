// `twofold kv-plan`: how much KV cache a model needs and how many sequences fit beside its
// weights, with the formula written out in real numbers:
//   KV bytes = batch x seq_len x layers x kv_heads x head_dim x 2 (K and V) x bytes per element
// (INT8 adds one F32 scale per token, head and K/V: head_dim + 4 bytes per row.)
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "model/arch/registry.h"
#include "tools/commands.h"

namespace tf::cli {
namespace {

struct Args {
  std::string dir;
  double gpu_mem_gb = 80;
  double mem_util = 0.90;
  std::string kv_dtype = "bf16";
  std::string weight_dtype = "bf16";
  int64_t ctx = 0;  // 0 = the model's max_position_embeddings
  int32_t block_size = 16;
  int32_t max_batch_tokens = 2048;
  bool json = false;
};

// Bytes of one K or V row (one token, one KV head) in the cache, scales included.
int64_t kv_row_bytes(const std::string& dt, int64_t head_dim) {
  if (dt == "f32") return head_dim * 4;
  if (dt == "bf16" || dt == "f16") return head_dim * 2;
  if (dt == "int8" || dt == "fp8") return head_dim + 4;
  fail("--kv-dtype must be f32, bf16, f16, int8 or fp8, got '{}'", dt);
}

int64_t weight_elem_bytes(const std::string& dt) {
  if (dt == "f32") return 4;
  if (dt == "bf16" || dt == "f16") return 2;
  fail("--weight-dtype must be f32, bf16 or f16, got '{}'", dt);
}

std::vector<int64_t> kv_heads_list(const ModelConfig& cfg) {
  std::vector<int64_t> h;
  for (int64_t il = 0; il < cfg.n_layers; ++il) h.push_back(cfg.kv_heads_of(il));
  return h;
}

std::string kv_heads_list_str(const ModelConfig& cfg) { return fmt::format("{}", fmt::join(kv_heads_list(cfg), ", ")); }

int run_kv_plan(const Args& a) {
  // From config.json (or GGUF metadata) alone (the weight table gives every shape), so a plan can be made for a
  // model before its weights are downloaded, or for a `--load-format dummy` shape.
  const ModelConfig cfg = load_model_config(a.dir);
  const int64_t params = weight_table(cfg).n_params();
  if (a.gpu_mem_gb <= 0) fail("--gpu-mem must be positive, got {}", a.gpu_mem_gb);
  if (a.mem_util <= 0 || a.mem_util > 1) fail("--mem-util must be in (0, 1], got {}", a.mem_util);
  const int64_t ctx = a.ctx > 0 ? a.ctx : cfg.max_position;
  const int64_t row = kv_row_bytes(a.kv_dtype, cfg.head_dim);
  // A model mixing sliding-window and full-attention layers (Gemma 3) keeps the whole context
  // in its full layers only; each sliding layer holds at most the blocks its window spans
  // (the engine's KV groups free the others).
  // Each layer holds its own KV heads (a pruned model's differ): the formula's layers x
  // kv_heads is their sum over the layers, kv_heads_full and kv_heads_sliding.
  int64_t n_sliding = 0, kv_heads_full = 0, kv_heads_sliding = 0, max_qkv = 0, max_heads = 0, max_ff = 0;
  for (int64_t il = 0; il < cfg.n_layers; ++il) {
    const bool sliding = cfg.mixed_attention() && cfg.layer_attention(il) == LayerAttention::Sliding;
    n_sliding += sliding;
    (sliding ? kv_heads_sliding : kv_heads_full) += cfg.kv_heads_of(il);
    max_qkv = std::max(max_qkv, (cfg.heads_of(il) + 2 * cfg.kv_heads_of(il)) * cfg.head_dim);
    max_heads = std::max(max_heads, cfg.heads_of(il) * cfg.head_dim);
    max_ff = std::max(max_ff, cfg.d_ff_of(il));
  }
  const bool per_layer = cfg.non_uniform();
  const int64_t per_token = kv_heads_full * 2 * row;
  // Paged: a sequence holds whole blocks.
  const int64_t blocks_per_seq = (ctx + a.block_size - 1) / a.block_size;
  const int64_t window_blocks =
      n_sliding > 0 ? std::min<int64_t>(blocks_per_seq, (cfg.sliding_window - 1 + a.block_size - 1) / a.block_size + 1)
                    : 0;
  const int64_t sliding_per_seq = window_blocks * a.block_size * kv_heads_sliding * 2 * row;
  const int64_t per_seq = blocks_per_seq * a.block_size * per_token + sliding_per_seq;
  const int64_t weights = params * weight_elem_bytes(a.weight_dtype);
  // Activations of one step of max_batch_tokens tokens (F32 on the CPU, an upper bound for
  // 16-bit GPU activations): residual, norm output, qkv, attention, gate|up, SwiGLU, delta, and
  // the logits of at most max_batch_tokens rows; qkv, attention and the MLP's of the widest layer.
  const int64_t act = int64_t(a.max_batch_tokens) * (4 * cfg.d_model + max_qkv + max_heads + 3 * max_ff + cfg.n_vocab) * 4;
  const double total = a.gpu_mem_gb * 1e9 * a.mem_util;
  const double for_kv = total - double(weights) - double(act);
  const int64_t n_seqs = for_kv > 0 ? int64_t(std::floor(for_kv / double(per_seq))) : 0;
  // blocks of the full-attention layers (all layers for most models) left once the
  // sequences that fit have their sliding-window blocks
  const int64_t n_blocks =
      for_kv > 0 ? int64_t((for_kv - double(n_seqs * sliding_per_seq)) / double(a.block_size * per_token)) : 0;
  const bool scaled = a.kv_dtype == "int8" || a.kv_dtype == "fp8";  // one byte and a row scale
  const int64_t elem = scaled ? 1 : row / cfg.head_dim;

  if (a.json) {
    std::printf("%s\n", json_dump(nlohmann::json{
        {"kv_bytes_per_token", per_token}, {"kv_bytes_per_sequence", per_seq}, {"context", ctx},
        {"weight_bytes", weights}, {"activation_bytes", act}, {"memory_bytes", int64_t(total)},
        {"kv_budget_bytes", int64_t(std::max(0.0, for_kv))}, {"max_sequences", n_seqs},
        {"kv_blocks", n_blocks}, {"kv_dtype", a.kv_dtype}, {"sliding_window_layers", n_sliding},
        {"sliding_window_bytes_per_sequence", sliding_per_seq}, {"kv_heads_per_layer", kv_heads_list(cfg)}}).c_str());
    return 0;
  }
  const int64_t n_full = cfg.n_layers - n_sliding;
  if (per_layer) {
    std::printf("model %s: %lld layers with their own widths, KV heads per layer [%s], head_dim %lld, %lld "
                "parameters\n", a.dir.c_str(), (long long)cfg.n_layers, kv_heads_list_str(cfg).c_str(),
                (long long)cfg.head_dim, (long long)params);
    std::printf("KV per token   = (kv_heads summed over the %s) x 2 (K,V) x %s\n",
                n_sliding ? "full-attention layers" : "layers", scaled ? "(head_dim + 4 scale bytes)" : "head_dim x bytes");
  } else {
    std::printf("model %s: %lld layers, %lld KV heads, head_dim %lld, %lld parameters\n", a.dir.c_str(),
                (long long)cfg.n_layers, (long long)cfg.n_kv_heads, (long long)cfg.head_dim, (long long)params);
    std::printf("KV per token   = %s x kv_heads x 2 (K,V) x %s\n", n_sliding ? "full-attention layers" : "layers",
                scaled ? "(head_dim + 4 scale bytes)" : "head_dim x bytes");
  }
  // layers x kv_heads, or their sum over the layers when they differ
  const std::string layer_heads = per_layer ? std::to_string(kv_heads_full)
                                            : fmt::format("{} x {}", n_full, cfg.n_kv_heads);
  if (scaled)
    std::printf("               = %s x 2 x (%lld + 4) = %lld bytes\n", layer_heads.c_str(), (long long)cfg.head_dim,
                (long long)per_token);
  else
    std::printf("               = %s x 2 x %lld x %lld = %lld bytes\n", layer_heads.c_str(), (long long)cfg.head_dim,
                (long long)elem, (long long)per_token);
  if (n_sliding)
    std::printf("sliding-window layers: %lld, each holding at most %lld blocks (window %lld) per sequence = %.3f MB "
                "per sequence in all\n",
                (long long)n_sliding, (long long)window_blocks, (long long)cfg.sliding_window,
                double(sliding_per_seq) / 1e6);
  std::printf("KV per sequence (%lld tokens, blocks of %d) = %lld blocks x %d x %lld%s = %.3f MB\n", (long long)ctx,
              a.block_size, (long long)blocks_per_seq, a.block_size, (long long)per_token,
              n_sliding ? " + the sliding-window layers'" : "", double(per_seq) / 1e6);
  std::printf("memory         = %.4g GB x %.2f utilisation = %.3f GB\n", a.gpu_mem_gb, a.mem_util, total / 1e9);
  std::printf("  weights      = %lld parameters x %lld bytes (%s) = %.3f GB\n", (long long)params,
              (long long)weight_elem_bytes(a.weight_dtype), a.weight_dtype.c_str(), double(weights) / 1e9);
  std::printf("  activations  ~ %.3f GB (one step of %d tokens)\n", double(act) / 1e9, a.max_batch_tokens);
  std::printf("  left for KV  = %.3f GB = %lld blocks\n", std::max(0.0, for_kv) / 1e9, (long long)n_blocks);
  std::printf("sequences that fit at full context: %lld (batch x seq_len x layers x kv_heads x head_dim x 2 x bytes%s:\n"
              "  %lld x %lld x %s x %lld x 2 x %s = %.3f GB)\n",
              (long long)n_seqs, n_sliding ? ", layers = full-attention ones, plus the windows" : "", (long long)n_seqs,
              (long long)ctx, layer_heads.c_str(), (long long)cfg.head_dim,
              scaled ? "(1 + 4/head_dim)" : std::to_string(elem).c_str(),
              double(n_seqs) * double(per_seq) / 1e9);
  std::printf("reserving max length instead of paging fits the same count at full length, but a paged\n"
              "cache holds sequences of average length L in ctx/L times as many.\n");
  if (n_seqs == 0) std::printf("warning: not even one full-context sequence fits; lower --ctx%s\n", scaled ? "" : " or use --kv-dtype int8");
  return 0;
}

}  // namespace

void add_kv_plan(CLI::App& app, Runner& run) {
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("kv-plan", "KV-cache bytes per token and sequence, and how many sequences fit");
  c->add_option("-m,--model", a->dir, "Model folder or GGUF file")->required()->check(CLI::ExistingPath);
  c->add_option("--gpu-mem", a->gpu_mem_gb, "Device memory in GB")->capture_default_str();
  c->add_option("--mem-util", a->mem_util, "Fraction of memory the engine may use")->capture_default_str();
  c->add_option("--kv-dtype", a->kv_dtype, "KV element type: f32, bf16, f16, int8, fp8 (E4M3)")->capture_default_str();
  c->add_option("--weight-dtype", a->weight_dtype, "Weight type on the device: bf16, f16, f32")->capture_default_str();
  c->add_option("--ctx", a->ctx, "Tokens per sequence (default: the model's context)");
  c->add_option("--block-size", a->block_size, "Tokens per KV block")->capture_default_str();
  c->add_option("--max-batch-tokens", a->max_batch_tokens, "Tokens per step (activation memory)")->capture_default_str();
  c->add_flag("--json", a->json, "Print one JSON object");
  c->callback([a, &run] { run = [a] { return run_kv_plan(*a); }; });
}

}  // namespace tf::cli
