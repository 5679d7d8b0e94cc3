// Model folders for the per-layer width tests (docs/PER_LAYER_WIDTHS.md) and the pruning tests
// (tests/prune: dead heads and channels, a pruned model's zeroed twin), made from a bundled
// Llama-family model (separate q/k/v/o and gate/up/down tensors, BF16): the same weights with
// some query heads, KV heads and MLP channels physically removed and config.json's layer_*
// arrays written (CutMode::Remove), or kept in place with their contribution zeroed, the
// o_proj columns of the removed heads and the down_proj columns of the removed channels set
// to zero (CutMode::Zero). The two compute the same function: what a removed head or channel
// adds to the residual stream passes through exactly those columns.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "test_util.h"

namespace tf::test {

// What one layer loses. Query heads by index; a removed KV head takes its whole group of
// query heads with it (list them too). Every kept KV head must keep as many query heads as the
// others, so that kept head i reads kept KV head i / group as in any GQA model.
struct LayerCut {
  std::vector<int64_t> heads, kv_heads, channels;
};

enum class CutMode : uint8_t { Remove, Zero };

// Indices [0, n) without those in `some`: the kept ones of a cut, or the cut of the kept ones.
template <class Int>
std::vector<int64_t> complement(int64_t n, const std::vector<Int>& some) {
  std::vector<int64_t> k;
  for (int64_t i = 0; i < n; ++i)
    if (std::find(some.begin(), some.end(), Int(i)) == some.end()) k.push_back(i);
  return k;
}

// A BF16 matrix [rows, cols] as raw 16-bit values.
struct Bf16Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<uint16_t> v;
  uint16_t& at(int64_t r, int64_t c) { return v[size_t(r * cols + c)]; }
};

// The rows groups `keep` (each of `group` rows) of m, in order.
inline Bf16Matrix keep_row_groups(const Bf16Matrix& m, const std::vector<int64_t>& keep, int64_t group) {
  Bf16Matrix out{.rows = int64_t(keep.size()) * group, .cols = m.cols};
  for (int64_t g : keep)
    out.v.insert(out.v.end(), m.v.begin() + g * group * m.cols, m.v.begin() + (g + 1) * group * m.cols);
  return out;
}

// The column groups `keep` (each of `group` columns) of m, in order.
inline Bf16Matrix keep_col_groups(const Bf16Matrix& m, const std::vector<int64_t>& keep, int64_t group) {
  Bf16Matrix out{.rows = m.rows, .cols = int64_t(keep.size()) * group};
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t g : keep)
      out.v.insert(out.v.end(), m.v.begin() + r * m.cols + g * group, m.v.begin() + r * m.cols + (g + 1) * group);
  return out;
}

// m with the column groups `zero` (each of `group` columns) set to zero.
inline Bf16Matrix zero_col_groups(Bf16Matrix m, const std::vector<int64_t>& zero, int64_t group) {
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t g : zero)
      for (int64_t c = g * group; c < (g + 1) * group; ++c) m.at(r, c) = 0;
  return m;
}

inline RawTensor raw_of(const std::string& name, const Bf16Matrix& m) {
  return RawTensor{name, "BF16", {m.rows, m.cols},
                   std::string(reinterpret_cast<const char*>(m.v.data()), m.v.size() * sizeof(uint16_t))};
}

// A BF16 vector tensor [values.size()].
inline RawTensor bf16_vector(const std::string& name, const std::vector<float>& values) {
  std::vector<uint16_t> b;
  for (float x : values) b.push_back(f32_to_bf16(x));
  return RawTensor{name, "BF16", {int64_t(values.size())},
                   std::string(reinterpret_cast<const char*>(b.data()), b.size() * sizeof(uint16_t))};
}

