// `twofold info`: what a model folder or GGUF file holds, without running it.
#include <cstdio>
#include <map>

#include "backend/cpu/isa.h"
#include "core/host_threads.h"
#include "core/huge_pages.h"
#include "model/arch/registry.h"
#include "model/gguf/gguf_file.h"
#include "tools/commands.h"

namespace tf::cli {
namespace {

// A GGUF file's tensor types as stored (twofold dequantizes the block types at load).
void print_gguf_types(const std::string& path) {
  const GgufFile f(path);
  struct Count { int64_t tensors = 0, params = 0, bytes = 0; };
  std::map<std::string, Count> by_type;
  for (const GgufTensor& t : f.tensors()) {
    Count& c = by_type[std::string(t.type_name())];
    ++c.tensors;
    c.params += t.numel();
    c.bytes += int64_t(t.nbytes);
  }
  std::printf("GGUF file:        %s (version %u, %zu tensors, %zu metadata keys)\n", path.c_str(), f.version(),
              f.tensors().size(), f.metadata().size());
  for (const auto& [type, c] : by_type)
    std::printf("  stored %-8s  %lld tensors, %lld parameters, %lld bytes\n", type.c_str(), (long long)c.tensors,
                (long long)c.params, (long long)c.bytes);
}

// A pruned model's per-layer widths (config.json's layer_* arrays), one line per layer,
// with each layer's share of the unpruned widths.
void print_layer_widths(const ModelConfig& cfg) {
  std::printf("per-layer widths: layer  query heads  kv heads  intermediate  (kept of %lld / %lld / %lld)\n",
              (long long)cfg.n_heads, (long long)cfg.n_kv_heads, (long long)cfg.d_ff);
  int64_t heads = 0, ff = 0;
  for (int64_t il = 0; il < cfg.n_layers; ++il) {
    std::printf("                  %5lld  %11lld  %8lld  %12lld%s\n", (long long)il, (long long)cfg.heads_of(il),
                (long long)cfg.kv_heads_of(il), (long long)cfg.d_ff_of(il), cfg.layer_is_moe(il) ? " (experts)" : "");
    heads += cfg.heads_of(il);
    ff += cfg.d_ff_of(il);
  }
  std::printf("                  kept: %.1f%% of the query heads, %.1f%% of the intermediate channels\n",
              100.0 * double(heads) / double(cfg.n_heads * cfg.n_layers),
              100.0 * double(ff) / double(cfg.d_ff * cfg.n_layers));
}

}  // namespace

void add_info(CLI::App& app, Runner& run) {
  auto dir = std::make_shared<std::string>();
  auto threads = std::make_shared<int>(0);
  CLI::App* c = app.add_subcommand("info", "Architecture, parameters, dtypes, weight bytes, KV bytes per token");
  c->add_option("-m,--model", *dir, "Model folder or GGUF file")->required()->check(CLI::ExistingPath);
  c->add_option("-t,--threads", *threads, "CPU threads to report (0 = the default)")->capture_default_str();
  auto no_huge_pages = std::make_shared<bool>(false);
  c->add_flag("--no-huge-pages", *no_huge_pages, "Report the CPU backend's weight pages as with --no-huge-pages");
  c->callback([dir, threads, no_huge_pages, &run] {
    run = [dir, threads, no_huge_pages] {
      apply_threads(*threads);
      const std::optional<std::string> gguf = find_gguf_model(*dir);
      const ModelConfig cfg = load_model_config(*dir);
      const std::unique_ptr<TensorSource> weights = open_tensor_source(*dir);
      const WeightTable table = weight_table(cfg);
      validate_weights(table, *weights);
      int64_t params = 0, bytes = 0;
      std::map<std::string, int64_t> by_dtype;
      for (const auto& [name, t] : weights->all()) {
        int64_t n = 1;
        for (int64_t s : t->shape) n *= s;
        params += n;
        bytes += int64_t(t->nbytes);
        by_dtype[std::string(dtype_name(t->dtype))] += n;
      }
      std::printf("model:            %s\n", dir->c_str());
      std::printf("architecture:     %s (weight table: %zu tensors, %zu forward weights)\n",
                  cfg.model_type.c_str(), table.tensors.size(), table.weights.size());
      int64_t n_sliding = 0, n_moe = 0;
      for (int64_t il = 0; il < cfg.n_layers; ++il) {
        n_sliding += cfg.layer_attention(il) == LayerAttention::Sliding;
        n_moe += cfg.layer_is_moe(il);
      }
      if (cfg.mixed_attention())
        std::printf("layers:           %lld (%lld sliding-window, %lld full attention)\n", (long long)cfg.n_layers,
                    (long long)n_sliding, (long long)(cfg.n_layers - n_sliding));
      else
        std::printf("layers:           %lld\n", (long long)cfg.n_layers);
      std::printf("d_model / d_ff:   %lld / %lld%s\n", (long long)cfg.d_model, (long long)cfg.d_ff,
                  cfg.non_uniform() ? " (unpruned; each layer's below)" : "");
      if (n_moe > 0)
        std::printf("experts:          %lld per layer in %lld of %lld layers, top %lld per token, d_ff %lld each%s\n",
                    (long long)cfg.n_experts, (long long)n_moe, (long long)cfg.n_layers,
                    (long long)cfg.n_experts_per_tok, (long long)cfg.d_ff_expert,
                    cfg.moe_renormalize ? ", weights renormalised" : "");
      std::printf("heads:            %lld query, %lld key/value (%s), head_dim %lld\n", (long long)cfg.n_heads,
                  (long long)cfg.n_kv_heads,
                  cfg.n_kv_heads == cfg.n_heads ? "MHA" : cfg.n_kv_heads == 1 ? "MQA" : "GQA",
                  (long long)cfg.head_dim);
      if (cfg.non_uniform()) std::printf("                  (config.json's scalars; the layers' own widths below)\n");
      if (cfg.non_uniform()) print_layer_widths(cfg);
      std::printf("vocabulary:       %lld\n", (long long)cfg.n_vocab);
      std::printf("context:          %lld tokens%s\n", (long long)cfg.max_position,
                  cfg.sliding_window ? (", sliding window " + std::to_string(cfg.sliding_window)).c_str() : "");
      std::printf("rope theta:       %g%s", cfg.rope_theta,
                  cfg.rope_scaling.type == RopeScaling::Type::Llama3     ? " (llama3 scaling)"
                  : cfg.rope_scaling.type == RopeScaling::Type::Linear   ? " (linear scaling)"
                  : cfg.rope_scaling.type == RopeScaling::Type::LongRope ? " (longrope scaling)"
                                                                         : "");
      if (cfg.mixed_attention()) std::printf(", sliding-window layers %g", cfg.rope(LayerAttention::Sliding).theta);
      if (cfg.rotary_dim != cfg.head_dim) std::printf(", %lld of %lld dims rotated", (long long)cfg.rotary_dim,
                                                      (long long)cfg.head_dim);
      std::printf("\n");
      std::printf("tied embeddings:  %s\n", cfg.tie_word_embeddings ? "yes" : "no");
      std::printf("parameters:       %lld (%.2f M)\n", (long long)params, double(params) / 1e6);
      for (const auto& [dt, n] : by_dtype) std::printf("  %-5s           %lld parameters\n", dt.c_str(), (long long)n);
      std::printf("weight bytes:     %lld (%.2f MiB)%s\n", (long long)bytes, double(bytes) / (1 << 20),
                  gguf ? " after dequantization at load" : "");
      if (gguf) print_gguf_types(*gguf);
      std::printf("KV bytes/token:   %lld (f32), %lld (bf16/f16), %lld (int8, + scales)\n",
                  (long long)cfg.kv_bytes_per_token(4), (long long)cfg.kv_bytes_per_token(2),
                  (long long)cfg.kv_bytes_per_token(1));
      std::printf("cpu backend:      %d threads (default %d: physical cores, at most %d), kernels %s\n",
                  host_threads(), default_host_threads(), kMaxDefaultHostThreads, cpu::isa_report().c_str());
      std::printf("weight pages:     %s\n", weight_pages_report(!*no_huge_pages).c_str());
      return 0;
    };
  });
}

}  // namespace tf::cli