// Writes `dir`: the folder `src` (config.json changed by `config_edit`, the other small files
// copied) with its weights cut per `cuts` (one entry per layer, or fewer: the rest uncut) in
// `mode`, plus `extra` tensors (e.g. projection biases). Remove mode writes the layer_* arrays.
inline void write_cut_model(const std::string& src, const std::filesystem::path& dir, const std::vector<LayerCut>& cuts,
                            CutMode mode, const std::vector<RawTensor>& extra = {},
                            const nlohmann::json& config_edit = nlohmann::json::object()) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(src))
    if (e.path().extension() != ".safetensors" && e.path().filename() != "config.json")
      fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
  nlohmann::json cfg = load_json(src + "/config.json");
  const int64_t n_layers = cfg["num_hidden_layers"], n_heads = cfg["num_attention_heads"];
  const int64_t n_kv = cfg.value("num_key_value_heads", n_heads), d_ff = cfg["intermediate_size"];
  const int64_t hd = cfg.contains("head_dim") ? cfg["head_dim"].get<int64_t>()
                                              : cfg["hidden_size"].get<int64_t>() / n_heads;
  std::vector<int64_t> heads(size_t(n_layers), n_heads), kvs(size_t(n_layers), n_kv), ffs(size_t(n_layers), d_ff);

  SafetensorsFile in(src + "/model.safetensors");
  std::vector<RawTensor> out;
  for (const auto& [name, t] : in.tensors()) {
    RawTensor r{name, std::string(dtype_name(t.dtype)), t.shape,
                std::string(reinterpret_cast<const char*>(t.data), t.nbytes)};
    int64_t il = -1;
    if (std::sscanf(name.c_str(), "model.layers.%ld.", &il) != 1 || il >= int64_t(cuts.size()) || t.shape.size() != 2) {
      out.push_back(std::move(r));
      continue;
    }
    const LayerCut& c = cuts[size_t(il)];
    Bf16Matrix m{.rows = t.shape[0], .cols = t.shape[1], .v = std::vector<uint16_t>(t.nbytes / 2)};
    TF_ASSERT(t.dtype == DType::BF16, "{}: the cut models are made from BF16 weights", name);
    std::memcpy(m.v.data(), t.data, t.nbytes);
    const std::string suffix = name.substr(name.find('.', std::strlen("model.layers.")) + 1);
    if (mode == CutMode::Remove) {
      if (suffix == "self_attn.q_proj.weight") m = keep_row_groups(m, complement(n_heads, c.heads), hd);
      if (suffix == "self_attn.k_proj.weight" || suffix == "self_attn.v_proj.weight")
        m = keep_row_groups(m, complement(n_kv, c.kv_heads), hd);
      if (suffix == "self_attn.o_proj.weight") m = keep_col_groups(m, complement(n_heads, c.heads), hd);
      if (suffix == "mlp.gate_proj.weight" || suffix == "mlp.up_proj.weight")
        m = keep_row_groups(m, complement(d_ff, c.channels), 1);
      if (suffix == "mlp.down_proj.weight") m = keep_col_groups(m, complement(d_ff, c.channels), 1);
    } else {
      if (suffix == "self_attn.o_proj.weight") m = zero_col_groups(m, c.heads, hd);
      if (suffix == "mlp.down_proj.weight") m = zero_col_groups(m, c.channels, 1);
    }
    heads[size_t(il)] = n_heads - int64_t(c.heads.size());
    kvs[size_t(il)] = n_kv - int64_t(c.kv_heads.size());
    ffs[size_t(il)] = d_ff - int64_t(c.channels.size());
    out.push_back(raw_of(name, m));
  }
  for (const RawTensor& r : extra) out.push_back(r);
  if (mode == CutMode::Remove) {
    cfg["layer_num_attention_heads"] = heads;
    cfg["layer_num_key_value_heads"] = kvs;
    cfg["layer_intermediate_size"] = ffs;
  }
  cfg.update(config_edit);
  std::ofstream(dir / "config.json") << cfg.dump(2);
  write_safetensors(dir / "model.safetensors", out);
}

// The cut the per-layer tests use on tiny-main (6 layers, 4 query heads over 2 KV heads,
// intermediate 576): uneven across layers, one layer uncut, query heads removed within
// their KV group (layers 1 and 3), a whole KV group removed (layers 2 and 4), channels
// removed in most layers.
inline std::vector<LayerCut> tiny_main_cut() {
  auto every = [](int64_t from, int64_t step, int64_t n) {
    std::vector<int64_t> v;
    for (int64_t i = 0; i < n; ++i) v.push_back(from + i * step);
    return v;
  };
  return {
      LayerCut{},                                                         // layer 0: uncut
      LayerCut{.heads = {1, 3}, .channels = every(5, 7, 64)},             // one head per KV group
      LayerCut{.heads = {2, 3}, .kv_heads = {1}, .channels = every(0, 3, 192)},  // KV group 1
      LayerCut{.heads = {0, 2}},                                          // heads only
      LayerCut{.heads = {0, 1}, .kv_heads = {0}, .channels = every(100, 1, 288)},  // KV group 0, half the channels
      LayerCut{.channels = every(1, 2, 200)},                             // channels only
  };
}

}  // namespace tf::test
